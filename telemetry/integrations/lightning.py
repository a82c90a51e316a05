"""PyTorch Lightning: ``Trainer(..., callbacks=[TelemetryCallback()])``, from ``lightning`` or
``pytorch_lightning``, whichever is installed.

A telemetry step is one optimizer step, numbered by ``trainer.global_step`` (with gradient accumulation
it spans the batches up to the one whose optimizer stepped); phases ``forward``, ``backward`` and
``optimizer`` from the Trainer's hooks; tokens and samples from the batch (shapes only); ``self.log``
values from ``trainer.callback_metrics``; each checkpoint the Trainer writes timed in the step that
follows it. The hooks and the limits: docs/integrations.md, "PyTorch Lightning".
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, MutableMapping

if TYPE_CHECKING:  # either package has the same classes: the checker reads one
    import lightning.pytorch as pl
    import torch
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.pytorch.utilities.types import STEP_OUTPUT
else:
    try:
        import lightning.pytorch as pl
    except ImportError:  # pragma: no cover - the older package name
        try:
            import pytorch_lightning as pl
        except ImportError as exc:
            raise ImportError(
                "telemetry.integrations.lightning needs Lightning: pip install 'training-telemetry[lightning]'"
            ) from exc

import telemetry

from .loop import BACKWARD, FORWARD, OPTIMIZER, LoopTracker, guarded, numeric


class TelemetryCallback(pl.Callback):
    """A Lightning ``Callback`` recording the Trainer's steps; ``**init_kwargs`` go to ``telemetry.init``."""

    def __init__(self, *, log_metrics: bool = True, **init_kwargs: Any) -> None:
        super().__init__()
        self.tracker = LoopTracker(init_kwargs, split_forward_backward=False)
        self.log_metrics = log_metrics
        self._step_at_start = -1
        self._io: CheckpointIO | None = None  # the checkpoint_io whose save_checkpoint is timed (put back at the end)

    @guarded
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        launcher_environment(trainer)
        self.tracker.start(start_step=int(trainer.global_step))
        self._time_saves(trainer)

    def _time_saves(self, trainer: pl.Trainer) -> None:
        """Time each checkpoint the Trainer writes: its strategy's ``checkpoint_io.save_checkpoint``
        (on this instance, put back at the end of training) inside ``telemetry.checkpoint``, the bytes
        the written path's size."""
        io = getattr(getattr(trainer, "strategy", None), "checkpoint_io", None)
        save = getattr(io, "save_checkpoint", None)
        if io is None or save is None or getattr(save, "__wrapped_by_telemetry__", False):  # (no io: no save)
            return

        def timed(checkpoint: dict[str, Any], path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
            with telemetry.checkpoint("save", path=str(path)):
                return save(checkpoint, path, *args, **kwargs)

        timed.__wrapped_by_telemetry__ = True  # pyright: ignore[reportFunctionMemberAccess] - a function takes any attribute
        io.save_checkpoint = timed
        self._io = io

    @guarded
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        t = self.tracker
        if not t.in_step:
            t.begin_step(int(trainer.global_step))
            self._step_at_start = int(trainer.global_step)
        tokens, samples = batch_counts(batch)
        t.count(tokens, samples)
        t.begin_phase(FORWARD)

    @guarded
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self.tracker.begin_phase(BACKWARD)

    @guarded
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.tracker.end_phase(BACKWARD)

    @guarded
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        self.tracker.begin_phase(OPTIMIZER)

    @guarded
    def on_before_zero_grad(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        self.tracker.end_phase(OPTIMIZER)

    @guarded
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        t = self.tracker
        if int(trainer.global_step) == self._step_at_start:
            t.end_phase()  # an accumulation batch: the optimizer did not step, the step goes on
            return
        if self.log_metrics:
            values = numeric(dict(trainer.callback_metrics))
            if values:
                telemetry.log(**values)
        t.end_step(ok=True)

    @guarded
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.tracker.finish()  # the open step ended as failed; Lightning re-raises, on_train_end never comes

    @guarded
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._io is not None:
            # the class's own again
            self._io.__dict__.pop("save_checkpoint", None)  # pyright: ignore[reportAttributeAccessIssue] - an instance's __dict__ is a dict
            self._io = None
        self.tracker.finish()


def launcher_environment(trainer: pl.Trainer, environ: MutableMapping[str, str] | None = None) -> None:
    """Lightning's own DDP launcher starts the other ranks without torchrun's variables: say where
    this process sits the torchrun way (RANK, WORLD_SIZE, ...), where no launcher said it already."""
    environ = os.environ if environ is None else environ
    if any(k in environ for k in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")) or trainer.world_size <= 1:
        return
    environ.update(
        {
            "RANK": str(trainer.global_rank),
            "WORLD_SIZE": str(trainer.world_size),
            "LOCAL_RANK": str(trainer.local_rank),
            "LOCAL_WORLD_SIZE": str(trainer.num_devices),
            "GROUP_RANK": str(trainer.node_rank),
        }
    )


def batch_counts(batch: Any) -> tuple[int, int]:
    """(tokens, samples) of a batch from its tensors' shapes: ``input_ids`` of a dict, else the first
    tensor; tokens only when that tensor holds integers (token ids)."""
    first = None
    if isinstance(batch, dict):
        first = batch.get("input_ids")
        if first is None:
            first = next((v for v in batch.values() if hasattr(v, "shape")), None)
    elif isinstance(batch, (list, tuple)):
        first = next((v for v in batch if hasattr(v, "shape")), None)
    elif hasattr(batch, "shape"):
        first = batch
    if first is None or not getattr(first, "shape", None):
        return 0, 0
    tokens = 0 if first.is_floating_point() else int(first.numel())
    return tokens, int(first.shape[0])
