"""Hugging Face ``transformers``: ``Trainer(..., callbacks=[TelemetryCallback()])``.

Records every optimizer step (numbered by the Trainer's ``global_step``), its ``optimizer`` phase, and
``forward`` and ``backward`` through hooks on the model (the Trainer does not expose them), with tokens
and the Trainer's logged scalars (logged after a step has ended, so recorded with the step that
follows); a checkpoint the Trainer saves is marked after the fact, from its files. ``telemetry.init``
is called at ``on_train_begin`` with the keyword arguments given here, unless the user started
telemetry already; the session it started is shut down at ``on_train_end``. What each hook records
and the limits: docs/integrations.md, "Hugging Face".
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised where transformers is absent
    raise ImportError(
        "telemetry.integrations.huggingface needs transformers: pip install 'training-telemetry[hf]'"
    ) from exc

import telemetry

from ..hooks.checkpoint import mark_saved
from .loop import OPTIMIZER, LoopTracker, guarded, numeric

if TYPE_CHECKING:
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments

log = logging.getLogger("telemetry")


class TelemetryCallback(TrainerCallback):
    """A ``TrainerCallback`` recording the Trainer's steps; ``**init_kwargs`` go to ``telemetry.init``.

    ``split_forward_backward=False`` leaves the model unhooked (no forward/backward phases).
    """

    def __init__(self, *, split_forward_backward: bool = True, **init_kwargs: Any) -> None:
        self.tracker = LoopTracker(init_kwargs, split_forward_backward)
        self._tokens_seen = 0
        self.logs_after_last_step = 0  # the Trainer's logs with no step after them: not recorded
        self._said_save = False

    @guarded
    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        self.tracker.start(start_step=int(state.global_step))
        self.tracker.hook(model)
        self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)

    @guarded
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.tracker.begin_step(int(state.global_step))

    @guarded
    def on_substep_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.tracker.end_phase()  # a micro-step's backward

    @guarded
    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.tracker.begin_phase(OPTIMIZER)

    @guarded
    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.tracker.end_phase(OPTIMIZER)

    @guarded
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        tokens = seen - self._tokens_seen if seen > self._tokens_seen else None  # else: counted from input_ids
        self._tokens_seen = seen
        self.tracker.end_step(ok=True, tokens=tokens)

    @guarded
    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        # Logged after a step ended, so recorded with the next step; after the last step there is
        # none (the final loss and the run summary): counted here, not recorded.
        values = numeric(logs)
        if not values:
            return
        if state.max_steps and state.global_step >= state.max_steps:
            self.logs_after_last_step += 1
            return
        telemetry.log(**values)

    @guarded
    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not getattr(state, "is_world_process_zero", True):
            return  # the main process writes the checkpoint's folder; each rank would count it again
        assert args.output_dir is not None  # TrainingArguments sets one when it is not given
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")  # the Trainer's naming
        if mark_saved(folder) and not self._said_save:
            self._said_save = True
            log.info(
                "telemetry: the Trainer's checkpoints are marked from their files after each save (bytes, and "
                "the span of their write times: a lower bound of the time it blocked)"
            )

    @guarded
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.tracker.finish()
