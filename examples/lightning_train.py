"""A Lightning Trainer with telemetry: one callback, nothing else changes.

    python examples/lightning_train.py --run-dir runs/pl               # one process
    python examples/lightning_train.py --run-dir runs/pl --devices 2   # DDP, two gloo ranks (CPU)
    telemetry analyze runs/pl

With --devices 2 Lightning launches the second rank itself (it runs this script again). A telemetry
step is one optimizer step, numbered by trainer.global_step, also with gradient accumulation.
"""

import argparse
import os

import torch

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

from telemetry.integrations.lightning import TelemetryCallback


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default="runs/pl")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--accumulate", type=int, default=2, help="batches per optimizer step")
    args = ap.parse_args()

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(2048, 64, generator=g), torch.randn(2048, 1, generator=g))
    trainer = pl.Trainer(
        max_steps=args.steps,
        accumulate_grad_batches=args.accumulate,
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            TelemetryCallback(
                run_dir=args.run_dir,
                job="pl-example",
                prometheus_port=int(os.environ.get("EXAMPLE_PROMETHEUS_PORT", "9464")),
            )
        ],
    )
    trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=16))


if __name__ == "__main__":
    main()
