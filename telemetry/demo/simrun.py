"""``telemetry simulate``: a run directory written by the simulator (:mod:`.simulate`) through
the run store's own segment writer, with the ground truth beside it (``truth.json``): for
benchmarks, the dashboard's scale tests, and trying the tools without a cluster.

The job is simulated in pieces of 2,048 steps (all ranks at once, vectorized); each piece is split
by rank and sealed as one segment per rank, as a rank's own sink would seal it (no tail, no spans:
a simulation has no intervals to show). Eight ranks per node, named ``node0``, ``node1``, ...

Memory is bounded whatever the world (:data:`MAX_CELLS`): a piece is simulated a run of steps at a time
and written a group of ranks at a time; a piece larger than that waits for its ranks' turn in a
scratch file in the run directory (unlinked: nothing is left behind). The files are the same as when a
piece was held whole (``tests/unit/telemetry/demo/test_simrun.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import IO

import numpy as np
import pandas as pd
import pyarrow as pa

from ..store import layout
from ..store.segments import write_columns
from .simulate import COLUMNS, SIM_EPOCH_S, Scenario, rank_table, simulate_chunks, simulate_pieces

RANKS_PER_NODE = 8
# (rank, step) cells simulated, or turned into rows, at once: bounds the process's memory whatever the
# ranks, where a piece of 2,048 steps of every rank held whole grew with them (bench/RESULTS.md,
# "Simulate at 10,000 ranks: peak memory").
MAX_CELLS = 2_000_000


class _Grid:
    """One piece's columns, (steps x ranks) each (:data:`~.simulate.COLUMNS`), filled a run of steps at a
    time and read a group of ranks at a time: in memory, or, for a piece of more than ``max_cells``
    cells, in an unlinked scratch file in ``where`` (written and read with pwrite and pread: the file's
    pages are the kernel's cache, not this process's memory)."""

    def __init__(self, steps: int, ranks: int, where: str, max_cells: int) -> None:
        self.steps, self.ranks = steps, ranks
        self.mem: dict[str, np.ndarray] | None = None
        self.file: IO[bytes] | None = None
        if steps * ranks <= max_cells:
            self.mem = {k: np.empty((steps, ranks)) for k in COLUMNS}
        else:
            self.file = tempfile.TemporaryFile(dir=where, prefix=".simulate-")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def _at(self, col: int, step: int, rank: int = 0) -> int:
        return ((col * self.steps + step) * self.ranks + rank) * 8

    def put(self, off: int, cols: dict[str, np.ndarray]) -> None:
        """Steps off .. off + len - 1 of every rank."""
        for i, k in enumerate(COLUMNS):
            v = np.ascontiguousarray(cols[k], dtype=np.float64)
            if self.mem is not None:
                self.mem[k][off : off + len(v)] = v
            else:
                assert self.file is not None  # no columns in memory: in the file
                buf = memoryview(v).cast("B")  # pyright: ignore[reportArgumentType] - an ndarray is a buffer (numpy's stubs say so from Python 3.12)
                os.pwrite(self.file.fileno(), buf, self._at(i, off))

    def ranks_of(self, first: int, last: int) -> dict[str, np.ndarray]:
        """{column: (ranks, steps) array} of ranks first .. last - 1, every step."""
        if self.mem is not None:
            return {k: np.ascontiguousarray(v[:, first:last].T) for k, v in self.mem.items()}
        out = {}
        width = (last - first) * 8
        assert self.file is not None  # no columns in memory: in the file
        fd = self.file.fileno()
        for i, k in enumerate(COLUMNS):
            rows = np.empty((self.steps, last - first))
            view = memoryview(rows).cast("B")  # pyright: ignore[reportArgumentType] - an ndarray is a buffer (numpy's stubs say so from Python 3.12)
            for s in range(self.steps):
                got = os.preadv(fd, [view[s * width : (s + 1) * width]], self._at(i, s, first))
                if got != width:
                    raise OSError(f"the simulator's scratch file gave {got} of {width} bytes")
            out[k] = np.ascontiguousarray(rows.T)
        return out


def write_simulated_run(
    sc: Scenario,
    out: str,
    overwrite: bool = False,
    chunk_steps: int = 2048,
    start_time_s: float | None = None,
    code: dict | None = None,
    tags: dict | None = None,
    max_cells: int = MAX_CELLS,
) -> dict:
    """Write ``sc`` as a run directory at ``out``; returns what was written (records, seconds).
    ``start_time_s``: the run's start in its meta (default: now); ``code`` and ``tags`` as a real run's
    meta has them (``telemetry history``). ``chunk_steps``: steps per segment; ``max_cells``: (rank, step)
    cells worked on at once (the memory; the files do not depend on it). A scenario with ``gpu_signals``
    (sampled across every rank) is held a piece at a time."""
    if os.path.exists(out):
        if not overwrite:
            raise FileExistsError(f"{out!r} exists; pass --overwrite to replace it")
        if not layout.is_run_dir(out):
            raise FileExistsError(f"{out!r} exists and is not a run directory; not replacing it")
        shutil.rmtree(out)
    t0 = time.perf_counter()
    os.makedirs(os.path.join(out, layout.RANKS_DIR))
    node = {r: f"node{r // RANKS_PER_NODE}" for r in range(sc.ranks)}
    for r in range(sc.ranks):
        layout.write_json_atomic(layout.rank_meta_path(out, r), {"rank": r, "node": node[r], "simulated": True})
    records = 0
    start = time.time() if start_time_s is None else start_time_s
    shift = start - SIM_EPOCH_S  # the steps begin at the run's start
    with ThreadPoolExecutor(max_workers=4) as pool:

        def write(first: int, seq: int, table: pd.DataFrame, n: int) -> None:
            """Rows by rank then step, ``n`` steps per rank from rank ``first``: a segment per rank."""
            table["start_s"] += shift
            arrow = pa.Table.from_pandas(table, preserve_index=False)
            ranks = range(len(table) // n)
            list(pool.map(lambda i: write_columns(out, first + i, seq, arrow.slice(i * n, n)), ranks))

        if sc.gpu_signals:
            for seq, piece in enumerate(simulate_chunks(sc, chunk_steps), start=1):
                piece["start_s"] += shift
                table = pa.Table.from_pandas(piece, preserve_index=False)
                order = np.argsort(piece["rank"].to_numpy(), kind="stable")  # rows by rank, then step
                table = table.take(pa.array(order))
                n = len(piece) // sc.ranks
                list(pool.map(lambda r: write_columns(out, r, seq, table.slice(r * n, n)), range(sc.ranks)))  # noqa: B023 - consumed here, in this iteration
                records += len(piece)
        else:
            rows = max(1, max_cells // sc.ranks)  # steps simulated at once
            group = max(1, max_cells // max(1, min(chunk_steps, sc.steps)))  # ranks turned into rows at once
            for seq, piece in enumerate(simulate_pieces(sc, chunk_steps, rows), start=1):
                grid = _Grid(piece.n, sc.ranks, out, max_cells)
                try:
                    for off, cols in piece.runs():
                        grid.put(off, cols)
                    for first in range(0, sc.ranks, group):
                        last = min(sc.ranks, first + group)
                        table = rank_table(sc, piece, first, grid.ranks_of(first, last))
                        write(first, seq, table, piece.n)
                        records += len(table)
                finally:
                    grid.close()
    meta = {
        "job": sc.name,
        "world_size": sc.ranks,
        "format": 2,
        "simulated": True,
        "start_time_s": start,
        "hosts": {str(r): node[r] for r in range(sc.ranks)},
        "versions": {},
        "config": {},
        "code": code or {"commit": None, "why": "simulated"},
        "tags": tags or {},
    }
    layout.write_json_atomic(os.path.join(out, layout.META), meta)
    truth = {
        "scenario": {k: v for k, v in asdict(sc).items() if k != "faults"},
        "faults": [asdict(f) for f in sc.faults],
        "records": records,
    }
    layout.write_json_atomic(os.path.join(out, "truth.json"), truth)
    return {"records": records, "seconds": time.perf_counter() - t0}


def write_series(
    sc: Scenario,
    out: str,
    runs: int,
    from_run: int = 1,
    run_noise: float = 0.01,
    start_time_s: float | None = None,
    every_s: float = 86400.0,
    overwrite: bool = False,
) -> list[str]:
    """``runs`` runs of ``sc`` as ``out/run-01``, ``out/run-02``, ...: run k (counting from 1) has seed
    ``sc.seed + k``, starts ``every_s`` after the one before (the first at ``start_time_s``, default: now
    minus the series' span), and holds ``sc.faults`` only from run ``from_run`` on; every run's compute is
    also scaled by one draw of N(1, ``run_noise``) (run-to-run noise: another node, another day), and its
    commit is ``sim-<k>`` (the fault's first run: a new commit). Returns the run directories."""
    from dataclasses import replace

    from .faults import Fault

    if os.path.exists(out) and os.listdir(out) and not overwrite:
        raise FileExistsError(f"{out!r} exists and is not empty; pass --overwrite to replace its runs")
    os.makedirs(out, exist_ok=True)
    first = time.time() - runs * every_s if start_time_s is None else start_time_s
    rng = np.random.default_rng(sc.seed + 1_000_003)
    width = max(2, len(str(runs)))
    paths = []
    for k in range(1, runs + 1):
        noise = float(rng.normal(1.0, run_noise)) if run_noise > 0 else 1.0
        faults = (sc.faults if k >= from_run else ()) + (Fault("regression", factor=noise, start=0),)
        run = replace(sc, name=sc.name, seed=sc.seed + k, faults=faults)
        path = os.path.join(out, f"run-{k:0{width}d}")
        write_simulated_run(
            run,
            path,
            overwrite=True,
            start_time_s=first + (k - 1) * every_s,
            code={"commit": f"sim-{k}", "dirty": False},
        )
        paths.append(path)
    return paths


def parse_faults(specs: list[str], ranks: int, steps: int):
    """``--inject`` specs (the demo's syntax) for the kinds the simulator models."""
    from .faults import SIMULATED, InjectError, check_against_job, parse_inject

    faults = [parse_inject(s) for s in specs]
    for f in faults:
        if f.kind not in SIMULATED:
            raise InjectError(f"--inject {f.kind}: not simulated; accepted here: {', '.join(SIMULATED)}")
    check_against_job(faults, ranks, steps)
    return tuple(faults)


__all__ = ["parse_faults", "write_simulated_run"]
