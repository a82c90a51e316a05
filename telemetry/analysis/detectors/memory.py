"""Memory growth: a rank whose memory rises steadily over the run (a leak, a growing cache).

Series: CUDA memory allocated by tensors (``dev.cuda_memory_allocated_bytes``) when present, else
the process's resident memory (``dev.process_resident_memory_bytes``). Over the live steps, split
into ``blocks`` blocks, the block medians must rise in at least ``monotone_fraction`` of
consecutive pairs and by at least ``min_growth`` (relative, 5%) and ``min_growth_bytes``. A rise
counts only when it is at least ``min_share_per_rise`` of the average rise per block (RSS moves by
pages, so a flat series still "rises" by a few KiB), and the second half of the run must carry at
least ``late_share`` of the growth: a one-time step up early in the run (a lazy import, an
allocator warming up) is not growth. The what-if
is 0 (growth costs no time until it fails), so the finding is ``info``, or ``warning`` when the
GPU would run out of memory within as many steps again as the run has had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from ...steptable.matrix import StepMatrix, nanmedian
from ..findings import Finding
from .context import Context, Found


@dataclass(frozen=True)
class MemoryParams:
    blocks: int = 10
    monotone_fraction: float = 0.8
    min_growth: float = 0.05
    min_growth_bytes: float = 64 * 2**20
    min_share_per_rise: float = 0.25
    late_share: float = 0.2


def detect_memory_growth(m: StepMatrix, live: np.ndarray, p: MemoryParams | None = None) -> list[Finding]:
    p = p or MemoryParams()
    for col in ("dev.cuda_memory_allocated_bytes", "dev.process_resident_memory_bytes"):
        if col in m.columns:
            series, what = cast(np.ndarray, m.extra(col))[:, live], col.split(".", 1)[1]  # a column it has
            break
    else:
        return []
    n = series.shape[1]
    if n < 2 * p.blocks:
        return []
    total = m.extra("dev.gpu_memory_total_bytes")
    growing, rates, ends = [], [], []
    edges = np.linspace(0, n, p.blocks + 1).astype(int)
    medians = np.stack([nanmedian(series[:, a:b], axis=1) for a, b in zip(edges, edges[1:])], axis=1)  # (R, blocks)
    for r in range(m.n_ranks):
        blocks = medians[r]
        if not np.isfinite(blocks).all() or blocks[0] <= 0:
            continue
        growth = blocks[-1] - blocks[0]
        if growth < max(p.min_growth * blocks[0], p.min_growth_bytes):
            continue
        rises = np.mean(np.diff(blocks) >= p.min_share_per_rise * growth / (p.blocks - 1))
        late = blocks[-1] - blocks[p.blocks // 2]
        if rises >= p.monotone_fraction and late >= p.late_share * growth:
            growing.append(r)
            rates.append(growth / max(n - n / p.blocks, 1))
            ends.append(blocks[-1])
    if not growing:
        return []
    live_steps = m.steps[live]
    rate = float(np.median(rates))
    severity = "info"
    projection = ""
    if total is not None and "cuda" in what:
        cap = float(nanmedian(total[growing][:, live]))
        left = cap - float(np.max(ends))
        if rate > 0 and np.isfinite(left):
            steps_left = left / rate
            projection = f"; at this rate the GPU runs out of memory in about {steps_left:,.0f} steps"
            if steps_left <= len(live_steps):
                severity = "warning"
    ranks = [int(m.ranks[r]) for r in growing]
    who = (
        f"rank {ranks[0]}"
        if len(ranks) == 1
        else f"{len(ranks)} ranks ({', '.join(map(str, ranks[:8]))}{'...' if len(ranks) > 8 else ''})"
    )
    return [
        Finding(
            kind="memory_growth",
            ranks=ranks,
            phase=None,
            first_step=int(live_steps[0]),
            last_step=int(live_steps[-1]),
            severity=severity,
            slowdown=0.0,
            evidence=(
                f"{who}: {what.replace('_', ' ')} grows steadily, {rate / 2**20:.2f} MiB per step "
                f"(to {max(ends) / 2**30:.2f} GiB){projection}"
            ),
            details={"series": what, "bytes_per_step": rate},
        )
    ]


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """Memory that keeps growing (the detectors' table)."""
    if m is None or ctx.live is None:
        return Found()
    return Found(detect_memory_growth(m, ctx.live))
