"""Rank 0's steps table of the online window: one row per rank and block, built from the blocks'
matrices, with each rank's phase names (posted once by each rank, read once by rank 0)."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .wire import FIXED, Block


class PhaseNames:
    """The phase names of each rank of a job of ``world`` ranks, as rank 0 learned them. Ranks of
    one list share its id (``ids[rank]``, -1 while a rank's names are not known)."""

    def __init__(self, world: int) -> None:
        self.by_rank: dict[int, list[str]] = {}
        self.lists: list[tuple[str, ...]] = []  # distinct phase lists; ids[rank] indexes it
        self._index: dict[tuple[str, ...], int] = {}
        self.ids = np.full(max(world, 1), -1, dtype=np.int64)

    def unnamed(self, blocks: Iterable[Block]) -> list[int]:
        """The ranks of ``blocks`` whose names are not known, ascending."""
        ids = self.ids
        found = [blk.ranks[ids[np.clip(blk.ranks, 0, len(ids) - 1)] < 0] for blk in blocks]
        return np.unique(np.concatenate(found)).tolist() if found else []

    def learn(self, rank: int, names: Sequence[str]) -> None:
        self.by_rank[rank] = list(names)
        nid = self._index.setdefault(tuple(names), len(self.lists))
        if nid == len(self.lists):
            self.lists.append(tuple(names))
        if 0 <= rank < len(self.ids):
            self.ids[rank] = nid


def block_table(blocks: list[tuple[int, Block]], names: PhaseNames, every: int):
    """The steps table of ``blocks`` ((block, Block), each with ranks): a row per rank and block
    (blocks in the order given, ranks ascending), columns rank, step, start_s, duration_s, comm_s,
    data_s, then ``{phase}_s`` (the phase's compute) and ``comm.{phase}_s`` (0: the comm inside a
    phase is removed) in the order they first appear; a rank without a phase has NaN in both."""
    import pandas as pd

    if not blocks:
        return pd.DataFrame()
    ids = names.ids
    parts = [(seq, b, ranks, mat) for seq, (b, blk) in enumerate(blocks) for ranks, mat in blk.parts]
    sizes = [len(r) for _, _, r, _ in parts]
    n = sum(sizes)
    offsets = np.cumsum([0] + sizes[:-1])
    rank = np.concatenate([r for _, _, r, _ in parts])
    order = None
    if len(parts) > len(blocks):  # a block of several vector lengths: rows back to rank order
        seq = np.concatenate([np.full(len(r), s) for s, _, r, _ in parts])
        order = np.lexsort((rank, seq))
    cols: dict[str, np.ndarray] = {
        "rank": rank,
        "step": np.concatenate([np.full(len(r), b * every, dtype=np.int64) for _, b, r, _ in parts]),
        "start_s": np.concatenate([np.full(len(r), float(b)) for _, b, r, _ in parts]),
        "duration_s": np.concatenate([m[:, 2] for *_, m in parts]),
        "comm_s": np.concatenate([m[:, 4] for *_, m in parts]),
        "data_s": np.concatenate([m[:, 5] for *_, m in parts]),
    }
    fixed = list(cols)
    first: dict[str, tuple[int, int]] = {c: (0, i) for i, c in enumerate(fixed)}
    row_of = np.arange(n) if order is None else np.argsort(order)  # a built row's place in the table
    for (_, _, ranks, mat), off in zip(parts, offsets):
        nid = np.where((ranks >= 0) & (ranks < len(ids)), ids[np.clip(ranks, 0, len(ids) - 1)], -1)
        for name_id in np.unique(nid):
            sel = np.flatnonzero(nid == name_id)
            if len(sel) == len(ranks):  # the usual case: one phase list for every rank
                sel = slice(0, len(ranks))
                rows, top = slice(off, off + len(ranks)), int(row_of[off : off + len(ranks)].min())
            else:
                rows = off + sel
                top = int(row_of[rows].min())
            phases = names.lists[name_id] if name_id >= 0 else ()
            keys = list(
                dict.fromkeys(
                    fixed + [c for p in phases[: mat.shape[1] - len(FIXED)] for c in (f"{p}_s", f"comm.{p}_s")]
                )
            )
            for i, p in enumerate(phases[: mat.shape[1] - len(FIXED)]):
                for c, values in ((f"{p}_s", mat[sel, len(FIXED) + i]), (f"comm.{p}_s", 0.0)):
                    if c not in cols:
                        cols[c] = np.full(n, np.nan)  # NaN in the rows of ranks without this phase
                    cols[c][rows] = values
                    first[c] = min(first.get(c, (n, 0)), (top, keys.index(c)))
    column_names = sorted(cols, key=lambda c: first[c])
    if order is not None:
        cols = {c: v[order] for c, v in cols.items()}
    return pd.DataFrame({c: cols[c] for c in column_names})
