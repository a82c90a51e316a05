"""What an input-bound finding says of the input (``io.input_ready``, ``io.read_bytes``, and the watched
dataset's ``dev.input_fetch_seconds`` / ``dev.input_workers``), and the causes it names.

Over the finding's steps, for the culprits and (for one rank) its peers, :func:`side` measures the
readiness, the read rate per second of fetching and how busy the workers were (:class:`Side`);
:func:`evidence` and :func:`details` say them, and :func:`causes` names ``storage``, ``input_workers``
or ``host_cpu``, each only where its numbers say it (none where the columns are absent). The rules:
docs/finding-kinds.md, "input_bound".
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ...steptable.matrix import StepMatrix

SLOW_STORAGE = 0.5  # a rank reading at most this share of its peers' bytes per second of fetching
MIN_BYTES = 256 << 10  # ... and at least this much over the steps (a few stray reads say nothing)
BUSY_WORKERS = 0.85  # workers fetching at least this share of the time
BUSY_HOST = 0.9  # the host's CPUs at least this busy
HOST_ABOVE = 0.10  # one rank's host at least this much busier than its peers'


@dataclass(frozen=True)
class Side:
    """One side's input over the steps (the median over its ranks): readiness (None: no watched loader),
    bytes read per second of fetching and per second of the steps (None: no storage counter), workers
    busy (None: no watched dataset), the host's CPU busy (None: no host readings)."""

    readiness: float | None
    read_bytes: float | None
    read_per_fetch_s: float | None
    read_per_s: float | None
    workers: float | None
    workers_busy: float | None
    host_cpu: float | None


def _median(values: list[float]) -> float | None:
    v = [x for x in values if x is not None and np.isfinite(x)]
    return float(np.median(v)) if v else None


def side(m: StepMatrix, rows: np.ndarray, cols: np.ndarray) -> Side:
    """``rows``: rank indices; ``cols``: (S,) bool, the steps."""
    ready, rb = m.extra("io.input_ready"), m.extra("io.read_bytes")
    fetch, workers, host = (
        m.extra("dev.input_fetch_seconds"),
        m.extra("dev.input_workers"),
        m.extra("dev.host_cpu_busy_ratio"),
    )
    per: dict[str, list] = {k: [] for k in Side.__dataclass_fields__}
    # a live job's windows stand for several steps each (per-step values): weigh them back to totals
    w = m.weight[cols] if m.weight is not None else 1.0
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for r in rows:
            wall = float(np.nansum(m.duration[r, cols] * w))
            if ready is not None:  # weighed by the steps each column stands for
                rr = ready[r, cols]
                ww = np.broadcast_to(w, rr.shape) * np.isfinite(rr)
                per["readiness"].append(float(np.nansum(rr * ww) / ww.sum()) if ww.sum() > 0 else None)
            else:
                per["readiness"].append(None)
            f_s = None
            n_workers = None
            if fetch is not None:
                f = fetch[r, cols]
                f_s = float(np.nanmax(f) - np.nanmin(f)) if np.isfinite(f).any() else None
                seen = workers[r, cols] if workers is not None else None
                n_workers = float(np.nanmax(seen)) if seen is not None and np.isfinite(seen).any() else None
            per["workers"].append(n_workers)
            busy = None
            if f_s is not None and wall > 0:
                busy = f_s / (wall * max(n_workers or 1.0, 1.0))
            per["workers_busy"].append(busy)
            if rb is not None and np.isfinite(rb[r, cols]).any():
                nbytes = float(np.nansum(rb[r, cols] * w))
                fetching = f_s if f_s else float(np.nansum(m.data[r, cols] * w))
                per["read_bytes"].append(nbytes)
                per["read_per_fetch_s"].append(nbytes / fetching if fetching > 0 else None)
                per["read_per_s"].append(nbytes / wall if wall > 0 else None)
            else:
                per["read_bytes"].append(None)
                per["read_per_fetch_s"].append(None)
                per["read_per_s"].append(None)
            per["host_cpu"].append(float(np.nanmedian(host[r, cols])) if host is not None else None)
    return Side(**{k: _median(v) for k, v in per.items()})


