"""A Hugging Face Trainer with telemetry: one callback, nothing else changes.

    python examples/hf_trainer.py --run-dir runs/hf                       # one process
    torchrun --nproc_per_node 2 examples/hf_trainer.py --run-dir runs/hf  # two gloo ranks (CPU)
    telemetry analyze runs/hf

A tiny GPT-2 built from a config (no download) on random tokens, on the CPU. The callback starts
telemetry at the start of training (these keyword arguments go to telemetry.init) and stops it at
the end; every optimizer step is a telemetry step numbered by the Trainer's global_step.
"""

import argparse
import os
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from telemetry.integrations.huggingface import TelemetryCallback


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default="runs/hf")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--accumulate", type=int, default=2, help="gradient accumulation micro-steps per step")
    args = ap.parse_args()

    torch.set_num_threads(1)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-example-"),
        max_steps=args.steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=args.accumulate,
        logging_steps=5,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None,
    )
    telemetry_cb = TelemetryCallback(
        run_dir=args.run_dir, job="hf-example", prometheus_port=int(os.environ.get("EXAMPLE_PROMETHEUS_PORT", "9464"))
    )
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(512, 32, 256), callbacks=[telemetry_cb])
    trainer.train()


if __name__ == "__main__":
    main()
