"""Many runs of the same job: one summary per run (cached in the run directory), the runs in time order,
like runs grouped, and the change points across them with what moved (:func:`history`).

A run's summary (:func:`run_summary`, ``RUN_DIR/summary.json``) is made once and read back while its
key (:func:`content_key`: the files under ``ranks/`` and ``meta.json`` by name and size, not their times)
is the run's. Runs are compared only within a group (``--by TAG``, else :func:`settings_hash`).
:func:`change_points` is a max-T permutation test over every series and split (binary segmentation
after each change), so a group with no change reports one with probability at most ``alpha``. The
rules, the JSON and the limits: docs/history.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...store import layout

SUMMARY = "summary.json"
SUMMARY_VERSION = 2
WARMUP_SHARE = 0.05  # a run's first steps (at least 2) are left out of its phase medians
KEY_METRICS = ("step_time_s", "tokens_per_s", "mfu", "compute_share")
# higher is better for these (a fall is the regression); lower is better for every other series
RATES = frozenset({"tokens_per_s", "mfu", "compute_share"})


@dataclass(frozen=True)
class HistoryParams:
    alpha: float = 0.005  # the chance a group with no change reports one (max-T permutation test)
    min_change: float = 0.01  # a change smaller than this share of the level before is not reported
    min_runs: int = 3  # runs on each side of a change
    window: int = 10  # a split compares at most this many runs on each side (a change that later went back)
    permutations: int = 1999


# ---- one run's summary ------------------------------------------------------------------------
def content_key(run_dir: str) -> str:
    """The run's content: every file under ``ranks/`` and ``meta.json``, by name and size."""
    h = hashlib.sha1()
    root = os.path.join(run_dir, layout.RANKS_DIR)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        try:
            h.update(f"{name}:{os.path.getsize(os.path.join(root, name))};".encode())
        except OSError:
            continue
    try:
        h.update(f"meta:{os.path.getsize(os.path.join(run_dir, layout.META))}".encode())
    except OSError:
        pass
    return h.hexdigest()


def settings_hash(job: str, world_size: int, phases: list[str], tags: dict[str, str]) -> str:
    doc = json.dumps([job, int(world_size), sorted(phases), sorted(tags.items())])
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def summarize(run_dir: str) -> dict[str, Any]:
    """Analyze ``run_dir`` and say what it was and did (the summary, not cached here)."""
    from ...steptable.table import phase_names
    from ..run import analyze_run

    result = analyze_run(run_dir)
    run = result.input
    meta, table, s = run.meta or {}, run.table, result.summary
    phases = [p for p in phase_names(table) if p != "data"]
    values: dict[str, float | None] = {}
    if len(table):
        steps = np.sort(table["step"].unique())
        warm = steps[min(len(steps) - 1, max(2, int(WARMUP_SHARE * len(steps))))]
        t = table[table["step"] >= warm]
        for p in [*phases, "data"]:  # a phase's own time: its seconds less those blocked in collectives
            if f"{p}_s" in t.columns:
                own = t[f"{p}_s"] - t[f"comm.{p}_s"].fillna(0) if f"comm.{p}_s" in t.columns else t[f"{p}_s"]
                values[f"{p}_s"] = _finite(own.median())
        if "comm_s" in t.columns:
            values["comm_s"] = _finite(t["comm_s"].median())
        if "mfu" in t.columns:
            values["mfu"] = _finite(t["mfu"].median())
    code = meta.get("code") or {}
    tags = {str(k): str(v) for k, v in (meta.get("tags") or {}).items()}
    job = str(meta.get("job") or os.path.basename(os.path.abspath(run_dir)))
    world = int(meta.get("world_size") or s.get("ranks") or 0)
    return {
        "version": SUMMARY_VERSION,
        "run": os.path.basename(os.path.abspath(run_dir)),
        "job": job,
        "start_time_s": _finite(meta.get("start_time_s")),
        "commit": code.get("commit"),
        "dirty": code.get("dirty"),
        "tags": tags,
        "world_size": world,
        "nodes": len(set((meta.get("hosts") or {}).values())) or None,
        "settings": settings_hash(job, world, phases, tags),
        "steps": int(s.get("steps") or 0),
        "metrics": {
            "step_time_s": _finite(s.get("step_time_s")),
            "tokens_per_s": _finite(s.get("tokens_per_s")),
            "mfu": values.pop("mfu", None),
            "compute_share": _finite((s.get("goodput") or {}).get("compute")),
        },
        "phases": {k: v for k, v in values.items() if v is not None},
        "findings": [
            {"kind": f.kind, "ranks": list(f.ranks), "phase": f.phase, "severity": f.severity}
            for f in result.findings
            if f.severity in ("warning", "critical")
        ],
    }


