"""A training loop seen only through a framework's callbacks, as telemetry steps and phases.

A framework tells us "a step begins", "the optimizer is about to step", "a step ended" at separate
calls; :class:`LoopTracker` holds the open step and phase between them, counts tokens from the
model's inputs (module hooks: shapes only, never a device sync), and splits forward from backward
with a forward hook on the model where the framework does not say. Every entry point is guarded:
an error inside telemetry is logged once and counted (``errors``), never raised into the framework.
An orphaned step (the framework raised in the middle of one, or evaluation ran without ending it)
is ended as failed when the next one begins or training ends.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar, cast

import telemetry

from ..logonce import LogOnce

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

    from ..recorder.null import NullContext, NullStep
    from ..recorder.wall import PhaseContext, StepContext

log = logging.getLogger("telemetry")

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"

Method = TypeVar("Method", bound=Callable[..., None])


class _Tracked(Protocol):
    tracker: LoopTracker


def guarded(method: Method) -> Method:
    """Run a callback method; an exception inside it is logged once (by method) and counted."""

    @functools.wraps(method)
    def run(self: _Tracked, *args: Any, **kwargs: Any) -> None:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - telemetry must never break the framework's loop
            self.tracker.errors(
                method.__name__,
                "telemetry: %s.%s failed: %r (training goes on; further failures are counted)",
                type(self).__name__,
                method.__name__,
                exc,
            )
            return None

    return cast("Method", run)  # the method's own signature: a callback returns nothing either way


class LoopTracker:
    """The open step and phase of one process's training loop, driven by callbacks."""

    def __init__(self, init_kwargs: dict[str, Any], split_forward_backward: bool = True) -> None:
        self.init_kwargs = dict(init_kwargs)
        # Bad settings are an error now, in the user's hands, not later inside the framework.
        telemetry.Config.resolve(self.init_kwargs)
        self.split = split_forward_backward
        self.errors = LogOnce()
        self.owns_session = False
        self._step: StepContext | NullStep | None = None
        self._phase: PhaseContext | NullContext | None = None
        self._phase_name: str | None = None
        self._hooks: list[RemovableHandle] = []
        self._tokens = 0
        self._samples = 0

    # ---- session ------------------------------------------------------------------------
    def start(self, start_step: int = 0) -> None:
        """Start telemetry unless the user already did (then their settings stand)."""
        s = telemetry.session()
        if s is None or s.closed:
            kwargs = {"start_step": start_step, **self.init_kwargs}
            telemetry.init(**kwargs)
            self.owns_session = True

    def finish(self) -> None:
        """Training ended: an open step is ended as failed (it never completed), hooks removed,
        and the session shut down if this tracker started it."""
        self.end_step(ok=False)
        self.unhook()
        if self.owns_session:
            self.owns_session = False
            telemetry.shutdown()

    # ---- steps and phases ---------------------------------------------------------------
    @property
    def in_step(self) -> bool:
        return self._step is not None

    def begin_step(self, index: int) -> None:
        if self._step is not None:  # orphaned: the framework never ended the last one
            self.end_step(ok=False)
        self._tokens = self._samples = 0
        ctx = telemetry.step(index=index)
        ctx.__enter__()
        self._step = ctx

    def end_step(self, ok: bool = True, tokens: int | None = None, samples: int | None = None) -> None:
        if self._step is None:
            return
        self.end_phase()
        counts = {
            "tokens": self._tokens if tokens is None else tokens,
            "samples": self._samples if samples is None else samples,
        }
        counts = {k: v for k, v in counts.items() if v}
        if counts:
            telemetry.log(**counts)
        ctx, self._step = self._step, None
        exc = None if ok else _Orphaned
        ctx.__exit__(exc, None, None)

    def begin_phase(self, name: str) -> None:
        """End the open phase (phases of a step follow each other) and open ``name``."""
        if self._step is None:
            return
        self.end_phase()
        ctx = telemetry.phase(name)
        ctx.__enter__()
        self._phase, self._phase_name = ctx, name

    def end_phase(self, name: str | None = None) -> None:
        """End the open phase (only if it is ``name``, when given)."""
        if self._phase is None or (name is not None and self._phase_name != name):
            return
        ctx, self._phase, self._phase_name = self._phase, None, None
        ctx.__exit__(None, None, None)

    @property
    def phase_name(self) -> str | None:
        return self._phase_name

    def count(self, tokens: int = 0, samples: int = 0) -> None:
        self._tokens += tokens
        self._samples += samples

    # ---- module hooks: forward / backward split and token counts ------------------------
    def hook(self, model: torch.nn.Module | None) -> None:
        """Forward hooks on the model: forward starts at its call and backward at its return."""
        if model is None or self._hooks:
            return
        self._hooks.append(model.register_forward_pre_hook(self._forward_pre, with_kwargs=True))
        self._hooks.append(model.register_forward_hook(self._forward_post))

    def unhook(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def _forward_pre(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        try:
            # Outside a step (evaluation), or inside backward (activation checkpointing re-runs the
            # forward there), a forward is not the step's forward.
            if self._step is None or self._phase_name == BACKWARD:
                return
            ids = kwargs.get("input_ids")
            if ids is None and args and getattr(args[0], "is_floating_point", None) is not None:
                ids = args[0]
            if ids is not None and hasattr(ids, "shape") and len(ids.shape) >= 1:
                self.count(tokens=int(ids.numel()) if not ids.is_floating_point() else 0, samples=int(ids.shape[0]))
            if self.split:
                self.begin_phase(FORWARD)
        except Exception as exc:  # noqa: BLE001 - a model hook must never break the user's forward
            self.errors("forward_pre", "telemetry: forward hook failed: %r (counted)", exc)
        return None

    def _forward_post(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        try:
            if self.split and self._phase_name == FORWARD:
                self.begin_phase(BACKWARD)  # until the framework says the micro-step or step is done
        except Exception as exc:  # noqa: BLE001 - a model hook must never break the user's forward
            self.errors("forward_post", "telemetry: forward hook failed: %r (counted)", exc)
        return None


class _Orphaned(Exception):
    """Marks a step ended without the framework saying it completed (recorded as failed)."""


def numeric(logs: dict[str, Any] | None) -> dict[str, object]:
    """The loggable numbers among a framework's logged values, under telemetry.log's name rules."""
    out: dict[str, object] = {}
    for k, v in (logs or {}).items():
        if isinstance(v, bool):
            continue
        if not isinstance(v, (int, float)):
            numel = getattr(v, "numel", None)  # a one-element tensor: telemetry.log reads it without a sync
            if numel is None or numel() != 1:
                continue
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in str(k))
        if name and not name[0].isdigit() and name not in ("tokens", "samples"):
            out[name] = v
    return out
