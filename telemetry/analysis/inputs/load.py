"""The one loader: any input analysis accepts, opened into a steps table and what else it holds.

Inputs: a run directory (the run store; also while the job still writes it, or after it crashed),
a steps table (``.csv``, ``.parquet``/``.pq``), a per-operation trace in either file type
(converted by :mod:`.formats`), or a directory of per-rank PyTorch profiler traces (:mod:`.kineto`). The CLI, the online analyzer's callers, the dashboard and the
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
from typing import Any, Sequence, cast

import pandas as pd

from ...steptable.table import TableError, columns_to_table, records_to_table, validate
from ...store import layout, read_run
from .formats import is_per_op_trace, per_op_to_steps

log = logging.getLogger("telemetry")

RUN_DIR = "run_dir"
STEPS_TABLE = "steps_table"
PER_OP_TRACE = "per_op_trace"
KINETO_TRACES = "kineto_traces"
ACCEPTED = (
    "a run directory, a steps table or per-operation trace (.csv, .parquet), or a directory of "
    "PyTorch profiler traces (.json, .json.gz)"
)


@dataclass
class RunInput:
    """What one input holds. ``table`` is always a validated steps table (maybe empty)."""

    source: str  # the path as given
    kind: str  # RUN_DIR, STEPS_TABLE, PER_OP_TRACE or KINETO_TRACES
    table: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)  # a run directory's meta.json
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)  # each rank's identity (host, device, ...)
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)  # heartbeats by rank (run dirs)
    records: Sequence[dict[str, Any]] = field(default_factory=list)  # raw step records with spans (run dirs)
    warnings: list[str] = field(default_factory=list)  # what was skipped while reading
    online_findings: list[dict[str, Any]] = field(default_factory=list)  # what online detection said (run dirs)
    ops: pd.DataFrame | None = field(default=None, repr=False)  # a per-operation trace's own rows (PER_OP_TRACE)

    @property
    def world_size(self) -> int | None:
        return self.meta.get("world_size")

    @property
    def hosts(self) -> dict[str, str] | None:
        return self.meta.get("hosts")


def open_input(path: str, steps: tuple[int, int] | None = None, rows: bool = True) -> RunInput:
    """Open ``path``; raises :class:`TableError` naming what is wrong and what is accepted.
    ``steps``: only the steps first..last (inclusive), read as such from a run directory's segments.
    ``rows`` False: a run directory's meta, heartbeats and findings, with none of its segments' rows
    (a run read from its blocks of steps)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if not layout.is_run_dir(path):
            from . import kineto

            if kineto.is_trace_dir(path):
                return _open_kineto(path, steps)
            raise TableError(
                f"{path!r} is a directory but neither a run directory (no {layout.META} or "
                f"{layout.RANKS_DIR}/) nor a directory of PyTorch profiler traces (no .json or "
                ".json.gz file with traceEvents)"
            )
        run = read_run(path, steps, columns=rows)
        table = records_to_table(run.lines, run.warnings)
        if run.columns is not None:
            columns, run.columns = run.columns, None  # converted in place: the only reference
            table = columns_to_table(columns, table, run.warnings)
            del columns
        nodes = {r: info.get("node") for r, info in run.ranks.items() if info.get("node")}
        if nodes and len(table):  # the layout: ranks that share a node (a slow node is one finding)
            table["node"] = table["rank"].map(nodes).astype(object)
        return RunInput(
            path,
            RUN_DIR,
            table,
            meta=run.meta,
            ranks=run.ranks,
            progress=run.progress,
            records=run.steps,
            warnings=run.warnings + _coverage(table),
            online_findings=run.findings,
        )
    if not os.path.exists(path):
        raise TableError(f"{path!r} does not exist; accepted: {ACCEPTED}")
    raw = _read_file(path)
    name = os.path.basename(path)
    kind, ops = STEPS_TABLE, None
    warnings: list[str] = []
    if is_per_op_trace(raw):
        log.info("telemetry: %s: per-operation trace (%d operations) converted to a steps table", name, len(raw))
        ops, raw, kind = raw, per_op_to_steps(raw, name, warnings), PER_OP_TRACE
    table = validate(raw, source=name, owned=True, warnings=warnings)
    if steps is not None:
        table = cast(pd.DataFrame, table[(table["step"] >= steps[0]) & (table["step"] <= steps[1])]).reset_index(
            drop=True
        )
    return RunInput(path, kind, table, warnings=warnings + _coverage(table), ops=ops)


def open_frame(table: pd.DataFrame, name: str = "<table>") -> RunInput:
    """A steps table already in memory (a DataFrame), validated as a file's would be (not changed in place)."""
    warnings: list[str] = []
    t = validate(table, source=name, warnings=warnings)
    return RunInput(name, STEPS_TABLE, t, warnings=warnings + _coverage(t))


def _open_kineto(path: str, steps: tuple[int, int] | None) -> RunInput:
    """A directory of per-rank PyTorch profiler (Kineto) traces (:mod:`.kineto`)."""
    from .kineto import read_trace_dir

    warnings: list[str] = []
    raw, meta, ranks = read_trace_dir(path, warnings)
    table = validate(raw, source=os.path.basename(os.path.normpath(path)), owned=True, warnings=warnings)
    if steps is not None:
        table = cast(pd.DataFrame, table[(table["step"] >= steps[0]) & (table["step"] <= steps[1])]).reset_index(
            drop=True
        )
    return RunInput(path, KINETO_TRACES, table, meta=meta, ranks=ranks, warnings=warnings + _coverage(table))


def _coverage(table: pd.DataFrame) -> list[str]:
    """What the input lacks that the analysis needs to be trusted."""
    ranks = table["rank"].nunique() if len(table) else 0
    if ranks > 1 and ("comm_s" not in table.columns or not (table["comm_s"].fillna(0) > 0).any()):
        return [
            f"{ranks} ranks but no time in collectives was recorded: every rank's step counts as "
            "compute, so a straggler cannot be told from the ranks waiting for it (DDP's all-reduce "
            "is timed by telemetry's comm hook, set at the model's first forward unless the model "
            "has a hook of its own; collectives bound before telemetry.init are not seen, nor those "
            "inside a torch.compile'd graph: tensor-parallel collectives are timed in eager mode only)"
        ]
    return []


def _read_file(path: str) -> pd.DataFrame:
    low = path.lower()
    if low.endswith(".csv"):
        try:
            return pd.read_csv(path)
        except (ValueError, UnicodeDecodeError, pd.errors.EmptyDataError, OSError) as exc:  # ParserError too
            raise TableError(f"{path}: not a readable CSV file ({str(exc).strip()})") from None
    if low.endswith((".parquet", ".pq")):
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad files
            raise TableError(f"{path}: not a readable Parquet file ({str(exc).strip()})") from None
    raise TableError(f"{path!r}: unknown file type; accepted: {ACCEPTED}")
