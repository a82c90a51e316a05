"""The Lightning callback (telemetry/integrations/lightning.py) on a real Trainer (a tiny regression
on the CPU): steps are optimizer steps numbered as the Trainer's, an exception ends the step as
failed and reaches the user. The example under DDP: tests/integration/test_examples.py."""

import pytest
import torch

import telemetry
from telemetry.analysis.inputs.load import open_input

pl = pytest.importorskip("lightning.pytorch")  # this file's own: without transformers these tests still run
from telemetry.integrations.lightning import TelemetryCallback as PLCallback  # noqa: E402 - after importorskip
from telemetry.integrations.lightning import batch_counts  # noqa: E402 - after importorskip


def _table(run_dir):
    run = open_input(run_dir)
    assert run.warnings == []
    return run.table.set_index("step")


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


def _fit(callback, module, samples=256, **kw):
    """Fit ``module`` on ``samples`` random rows with ``callback`` (a list: several); ``kw`` to the Trainer
    (checkpointing off unless it says)."""
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(samples, 16, generator=g), torch.randn(samples, 1, generator=g))
    trainer = pl.Trainer(
        **{
            "accelerator": "cpu",
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "callbacks": callback if isinstance(callback, list) else [callback],
            **kw,
        }
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


def test_lightning_checkpoints_are_timed_with_their_bytes_in_the_step_that_follows(tmp_path):
    run_dir = str(tmp_path / "run")
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=2, save_top_k=-1)
    trainer = _fit(
        [PLCallback(run_dir=run_dir, sinks=["store"], announce=False), ckpt],
        Regression(),
        samples=64,
        enable_checkpointing=True,
        max_steps=5,
    )
    t = _table(run_dir)
    files = sorted((tmp_path / "ckpt").glob("*.ckpt"))
    assert len(files) >= 2
    saved = t[t["io.checkpoint_saves"] > 0]
    # each save after step 1 and step 3 (every 2 optimizer steps) counts in the step after it
    assert list(saved.index) == [2, 4], t[["io.checkpoint_saves", "io.checkpoint_bytes"]]
    sizes = {f.stat().st_size for f in files}
    assert set(saved["io.checkpoint_bytes"].astype(int)) <= sizes and (saved["io.checkpoint_s"] > 0).all()
    assert "save_checkpoint" not in vars(trainer.strategy.checkpoint_io)  # put back at the end
