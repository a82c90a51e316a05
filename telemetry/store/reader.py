"""Reading a run directory, while the job runs or after it crashed.

A torn last line (the process died mid-write) is skipped with a warning; a corrupt line elsewhere
is skipped and counted; neither is fatal, and nothing is invented in their place.

>>> run = read_run("runs/exp1")        # doctest: +SKIP
>>> run.steps[0]["duration_s"]         # doctest: +SKIP

The steps table of a run is opened by the one loader, :func:`telemetry.analysis.load.open_input`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from . import layout

log = logging.getLogger("telemetry")


@dataclass
class RunData:
    run_dir: str
    meta: dict[str, Any]
    ranks: dict[int, dict[str, Any]]
    steps: list[dict[str, Any]]
    progress: dict[int, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # written by online detection


class StepsTail:
    """Reads the complete lines appended to one steps file since the last call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.bad_lines = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # b"" when the chunk ended on a newline
        out = []
        for raw in lines:
            obj = _parse(raw)
            if obj is None:
                self.bad_lines += 1
            elif "step" in obj:
                out.append(obj)
        return out


def _parse(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
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
            warnings.append(f"{name}: torn last record ({len(torn)} bytes) skipped; "
                            "the rank probably stopped while writing")
    return out


def _valid_step_line(obj: dict[str, Any]) -> bool:
    if "session" in obj and "step" not in obj:
        return False
    try:
        return (isinstance(obj["rank"], int) and isinstance(obj["step"], int)
                and isinstance(obj["start_s"], (int, float)) and isinstance(obj["duration_s"], (int, float)))
    except KeyError:
        return False


def read_run(run_dir: str) -> RunData:
    """Load everything a run directory holds. Raises FileNotFoundError if it holds no run."""
    if not layout.is_run_dir(run_dir):
        raise FileNotFoundError(f"{run_dir!r} is not a run directory (no {layout.META} or "
                                f"{layout.RANKS_DIR}/ inside)")
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
    steps: list[dict[str, Any]] = []
    rdir = os.path.join(run_dir, layout.RANKS_DIR)
    names = sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []
    for name in names:
        path = os.path.join(rdir, name)
        m = layout.STEPS_RE.match(name)
        if m:
            steps.extend(read_steps_file(path, warnings))
        elif name.endswith((".progress.json", layout.EXIT_SUFFIX)) or (name.endswith(".json") and name.startswith("rank-")):
            try:
                with open(path, encoding="utf-8") as f:
                    obj = json.load(f)
            except (OSError, ValueError):
                warnings.append(f"{name}: unreadable; skipped")
                continue
            target = progress if name.endswith(".progress.json") else exits if name.endswith(layout.EXIT_SUFFIX) \
                else ranks
            if isinstance(obj, dict) and isinstance(obj.get("rank"), int):
                target[obj["rank"]] = obj
    for r, e in exits.items():  # how a rank ended, with its last heartbeat (a rank may have none)
        progress[r] = {**progress.get(r, {"rank": r}), "exit": e}
    findings = _read_findings(os.path.join(run_dir, layout.FINDINGS), warnings)
    for w in warnings:
        log.warning("telemetry: %s: %s", run_dir, w)
    return RunData(run_dir, meta, ranks, steps, progress, warnings, findings)


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