def _rate(b: float | None) -> str:
    if b is None:
        return "?"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B/s"


def evidence(a: Side, b: Side | None, subject: str = "it") -> str:
    """The clause an input-bound finding's evidence adds: readiness and bytes/s, against the peers'."""
    parts = []
    whose = "its" if subject == "it" else f"{subject}'s"
    if a.readiness is not None:
        peer = f" (its peers' {b.readiness:.0%})" if b is not None and b.readiness is not None else ""
        parts.append(f"{whose} batch was already waiting in {a.readiness:.0%} of the steps{peer}")
    if a.read_per_fetch_s is not None:  # per second of fetching: a slowed rank's steps are everyone's steps
        peer = f" (its peers' {_rate(b.read_per_fetch_s)})" if b is not None and b.read_per_fetch_s is not None else ""
        parts.append(f"{subject} read {_rate(a.read_per_fetch_s)} from storage per second of fetching{peer}")
    return "; ".join(parts)


def details(a: Side, b: Side | None) -> dict[str, float]:
    out = {}
    for name, value in (
        ("readiness", a.readiness),
        ("read_bytes_per_s", a.read_per_s),
        ("read_bytes_per_fetch_s", a.read_per_fetch_s),
        ("workers_busy", a.workers_busy),
        ("peer_readiness", b.readiness if b else None),
        ("peer_read_bytes_per_s", b.read_per_s if b else None),
        ("peer_read_bytes_per_fetch_s", b.read_per_fetch_s if b else None),
    ):
        if value is not None:
            out[name] = value
    return out


def causes(m: StepMatrix, culprits: np.ndarray | None, cols: np.ndarray) -> list[tuple[float, dict[str, str]]]:
    """The input-bound finding's causes (score, cause): ``culprits`` (R,) bool for one rank's finding,
    None for the whole job's."""
    out: list[tuple[float, dict[str, str]]] = []
    if culprits is not None:
        who = f"rank {int(m.ranks[np.flatnonzero(culprits)[0]])}"
        a, b = side(m, np.flatnonzero(culprits), cols), side(m, np.flatnonzero(~culprits), cols)
    else:
        who, a, b = "the ranks", side(m, np.arange(m.n_ranks), cols), None
    if b is not None and a.read_per_fetch_s is not None and b.read_per_fetch_s:
        ratio = a.read_per_fetch_s / b.read_per_fetch_s
        if ratio <= SLOW_STORAGE and (a.read_bytes or 0) >= MIN_BYTES:
            out.append(
                (
                    3.0 + (1 - ratio),
                    {
                        "kind": "storage",
                        "evidence": (
                            f"{who} read {_rate(a.read_per_fetch_s)} from storage per second of fetching, "
                            f"{ratio:.0%} of its peers' {_rate(b.read_per_fetch_s)}: its storage (disk, mount or "
                            "network filesystem) is slow"
                        ),
                    },
                )
            )
    if a.workers_busy is not None and a.workers_busy >= BUSY_WORKERS:
        n = f"{a.workers:.0f} " if a.workers else ""
        out.append(
            (
                2.0 + min(a.workers_busy, 1.0),  # under a slow storage: the workers wait on it
                {
                    "kind": "input_workers",
                    "evidence": (
                        f"{who}'s {n}data-loader workers were fetching {min(a.workers_busy, 1.0):.0%} of the time: "
                        "every worker busy; more workers (or cheaper items) would help"
                    ),
                },
            )
        )
    if a.host_cpu is not None and a.host_cpu >= BUSY_HOST:
        above = b is None or b.host_cpu is None or a.host_cpu - b.host_cpu >= HOST_ABOVE
        if above:
            peer = f" (its peers' {b.host_cpu:.0%})" if b is not None and b.host_cpu is not None else ""
            out.append(
                (
                    1.0 + a.host_cpu,
                    {
                        "kind": "host_cpu",
                        "evidence": f"{who}'s host CPUs were {a.host_cpu:.0%} busy{peer}: the workers lack a core",
                    },
                )
            )
    return out
