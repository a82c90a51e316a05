"""The Hugging Face and Lightning callbacks on real Trainers (tiny models on the CPU): every optimizer
step recorded under the Trainer's own step number, its phases, tokens and logged values; an orphaned
step, evaluation in between, and a broken telemetry never reach the Trainer."""

import os
import subprocess
import sys

import pytest
import torch

import telemetry
from telemetry.analysis.load import open_input
from tests.helpers.servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _table(run_dir):
    run = open_input(run_dir)
    assert run.warnings == []
    return run.table.set_index("step")


# ---- Hugging Face -----------------------------------------------------------------------------
transformers = pytest.importorskip("transformers")
from telemetry.integrations.huggingface import TelemetryCallback as HFCallback  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=64, length=16):
        self.ids = torch.randint(0, 100, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(cfg)


def _trainer(tmp_path, callback, model=None, **args):
    kw = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=6,
        logging_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    kw.update(args)
    return transformers.Trainer(
        model=model or _gpt2(),
        args=transformers.TrainingArguments(**kw),
        train_dataset=Tokens(),
        eval_dataset=Tokens(16),
        callbacks=[callback],
    )


def test_hf_records_every_optimizer_step_with_phases_tokens_and_the_trainers_logs(tmp_path):
    run_dir = str(tmp_path / "run")
    trainer = _trainer(tmp_path, HFCallback(run_dir=run_dir, sinks=["store"], announce=False))
    trainer.train()
    assert telemetry.session() is None  # the callback started telemetry, and stopped it at the end
    t = _table(run_dir)
    assert list(t.index) == [0, 1, 2, 3, 4, 5] and t["ok"].all()
    assert (t["tokens"] == 2 * 4 * 16).all() and (t["samples"] == 8).all()  # 2 micro-batches of 4 x 16
    for phase in ("forward_s", "backward_s", "optimizer_s"):
        assert (t[phase] > 0).all(), phase
    assert (t["forward_s"] + t["backward_s"] + t["optimizer_s"] <= t["duration_s"] * 1.001).all()
    # the Trainer logs after step 1 (global_step 2) and 3: recorded with the next step, the same values
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert t["log.loss"].dropna().round(4).tolist() == [round(v, 4) for v in losses[:2]]
    assert t["log.loss"].dropna().index.tolist() == [2, 4]


def test_hf_evaluation_between_steps_is_not_a_step_and_the_users_own_session_stands(tmp_path):
    run_dir = str(tmp_path / "run")
    telemetry.init(run_dir=run_dir, sinks=["store"], announce=False)
    trainer = _trainer(tmp_path, HFCallback(), eval_strategy="steps", eval_steps=2)
    trainer.train()
    s = telemetry.session()
    assert not s.closed  # the user started it: the user stops it
    telemetry.shutdown()
    assert s.stats()["unattributed_events"] == 0
    t = _table(run_dir)
    assert list(t.index) == [0, 1, 2, 3, 4, 5]
    assert (t["samples"] == 8).all()  # the evaluation's forwards counted nowhere


class Exploding(torch.nn.Module):
    """A GPT-2 whose forward raises on one call: an exception in the middle of a step."""

    def __init__(self, at_call):
        super().__init__()
        self.inner, self.calls, self.at = _gpt2(), 0, at_call

    def forward(self, input_ids=None, labels=None):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("boom in forward")
        return self.inner(input_ids=input_ids, labels=labels)


def test_hf_an_exception_mid_step_reaches_the_user_unchanged_and_the_orphaned_step_is_failed(tmp_path):
    run_dir = str(tmp_path / "run")
    cb = HFCallback(run_dir=run_dir, sinks=["store"], announce=False)
    model = Exploding(at_call=5)  # the first micro-batch of step 2
    with pytest.raises(RuntimeError, match="boom in forward"):
        _trainer(tmp_path, cb, model=model).train()
    # the user resumes with the same callback: the orphaned step is ended as failed, training goes on
    _trainer(tmp_path, cb, model=model, max_steps=3).train()  # a new Trainer: steps 0-2 again
    run = open_input(run_dir)
    ended = [(r["step"], r["ok"]) for r in run.records]
    assert ended == [(0, True), (1, True), (2, False), (0, True), (1, True), (2, True)]
    assert cb.tracker.errors.total == 0


def test_hf_a_broken_telemetry_never_raises_into_the_trainer(tmp_path, monkeypatch, caplog):
    run_dir = str(tmp_path / "run")
    cb = HFCallback(run_dir=run_dir, sinks=["store"], announce=False)

    def broken(*a, **k):
        raise OSError("telemetry is broken")

    monkeypatch.setattr(telemetry, "step", broken)
    trainer = _trainer(tmp_path, cb)
    trainer.train()
    assert trainer.state.global_step == 6
    assert cb.tracker.errors.counts == {"on_step_begin": 6}
    assert sum("on_step_begin failed" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_hf_bad_settings_are_an_error_when_the_callback_is_made():
    with pytest.raises(ValueError, match="flush_interval_s"):
        HFCallback(flush_interval_s=-1)


@pytest.mark.slow
def test_hf_example_runs_on_two_gloo_ranks_under_torchrun(tmp_path):
    run_dir = str(tmp_path / "hf")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "examples/hf_trainer.py",
            "--steps",
            "6",
            "--run-dir",
            run_dir,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "EXAMPLE_PROMETHEUS_PORT": str(free_port())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_input(run_dir)
    t = run.table
    assert run.warnings == [] and sorted(t["rank"].unique()) == [0, 1]
    assert t.groupby("rank")["step"].apply(list).tolist() == [list(range(6))] * 2
    assert (t["comm_s"] > 0).all()  # DDP's gradient all-reduce over gloo


# ---- Lightning --------------------------------------------------------------------------------
pl = pytest.importorskip("lightning.pytorch")
from telemetry.integrations.lightning import TelemetryCallback as PLCallback  # noqa: E402 - after importorskip
from telemetry.integrations.lightning import batch_counts  # noqa: E402 - after importorskip


class Regression(pl.LightningModule):
    def __init__(self, fail_at=None):
        super().__init__()
        self.net, self.fail_at = torch.nn.Linear(16, 1), fail_at

    def training_step(self, batch, i):
        if i == self.fail_at:
            raise ValueError("boom in training_step")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(callback, module, **kw):
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 16, generator=g), torch.randn(256, 1, generator=g))
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        **kw,
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    return trainer