def run_summary(run_dir: str, refresh: bool = False, write: bool = True) -> dict[str, Any]:
    """The run's summary, from ``RUN_DIR/summary.json`` when its key still matches the run's content,
    else made and written there (a read-only run directory, or ``write=False``: made, not written)."""
    key = content_key(run_dir)
    path = os.path.join(run_dir, SUMMARY)
    if not refresh:
        try:
            with open(path, encoding="utf-8") as f:
                cached = json.load(f)
            if cached.get("key") == key and cached.get("version") == SUMMARY_VERSION:
                return cached
        except (OSError, ValueError, AttributeError):
            pass
    doc = {**summarize(run_dir), "key": key}
    if not write:
        return doc
    try:
        layout.write_json_atomic(path, doc)
    except OSError:
        pass
    return doc


def find_runs(paths: list[str]) -> list[str]:
    """Run directories among ``paths``: each one itself, or the run directories directly inside it."""
    out: list[str] = []
    for p in paths:
        if layout.is_run_dir(p):
            out.append(p)
        elif os.path.isdir(p):
            out += sorted(os.path.join(p, n) for n in os.listdir(p) if layout.is_run_dir(os.path.join(p, n)))
    return list(dict.fromkeys(out))


# ---- change points ------------------------------------------------------------------------------
def _noise(x: np.ndarray, floor: float) -> np.ndarray:
    """(P, 1) run-to-run noise of each row of ``x`` (P, n): a robust spread of its successive differences
    (a level change moves one difference of many: their spread is the noise, not the change), at least
    ``floor`` of the row's median (a series almost constant, a phase that sets its runs' speed, is no
    more certain than a change a quarter of the smallest one reported)."""
    sigma = 1.4826 * np.median(np.abs(np.diff(x, axis=1)), axis=1, keepdims=True) / np.sqrt(2.0)
    return np.maximum(sigma, floor * np.abs(np.median(x, axis=1, keepdims=True)))


def _split_t(x: np.ndarray, min_runs: int, window: int, sigma: np.ndarray) -> np.ndarray:
    """(P, n-1) score of every split k of each row of ``x`` (P, n): the mean of the ``window`` runs from
    run k on (or as many as there are) less that of the ``window`` before, over the row's noise
    ``sigma`` (P, 1) times sqrt(1/n_a + 1/n_b); 0 where a side has fewer than ``min_runs`` runs."""
    n = x.shape[1]
    z = np.zeros((x.shape[0], 1))
    c1 = np.hstack([z, np.cumsum(x, axis=1)])
    k = np.arange(1, n)
    lo, hi = np.maximum(k - window, 0), np.minimum(k + window, n)
    na, nb = k - lo, hi - k
    sa, sb = c1[:, k] - c1[:, lo], c1[:, hi] - c1[:, k]
    ma, mb = sa / na, sb / nb
    with np.errstate(all="ignore"):
        t = (mb - ma) / (sigma * np.sqrt(1.0 / na + 1.0 / nb))
    t = np.where(np.isfinite(t), np.abs(t), 0.0)
    return np.where((na >= min_runs) & (nb >= min_runs), t, 0.0)


