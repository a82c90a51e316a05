"""Query answers reshaped into arrays over the windows: one array per (rank, other key labels...),
NaN where a window has no sample; and the gauges split into progress values and device readings
named as in the run store."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....metrics import names as N
from .queries import FAMILY_LABELS, PROGRESS
from .window import Grid

# A device metric's sample name -> the run store's reading name (families: the prefix and label).
_READINGS = {m.series[0]: reading for reading, m in N.DEVICE.items()}
_FAMILIES = {m.series[0]: (prefix, label, suffix) for prefix, (m, label, suffix) in N.DEVICE_FAMILIES.items()}


def as_int(v: object) -> int | None:
    """A label value as an int, or None."""
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


def arrays(grid: Grid, series: list, keys: tuple[str, ...], add: bool = True) -> dict[tuple, np.ndarray]:
    """{(rank, other key labels...): (n,) values over ``grid``'s windows, NaN where none}. Series
    with one key (labels that are not keys differ) are summed (``add``), else the first one's gaps
    are filled."""
    out: dict[tuple, np.ndarray] = {}
    for labels, points in series:
        r = as_int(labels.get("rank"))
        if r is None or r < 0 or not points:
            continue
        a = np.full(grid.n, np.nan)
        k = grid.index(np.array([p[0] for p in points]))
        ok = (k >= 0) & (k < grid.n)
        a[k[ok]] = np.array([p[1] for p in points])[ok]
        key = (r,) + tuple(labels.get(x) for x in keys[1:])
        prev = out.get(key)
        if prev is None:
            out[key] = a
        else:
            out[key] = np.where(np.isnan(prev), a, np.where(np.isnan(a), prev, prev + a) if add else prev)
    return out


def device_key(name: str, labels: dict[str, str | None]) -> str | None:
    """A device metric's sample name and its family label (``labels``: type, reason, direction,
    counter) -> the run store's reading name (telemetry.metrics.names.DEVICE, DEVICE_FAMILIES)."""
    if name in _READINGS:
        return _READINGS[name]
    family = _FAMILIES.get(name)
    if family is None:
        return None
    prefix, label, suffix = family
    value = labels.get(label)
    return f"{prefix}{value}{suffix}" if value else None


def split_gauges(
    gauges: dict[tuple, np.ndarray], ranks: dict[int, dict[str, Any]]
) -> tuple[dict[tuple, np.ndarray], dict[int, dict[str, np.ndarray]]]:
    """({(rank, progress key): values}, {rank: {device reading: values}}) of the gauges' arrays
    (keyed by :data:`~.queries.GAUGE_KEYS`). A rank's GPU readings come from its own GPU (label
    gpu = its local rank) when it exports several, else the lowest."""
    progress: dict[tuple, np.ndarray] = {}
    device: dict[tuple, list[tuple[int, str, np.ndarray]]] = {}
    for (r, name, gpu, _local, *family), a in gauges.items():
        if name in PROGRESS:
            key = (r, PROGRESS[name])
            prev = progress.get(key)
            progress[key] = a if prev is None else np.where(np.isnan(a), prev, a)
            continue
        reading = device_key(name or "", dict(zip(FAMILY_LABELS, family)))
        if reading is None:
            continue
        own = (ranks.get(r) or {}).get("local_rank")
        pref = 0 if gpu is None or (own is not None and gpu == str(own)) else 1
        device.setdefault((r, reading), []).append((pref, gpu or "", a))
    out: dict[int, dict[str, np.ndarray]] = {}
    for (r, reading), cands in device.items():
        cands.sort(key=lambda c: (c[0], as_int(c[1]) if as_int(c[1]) is not None else math.inf, c[1]))
        a = cands[0][2].copy()
        for _, _, b in cands[1:]:  # a reading's gaps filled from the next preferred series
            a = np.where(np.isnan(a), b, a)
        out.setdefault(r, {})[reading] = a
    return progress, out