def test_lightning_steps_are_optimizer_steps_numbered_as_the_trainer_with_accumulation(tmp_path):
    run_dir = str(tmp_path / "run")
    trainer = _fit(
        PLCallback(run_dir=run_dir, sinks=["store"], announce=False),
        Regression(),
        max_steps=5,
        accumulate_grad_batches=3,
    )
    assert trainer.global_step == 5 and telemetry.session() is None
    t = _table(run_dir)
    assert list(t.index) == [0, 1, 2, 3, 4] and t["ok"].all()
    assert (t["samples"] == 3 * 8).all()  # three batches of 8 per optimizer step
    for phase in ("forward_s", "backward_s", "optimizer_s"):
        assert (t[phase] > 0).all(), phase
    assert t["log.train_loss"].notna().all()


def test_lightning_an_exception_ends_the_step_as_failed_and_reaches_the_user(tmp_path):
    run_dir = str(tmp_path / "run")
    with pytest.raises(ValueError, match="boom in training_step"):
        _fit(PLCallback(run_dir=run_dir, sinks=["store"], announce=False), Regression(fail_at=4), max_steps=5)
    assert telemetry.session() is None  # flushed and stopped on the way out
    t = _table(run_dir)
    assert t["ok"].tolist() == [True] * 4 + [False]


def test_lightning_batch_counts_read_shapes_only():
    ids = torch.randint(0, 9, (4, 32))
    assert batch_counts({"input_ids": ids, "mask": torch.ones(4, 32)}) == (128, 4)
    assert batch_counts((torch.randn(8, 3), torch.randn(8, 1))) == (0, 8)
    assert batch_counts(ids) == (128, 4) and batch_counts("text") == (0, 0) and batch_counts([]) == (0, 0)


@pytest.mark.slow
def test_lightning_example_runs_ddp_on_two_gloo_ranks(tmp_path):
    run_dir = str(tmp_path / "pl")
    proc = subprocess.run(
        [sys.executable, "examples/lightning_train.py", "--devices", "2", "--steps", "6", "--run-dir", run_dir],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MASTER_PORT": str(free_port()),
            "EXAMPLE_PROMETHEUS_PORT": str(free_port()),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_input(run_dir)
    t = run.table
    assert run.warnings == [] and sorted(t["rank"].unique()) == [0, 1]
    assert t.groupby("rank")["step"].apply(list).tolist() == [list(range(6))] * 2
    assert (t["comm_s"] > 0).all()
