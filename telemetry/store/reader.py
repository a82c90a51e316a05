"""Reading a run directory, while the job runs or after it crashed: format 2 (tails and columnar
segments, :mod:`.tails`, :mod:`.segreads`) and format 1 (one JSON object per step line, ``rank-N.steps.jsonl``).

A torn last line (the process died mid-write) is skipped with a warning; a corrupt line elsewhere
is skipped and counted; neither is fatal, and nothing is invented in their place. The step
columns are read eagerly; records with their spans (format 1's dicts) only when asked
(:attr:`RunData.steps`).

>>> run = read_run("runs/exp1")        # doctest: +SKIP
>>> run.steps[0]["duration_s"]         # doctest: +SKIP

The steps table of a run is opened by the one loader, :func:`telemetry.analysis.inputs.load.open_input`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, overload

import pyarrow as pa
import pyarrow.parquet as pq

from . import layout
from .catalogue import rank_files
from .ended import unclean_end
from .segreads import read_records, read_step_columns, record_dict
from .tails import TailDecoder

log = logging.getLogger("telemetry")


class LazyRecords(Sequence):
    """A list of records read on first use (reading spans costs more than the steps table)."""

    def __init__(self, load: Callable[[], list[dict[str, Any]]]) -> None:
        self._load = load
        self._items: list[dict[str, Any]] | None = None

    def _all(self) -> list[dict[str, Any]]:
        if self._items is None:
            self._items = self._load()
        return self._items

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._all())


@dataclass
class RunData:
    run_dir: str
    meta: dict[str, Any]
    ranks: dict[int, dict[str, Any]]
    lines: list[dict[str, Any]]  # format 1's step lines (dicts), in file order
    progress: dict[int, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # written by online detection
    columns: pa.Table | None = None  # format 2's step columns, read after format 1's lines

    @property
    def steps(self) -> LazyRecords:
        """Every step record (dicts, spans included), format 1's lines first: read when first used."""
        return LazyRecords(lambda: self.lines + read_records(self.run_dir, []))


