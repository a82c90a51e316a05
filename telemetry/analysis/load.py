"""The one loader: any input analysis accepts, opened into a steps table and what else it holds.

Inputs: a run directory (the run store; also while the job still writes it, or after it crashed),
a steps table (``.csv``, ``.parquet``/``.pq``), or a per-operation trace in either file type
(converted by :mod:`.formats`). The CLI, the online analyzer's callers, the dashboard and the
exports all open inputs here and nowhere else, so a new input format is one branch in
:func:`open_input` plus its converter.

>>> run = open_input("runs/exp1")                      # doctest: +SKIP
>>> run.kind, len(run.table), run.world_size           # doctest: +SKIP
('run_dir', 800, 4)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..store import layout, read_run
from .formats import is_per_op_trace, per_op_to_steps
from .table import TableError, records_to_table, validate

log = logging.getLogger("telemetry")

RUN_DIR = "run_dir"
STEPS_TABLE = "steps_table"
PER_OP_TRACE = "per_op_trace"
ACCEPTED = "a run directory, a steps table or per-operation trace (.csv, .parquet)"


@dataclass
class RunInput:
    """What one input holds. ``table`` is always a validated steps table (maybe empty)."""

    source: str  # the path as given
    kind: str  # RUN_DIR, STEPS_TABLE or PER_OP_TRACE
    table: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)  # a run directory's meta.json
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)  # each rank's identity (host, device, ...)
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)  # heartbeats by rank (run dirs)
    records: list[dict[str, Any]] = field(default_factory=list)  # raw step records with spans (run dirs)
    warnings: list[str] = field(default_factory=list)  # what was skipped while reading

    @property
    def world_size(self) -> int | None:
        return self.meta.get("world_size")

    @property
    def hosts(self) -> dict[str, str] | None:
        return self.meta.get("hosts")


def open_input(path: str) -> RunInput:
    """Open ``path``; raises :class:`TableError` naming what is wrong and what is accepted."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if not layout.is_run_dir(path):
            raise TableError(f"{path!r} is a directory but not a run directory (no {layout.META} or "
                             f"{layout.RANKS_DIR}/)")
        run = read_run(path)
        return RunInput(path, RUN_DIR, records_to_table(run.steps), meta=run.meta, ranks=run.ranks,
                        progress=run.progress, records=run.steps, warnings=run.warnings)
    if not os.path.exists(path):
        raise TableError(f"{path!r} does not exist; accepted: {ACCEPTED}")
    raw = _read_file(path)
    name = os.path.basename(path)
    kind = STEPS_TABLE
    if is_per_op_trace(raw):
        log.info("telemetry: %s: per-operation trace (%d operations) converted to a steps table", name, len(raw))
        raw, kind = per_op_to_steps(raw), PER_OP_TRACE
    return RunInput(path, kind, validate(raw, source=name, owned=True))


def _read_file(path: str) -> pd.DataFrame:
    low = path.lower()
    if low.endswith(".csv"):
        try:
            return pd.read_csv(path)
        except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
            raise TableError(f"{path}: not a readable CSV file ({exc})") from None
    if low.endswith((".parquet", ".pq")):
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad files
            raise TableError(f"{path}: not a readable Parquet file ({exc})") from None
    raise TableError(f"{path!r}: unknown file type; accepted: {ACCEPTED}")