def _standardize(series: dict[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    names = [k for k, v in series.items() if np.isfinite(v).all() and np.ptp(v) > 0]
    return names, np.array([series[k] for k in names], dtype=float)


def change_points(
    series: dict[str, np.ndarray],
    p: HistoryParams | None = None,
    offset: int = 0,
    raw: dict[str, np.ndarray] | None = None,
) -> list[dict]:
    """Changes in ``series`` (name -> one value per run, in run order): each ``{"index"`` (the first run
    after it, 0-based), ``"metric"``, ``"before"``, ``"after"``, ``"change"`` (relative), ``"p"``}``,
    in run order. Series with a missing value are not tested. ``raw``: the values the change's size is
    told in, by name, where they are not the tested ones (a phase tested as its share of the compute)."""
    p = p or HistoryParams()
    raw = raw or {}
    names, x = _standardize(series)
    if not names:
        return []
    n = x.shape[1]
    if n < 2 * p.min_runs:
        return []
    # the noise is the observed order's, the same in every reordering: measured in each, it shrinks by
    # chance where a reordering happens to sort near values side by side (at 16 runs the median of 15
    # differences varies that much), and such reorderings outscored a clean 2x change (p 0.008). Being the
    # same in every reordering, it cancels in each series' scaling by its own reorderings' median below: it
    # (and its floor) only keeps the scores in noise units where that median is 0
    sigma = _noise(x, p.min_change / 4)
    t = _split_t(x, p.min_runs, p.window, sigma)
    if float(t.max()) <= 0:
        return []
    rng = np.random.default_rng(n * 7919 + len(names))
    order = np.argsort(rng.random((p.permutations, n)), axis=1)
    per_series = np.empty((p.permutations, len(names)))  # each reordering's best score in each series
    for i in range(0, p.permutations, 256):  # chunks of reorderings, every series reordered together
        o = order[i : i + 256]
        xs = x[:, o].transpose(1, 0, 2).reshape(-1, n)  # (chunk x series, n)
        per_series[i : i + 256] = (
            _split_t(xs, p.min_runs, p.window, np.tile(sigma, (len(o), 1)))
            .reshape(len(o), len(names), n - 1)
            .max(axis=2)
        )
    # each series' scores over its own reorderings' typical best: a series with one run far off its level
    # (a data wait 100x in one run) scores high in every reordering, and, on the raw scale, its best would
    # be the maximum in every reordering too, hiding a real change in another series
    scale = np.median(per_series, axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    t = t / scale[:, None]
    null = (per_series / scale).max(axis=1)
    best = np.unravel_index(int(np.argmax(t)), t.shape)
    observed = float(t[best])
    pval = (1.0 + float(np.sum(null >= observed - 1e-12))) / (p.permutations + 1.0)
    if pval > p.alpha:
        return []
    row, k = int(best[0]), int(best[1]) + 1
    found = []
    for j, name in enumerate(names):  # every series past the bound at that split, the best first
        if t[j, k - 1] < np.quantile(null, 1 - p.alpha) and j != row:
            continue
        v = raw.get(name, series[name])
        before, after = float(np.median(v[:k])), float(np.median(v[k:]))
        change = (after - before) / abs(before) if before else math.inf
        if abs(change) < p.min_change:
            continue
        pj = (1.0 + float(np.sum(null >= t[j, k - 1] - 1e-12))) / (p.permutations + 1.0)
        found.append({"index": offset + k, "metric": name, "before": before, "after": after, "change": change, "p": pj})
    if not found:
        return []
    left = change_points({m: v[:k] for m, v in series.items()}, p, offset, {m: v[:k] for m, v in raw.items()})
    right = change_points({m: v[k:] for m, v in series.items()}, p, offset + k, {m: v[k:] for m, v in raw.items()})
    out = left + sorted(found, key=lambda c: c["p"]) + right
    if offset == 0:  # each change's levels between its neighbours (found first, it was told against all)
        cuts = sorted({0, n, *(c["index"] for c in out)})
        for c in out:
            i = cuts.index(c["index"])
            v = raw.get(c["metric"], series[c["metric"]])
            c["before"], c["after"] = (
                float(np.median(v[cuts[i - 1] : c["index"]])),
                float(np.median(v[c["index"] : cuts[i + 1]])),
            )
            c["change"] = (c["after"] - c["before"]) / abs(c["before"]) if c["before"] else math.inf
    return out


def is_regression(c: dict[str, Any]) -> bool:
    """Slower times, lower rates."""
    return c["change"] < 0 if c["metric"] in RATES else c["change"] > 0


# ---- many runs ------------------------------------------------------------------------------------
def series_of(runs: list[dict[str, Any]], metrics: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Each key metric and each phase, one value per run (NaN where a run lacks it)."""
    names: list[str] = [m for m in KEY_METRICS if any(r["metrics"].get(m) is not None for r in runs)]
    for r in runs:
        names += [k for k in r["phases"] if k not in names]
    if metrics:
        names = [m for m in names if m in metrics]
    out = {}
    for m in names:
        v = [r["metrics"].get(m) if m in KEY_METRICS else r["phases"].get(m) for r in runs]
        out[m] = np.array([np.nan if x is None else float(x) for x in v], dtype=float)
    return out


def tested(series: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The series the change points are searched in: the key metrics, the data wait and the collectives
    as they are; with three compute phases or more, each compute phase divided by its run's speed: the
    median over the compute phases of each one's time against its own median over the runs. A run on a
    faster or slower node (every phase scaled alike: run-to-run noise) is then as fast as the others,
    while one phase's own change, being one of three or more, moves that median little."""
    out = dict(series)
    compute = [m for m in series if m not in KEY_METRICS and m not in ("data_s", "comm_s")]
    if len(compute) >= 3:
        with np.errstate(all="ignore"):
            rel = np.array([series[m] / np.nanmedian(series[m]) for m in compute])
            speed = np.nanmedian(rel, axis=0)
            for m in compute:
                out[m] = series[m] / np.where(speed > 0, speed, np.nan)
    return out


def _moved(series: dict[str, np.ndarray], members: list[dict[str, Any]], lo: int, k: int, hi: int) -> dict[str, Any]:
    """What moved across a change: every series' median over the runs after it (to the next change)
    against the runs before (from the last), largest change first (+ slower for times, lower for rates), compute phases with their runs'
    speed taken out as the change points saw them; and the ``telemetry diff`` command of the two runs
    either side, to look at steps, ops and collectives (one pair of runs also differs by its nodes)."""
    rows = []
    for m, v in series.items():
        b, a = v[lo:k], v[k:hi]
        if not (np.isfinite(b).any() and np.isfinite(a).any()):
            continue
        before, after = float(np.nanmedian(b)), float(np.nanmedian(a))
        if before:
            change = after / before - 1
            rows.append({"metric": m, "before": before, "after": after, "change": -change if m in RATES else change})
    rows.sort(key=lambda r: -abs(r["change"]))
    left, right = members[k - 1].get("path"), members[k].get("path")
    return {
        "before_runs": [r["run"] for r in members[lo:k]],
        "after_runs": [r["run"] for r in members[k:hi]],
        "series": rows,
        "command": f"telemetry diff {left} {right}" if left and right else None,
    }


def group_key(summary: dict[str, Any], by: str | None) -> str:
    if by:
        return f"{by}={summary['tags'].get(by, '')}"
    return f"settings {summary['settings']}"


def history(
    summaries: list[dict[str, Any]],
    by: str | None = None,
    metrics: tuple[str, ...] | None = None,
    params: HistoryParams | None = None,
) -> dict[str, Any]:
    """The history document (DESIGN's contract): ``runs`` in time order (``run``: the run's directory as
    given, its ``name`` and ``n``, its number from 1), their ``groups``, and each group's ``changes``
    (``run``: the directory of the first run after the change, ``n``: its number; ``runs``: the names of the
    runs either side, ``paths`` their directories; ``diff``: what moved between them, :func:`_moved`)."""
    params = params or HistoryParams()
    ordered = sorted(summaries, key=lambda s: (s.get("start_time_s") is None, s.get("start_time_s") or 0, s["run"]))
    runs = [{**s, "n": i + 1} for i, s in enumerate(ordered)]  # "run": the name until the document is made
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(group_key(r, by), []).append(r)
    out_groups, changes, notes = [], [], []
    for key, members in groups.items():
        series = tested(series_of(members, metrics))
        found = change_points(series, params)
        cuts = sorted({0, len(members), *(c["index"] for c in found)})
        if len(members) < 2 * params.min_runs:
            notes.append(f"{key}: {len(members)} runs; a change needs {params.min_runs} runs on each side: not tested")
        for c in found:
            after, before = members[c["index"]], members[c["index"] - 1]
            changes.append(
                {
                    "group": key,
                    "run": after.get("path") or after["run"],
                    "n": after["n"],
                    "metric": c["metric"],
                    "phase": c["metric"][:-2] if c["metric"] not in KEY_METRICS else None,
                    # DESIGN's sign: + is slower for times, lower for rates
                    "change": -c["change"] if c["metric"] in RATES else c["change"],
                    "p": c["p"],
                    "before": c["before"],
                    "after": c["after"],
                    "regression": is_regression(c),
                    "runs": [before["run"], after["run"]],
                    "paths": [before.get("path"), after.get("path")],
                    "commits": [before.get("commit"), after.get("commit")],
                    "diff": _moved(
                        series, members, cuts[cuts.index(c["index"]) - 1], c["index"], cuts[cuts.index(c["index"]) + 1]
                    ),
                }
            )
        out_groups.append({"group": key, "runs": [r["n"] for r in members]})
    return {
        "runs": [
            {
                **{k: v for k, v in r.items() if k not in ("key", "run")},
                "run": r.get("path") or r["run"],
                "name": r["run"],
            }
            for r in runs
        ],
        "groups": out_groups,
        "changes": sorted(changes, key=lambda c: (c["n"], not c["regression"], c["p"])),  # regressions first
        "params": {"alpha": params.alpha, "min_change": params.min_change, "min_runs": params.min_runs},
        "notes": notes,
    }