class TailFollower:
    """Follows one rank's records as they are written (format 2), for a live progress display:
    each call returns the records that appeared since the last. Records sealed away before they
    were read come back with their step, duration and logged values only."""

    def __init__(self, run_dir: str, rank: int) -> None:
        self.run_dir, self.rank = run_dir, rank
        self.seq, self.offset, self.seen = 0, 0, 0  # current file, bytes read of its tail, records of it
        self.last_step: int | None = None  # of the last record returned
        self._partial = b""
        self._decoder = TailDecoder()

    def read_new(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for seq, kinds in sorted(rank_files(self.run_dir).get(self.rank, {}).items()):
            if seq < self.seq:
                continue
            if seq > self.seq:
                # a compacted segment holding files read already (FIRST <= the file being read):
                # its rows up to the last step returned were returned
                last_step = self.last_step
                merged = "first" in kinds and int(kinds["first"]) <= self.seq and last_step is not None
                self.seq, self.offset, self._partial = seq, 0, b""
                self.seen = self._rows_through(kinds["seg"], last_step) if merged and last_step is not None else 0
                self._decoder = TailDecoder()
            if "tail" in kinds and "seg" not in kinds:
                out += self._from_tail(kinds["tail"])
            elif "seg" in kinds:
                out += self._from_segment(kinds["seg"])
        if out:
            self.last_step = out[-1]["step"]
        return out

    @staticmethod
    def _rows_through(path: str, step: int) -> int:
        """Rows of a (compacted) segment up to ``step``, its rows being in the order written."""
        try:
            steps = pq.read_table(path, columns=["step"]).column("step").to_numpy()
        except (OSError, pa.ArrowException, KeyError):
            return 0
        after = (steps > step).nonzero()[0]
        return int(after[0]) if len(after) else len(steps)

    def _from_tail(self, path: str) -> list[dict[str, Any]]:
        try:
            with open(path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []  # sealed meanwhile: the next call reads the segment
        self.offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        out = []
        for raw in lines:
            rec = self._decoder.feed(_parse_any(raw))
            if rec is not None and rec is not True:
                out.append(record_dict(rec))
        self.seen += len(out)
        return out

    def _from_segment(self, path: str) -> list[dict[str, Any]]:
        try:
            schema = pq.read_schema(path)
            cols = [c for c in ("step", "duration_s") if c in schema.names] + [
                c for c in schema.names if c.startswith("log.")
            ]
            t = pq.read_table(path, columns=cols, page_checksum_verification=True).slice(self.seen)
        except (OSError, pa.ArrowException):
            return []
        self.seen += t.num_rows
        data = t.to_pydict()
        logs = [c for c in data if c.startswith("log.")]
        return [
            {
                "step": data["step"][i],
                "duration_s": data["duration_s"][i],
                "scalars": {c[4:]: data[c][i] for c in logs if data[c][i] is not None},
            }
            for i in range(t.num_rows)
        ]


def _parse_any(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _parse(raw: bytes) -> dict[str, Any] | None:
    obj = _parse_any(raw)
    return obj if isinstance(obj, dict) else None


def read_steps_file(path: str, warnings: list[str]) -> list[dict[str, Any]]:
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines.pop()  # text after the last newline: a record cut short by a crash
    name = os.path.basename(path)
    out: list[dict[str, Any]] = []
    bad = 0
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        obj = _parse(raw)
        if obj is None or not _valid_step_line(obj):
            if obj is not None and "session" in obj:
                continue
            bad += 1
            if bad <= 3:
                warnings.append(f"{name}: line {i} is not a valid step record; skipped")
            continue
        out.append(obj)
    if bad > 3:
        warnings.append(f"{name}: {bad} invalid lines skipped in all")
    if torn.strip():
        obj = _parse(torn)
        if obj is not None and _valid_step_line(obj):
            out.append(obj)  # complete record, only the newline missing
        else:
            warnings.append(
                f"{name}: torn last record ({len(torn)} bytes) skipped; the rank probably stopped while writing"
            )
    return out


def _valid_step_line(obj: dict[str, Any]) -> bool:
    if "session" in obj and "step" not in obj:
        return False
    try:
        return (
            isinstance(obj["rank"], int)
            and isinstance(obj["step"], int)
            and isinstance(obj["start_s"], (int, float))
            and isinstance(obj["duration_s"], (int, float))
        )
    except KeyError:
        return False


def read_group_instances(run_dir: str) -> dict[str, dict[str, Any]]:
    """The process-group instances the run's collectives were called in: ``{gid: {"label", "ranks"}}``,
    gathered from every rank's RUN_DIR/ranks/rank-N.groups.json (a span names its instance by ``gid``
    and its call there by ``seq``). An unreadable file is skipped: its ranks' instances are then unknown."""
    out: dict[str, dict[str, Any]] = {}
    rdir = os.path.join(run_dir, layout.RANKS_DIR)
    for name in sorted(os.listdir(rdir)) if os.path.isdir(rdir) else ():
        if not (name.startswith("rank-") and name.endswith(".groups.json")):
            continue
        try:
            with open(os.path.join(rdir, name), encoding="utf-8") as f:
                obj = json.load(f)
        except (OSError, ValueError):
            log.warning("telemetry: %s: %s unreadable; its group instances are unknown", run_dir, name)
            continue
        if isinstance(obj, dict):
            for gid, g in obj.items():
                if isinstance(g, dict) and isinstance(g.get("ranks"), list):
                    out[str(gid)] = {"label": str(g.get("label", "")), "ranks": [int(r) for r in g["ranks"]]}
    return out


def read_run(run_dir: str, steps: tuple[int, int] | None = None, columns: bool = True) -> RunData:
    """Load everything a run directory holds (``steps``: only the steps first..last of the step
    records; ``columns`` False: none of format 2's step columns, the rest all the same). Raises
    FileNotFoundError if it holds no run."""
    if not layout.is_run_dir(run_dir):
        raise FileNotFoundError(f"{run_dir!r} is not a run directory (no {layout.META} or {layout.RANKS_DIR}/ inside)")
    warnings: list[str] = []
    meta: dict[str, Any] = {}
    meta_path = os.path.join(run_dir, layout.META)
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        warnings.append(f"{layout.META} missing (rank 0 never started or wrote elsewhere)")
    except ValueError:
        warnings.append(f"{layout.META} is not valid JSON; ignored")
    ranks: dict[int, dict[str, Any]] = {}
    progress: dict[int, dict[str, Any]] = {}
    exits: dict[int, dict[str, Any]] = {}
    lines: list[dict[str, Any]] = []
    rdir = os.path.join(run_dir, layout.RANKS_DIR)
    names = sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []
    for name in names:
        path = os.path.join(rdir, name)
        m = layout.STEPS_RE.match(name)
        if m:
            lines.extend(read_steps_file(path, warnings))
        elif name.endswith((".progress.json", layout.EXIT_SUFFIX)) or (
            name.endswith(".json") and name.startswith("rank-") and name.count(".") == 1
        ):
            try:
                with open(path, encoding="utf-8") as f:
                    obj = json.load(f)
            except (OSError, ValueError):
                warnings.append(f"{name}: unreadable; skipped")
                continue
            target = (
                progress if name.endswith(".progress.json") else exits if name.endswith(layout.EXIT_SUFFIX) else ranks
            )
            if isinstance(obj, dict) and isinstance(obj.get("rank"), int):
                target[obj["rank"]] = obj
    for r, e in exits.items():  # how a rank ended, with its last heartbeat (a rank may have none)
        progress[r] = {**progress.get(r, {"rank": r}), "exit": e}
    warnings += unclean_end(progress, time.time())
    if steps is not None:
        lines = [r for r in lines if steps[0] <= r["step"] <= steps[1]]
    table = read_step_columns(run_dir, warnings, steps) if columns else None
    findings = _read_findings(os.path.join(run_dir, layout.FINDINGS), warnings)
    for w in warnings:
        log.warning("telemetry: %s: %s", run_dir, w)
    return RunData(run_dir, meta, ranks, lines, progress, warnings, findings, table)


def _read_findings(path: str, warnings: list[str]) -> list[dict[str, Any]]:
    """Online detection's findings (one JSON object a line); unreadable lines skipped and said."""
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return []
    out, bad = [], 0
    for raw in lines:
        if not raw.strip():
            continue
        obj = _parse(raw)
        if obj is None or "kind" not in obj:
            bad += 1
            continue
        out.append(obj)
    if bad:
        warnings.append(f"{layout.FINDINGS}: {bad} unreadable line(s) skipped")
    return out
