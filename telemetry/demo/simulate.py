"""A documented simulation of synchronous data-parallel steps, for scoring detectors.

:class:`Scenario` is the job (its step model is in its docstring), :class:`~.faults.Fault` each injected
fault (the ground truth); :func:`simulate` gives the steps table the job would write (pieces for long
jobs: :func:`simulate_chunks`, :func:`simulate_pieces`), with device signals when ``gpu_signals`` is on
(:func:`_device_signals`). The true cost of a fault is measured by simulating the same random draws
without it (:func:`true_slowdown`).

>>> table = simulate(Scenario(ranks=8, steps=100, faults=(Fault("straggler", ranks=(3,), phase="forward", factor=1.5),)))
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .faults import Fault

PHASES = {"forward": 0.010, "backward": 0.020, "optimizer": 0.004}


@dataclass(frozen=True)
class Scenario:
    """A simulated job. Step s on rank r starts when its previous optimizer step ends,
    start_r = end(s-1) + o_r(s-1); it waits for data d_r, computes forward f_r and backward b_r, then
    meets all ranks in the gradient all-reduce (inside backward), which ends when the last rank
    arrives plus the collective's own time c; then its optimizer o_r. So::

        arrival_r = start_r + d_r + f_r + b_r,   end(s) = max_r arrival_r + c,
        comm_s(r) = end(s) - arrival_r  (waiting for the last rank, plus c),
        duration_s(r) = f_r + b_r + comm_s(r) + o_r,   data_s(r) = d_r.

    A slow optimizer on one rank therefore delays its next arrival, as in a real job. Each phase time is
    base x static rank factor x per-step lognormal jitter, independent per phase. Noise traps: warm-up,
    one-off spikes on one rank, checkpoint steps that hit every rank, static rank differences, heavy
    jitter, large worlds, host work between steps (``gap_s``). Faults beyond the demo's: moving
    imbalance (per-step work factors shared by a rank's phases), stage imbalance (pipeline groups),
    memory growth, ``host_overhead`` (host work in the step outside any phase, before the all-reduce),
    intermittent and bounded faults. A job whose ranks compute 60-80% of the time (the common case)
    is a healthy scenario with a larger ``comm_s``, ``data_s`` or ``gap_s``: ``Scenario(comm_s=0.012)``
    computes about 70%."""

    name: str = "scenario"
    ranks: int = 8
    steps: int = 300
    seed: int = 0
    jitter: float = 0.05
    static: float = 0.01
    comm_s: float = 0.005
    data_s: float = 0.0005
    warmup_steps: int = 2
    warmup_factor: float = 3.0
    spikes: tuple[tuple[int, int, float], ...] = ()  # (rank, step, seconds)
    checkpoint_every: int = 0
    checkpoint_s: float = 0.2
    gap_s: float = 0.0  # host work between steps (outside telemetry.step): the next step starts this much later
    stages: int = 1
    ranks_per_node: int = 0  # > 0: a node column (node0, node1, ...), consecutive ranks per node
    gpu_signals: bool = False  # add dev.gpu_utilization_ratio, dev.gpu_sm_activity_ratio and mfu (_device_signals)
    sample_s: float = 1.0  # the device signals' sampling period, seconds of job time
    faults: tuple[Fault, ...] = field(default_factory=tuple)

    def healthy(self) -> "Scenario":
        return replace(self, faults=())


def _active(f: Fault, s: int, coin: float) -> bool:
    return s >= f.start and (f.end is None or s <= f.end) and coin < f.probability


SIM_EPOCH_S = 1.7e9  # the simulated job's first step starts here (telemetry simulate moves it to the run's start)
CHUNK_CELLS = 20_000_000  # ranks x steps simulated at once (random draws included): bounds a piece's memory


def simulate(sc: Scenario) -> pd.DataFrame:
    """The steps table this job would write (one row per rank and step)."""
    return pd.concat(list(simulate_chunks(sc)), ignore_index=True)


def simulate_chunks(sc: Scenario, chunk_steps: int | None = None):
    """The steps table in pieces of ``chunk_steps`` steps (all ranks), rows by step then rank. Random
    draws are made per piece in a fixed order, so a job that fits in one piece (every scenario of
    ``bench/detectors``) gets the same draws however it is asked for. ``telemetry simulate`` writes
    pieces of 2,048 steps without holding one at once: :func:`simulate_pieces`."""
    R, S = sc.ranks, sc.steps
    step_chunk = chunk_steps or max(1, min(S, CHUNK_CELLS // max(R, 1)))
    for piece in simulate_pieces(sc, step_chunk):
        [(_, cols)] = piece.runs()
        table = _frame(sc, np.tile(np.arange(R), piece.n), np.repeat(np.arange(piece.lo, piece.lo + piece.n), R), cols)
        if sc.gpu_signals:
            _device_signals(table, sc, piece.lo)
        if any(f.cause for f in sc.faults):
            _signals(table, sc, piece.coins, piece.lo)
        yield table


COLUMNS = ("start_s", "duration_s", "data_s", "forward_s", "backward_s", "optimizer_s", "comm_s", "mem")


class Piece:
    """Steps ``lo`` .. ``lo + n - 1`` of every rank, whose random draws are those of one piece (see
    :func:`simulate_pieces`); :meth:`runs` simulates them ``rows`` steps at a time. A piece's runs are
    taken in full before the next piece (the job's state goes from one to the next)."""

    def __init__(self, sc: Scenario, rng: np.random.Generator, lo: int, n: int, rows: int, job: dict) -> None:
        self.sc, self.lo, self.n, self.rows, self.job = sc, lo, n, max(1, rows), job
        R = sc.ranks
        # The draws, as one piece makes them in one go: forward, backward, optimizer, data (steps x ranks
        # each), comm (steps), coins (faults x steps), work (steps x ranks). Drawn in runs, each (steps x
        # ranks) kind comes from a generator placed where its draws begin (found by making, in runs, the
        # draws before it once and dropping them); work, the last, comes from rng itself, which so ends
        # where the draws in one go leave it. NumPy's draws in runs are the draws in one go.
        self.gens: dict[str, np.random.Generator] = {}
        self.whole: dict[str, np.ndarray] = {}
        for kind in (*PHASES, "data"):
            if self.rows >= n:
                self.whole[kind] = rng.lognormal(0, sc.jitter, size=(n, R))
                continue
            self.gens[kind] = _copy(rng)
            for off in range(0, n, self.rows):
                rng.lognormal(0, sc.jitter, size=(min(self.rows, n - off), R))
        self.comm = rng.lognormal(0, sc.jitter / 2, size=n)
        self.coins = rng.random(size=(len(sc.faults), n))
        if self.rows >= n:
            self.whole["work"] = rng.lognormal(0, 0.25, size=(n, R))  # per-step work factors (imbalance faults)
        else:
            self.gens["work"] = rng

    def runs(self):
        """(first step's offset in the piece, {column: (steps, ranks) array}) per run of steps, in order."""
        sc, R = self.sc, self.sc.ranks
        for off in range(0, self.n, self.rows):
            m = min(self.rows, self.n - off)
            if self.whole:
                draws = dict(self.whole)
            else:
                draws = {k: self.gens[k].lognormal(0, sc.jitter, size=(m, R)) for k in (*PHASES, "data")}
                draws["work"] = self.gens["work"].lognormal(0, 0.25, size=(m, R))
            draws["comm"] = self.comm[off : off + m]
            draws["coins"] = self.coins[:, off : off + m]
            yield off, _grid(sc, self.lo + off, m, draws, self.job)


def _copy(rng: np.random.Generator) -> np.random.Generator:
    bits = type(rng.bit_generator)()
    bits.state = rng.bit_generator.state
    return np.random.Generator(bits)


def simulate_pieces(sc: Scenario, chunk_steps: int, rows: int | None = None):
    """The job as :class:`Piece` s of ``chunk_steps`` steps (the random draws are made per piece, as
    :func:`simulate_chunks` makes them), each simulated ``rows`` steps at a time (default: the whole
    piece): the same numbers whatever ``rows`` is, with (rows x ranks) cells of draws held at once."""
    R, S = sc.ranks, sc.steps
    rng = np.random.default_rng(sc.seed)
    job = {
        "stage_of": np.arange(R) * sc.stages // R,
        "static": 1 + rng.normal(0, sc.static, size=R),
        "t": SIM_EPOCH_S,
        "prev_opt": np.zeros(R),
        "mem": np.full(R, 8.0 * 2**30),
    }
    for lo in range(0, S, chunk_steps):
        n = min(chunk_steps, S - lo)
        yield Piece(sc, rng, lo, n, rows or n, job)


def _grid(sc: Scenario, lo: int, n: int, draws: dict, state: dict) -> dict[str, np.ndarray]:
    """Steps lo .. lo + n - 1 of every rank, one numpy pass over the ranks per step: {column: (steps,
    ranks) array} (:data:`COLUMNS`); ``state`` (the job's clock, the last optimizer times, memory) goes on."""
    R = sc.ranks
    static, stage_of = state["static"], state["stage_of"]
    cols = {k: np.empty((n, R)) for k in COLUMNS}
    t, prev_opt, mem = state["t"], state["prev_opt"], state["mem"]
    for i in range(n):
        s = lo + i
        comp = {p: base * static * draws[p][i] for p, base in PHASES.items()}
        if s < sc.warmup_steps:
            comp = {p: v * sc.warmup_factor for p, v in comp.items()}
        data = sc.data_s * draws["data"][i]
        own_comm = sc.comm_s * draws["comm"][i]
        host, gap = np.zeros(R), sc.gap_s
        for fi, f in enumerate(sc.faults):
            if not _active(f, s, draws["coins"][fi, i]):
                continue
            idx = list(f.ranks) if f.ranks else list(range(R))
            if f.kind == "straggler":
                for p in [f.phase] if f.phase else ["forward", "backward"]:
                    comp[p][idx] *= f.factor
            elif f.kind == "regression":
                for p in [f.phase] if f.phase else list(PHASES):
                    comp[p] *= f.factor
            elif f.kind == "data_stall":
                data[idx] += f.delay_s
            elif f.kind == "slow_comm":
                own_comm *= f.factor
            elif f.kind == "imbalance":
                for p in ("forward", "backward"):
                    comp[p] *= draws["work"][i]
            elif f.kind == "stage_imbalance":
                for p in ("forward", "backward"):
                    comp[p][stage_of == f.stage] *= f.factor
            elif f.kind == "memory_growth":
                mem[list(f.ranks) if f.ranks else slice(None)] += 4 * 2**20
            elif f.kind == "host_overhead":
                host[idx] += f.delay_s
            elif f.kind == "host_gap":
                gap += f.delay_s
        for r, step, sec in sc.spikes:
            if step == s:
                comp["forward"][r] += sec
        if sc.checkpoint_every and s > 0 and s % sc.checkpoint_every == 0:
            comp["optimizer"] = comp["optimizer"] + sc.checkpoint_s
        start = t + prev_opt
        arrival = start + data + comp["forward"] + comp["backward"] + host
        end = arrival.max() + own_comm
        comm = end - arrival
        cols["start_s"][i] = start + data
        cols["duration_s"][i] = comp["forward"] + comp["backward"] + comm + comp["optimizer"] + host
        cols["data_s"][i] = data
        cols["forward_s"][i] = comp["forward"]
        cols["backward_s"][i] = comp["backward"] + comm
        cols["optimizer_s"][i] = comp["optimizer"]
        cols["comm_s"][i] = comm
        cols["mem"][i] = mem
        t = end + gap
        prev_opt = comp["optimizer"]
    state.update(t=t, prev_opt=prev_opt, mem=mem)
    return cols


def _frame(sc: Scenario, rank: np.ndarray, step: np.ndarray, cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """The steps table of rows (``rank``, ``step``) from :func:`_grid`'s columns in the same row order."""
    stage_of = np.arange(sc.ranks) * sc.stages // sc.ranks
    table = pd.DataFrame(
        {
            "rank": rank,
            "step": step,
            "start_s": cols["start_s"].ravel(),
            "duration_s": cols["duration_s"].ravel(),
            "data_s": cols["data_s"].ravel(),
            "forward_s": cols["forward_s"].ravel(),
            "backward_s": cols["backward_s"].ravel(),
            "optimizer_s": cols["optimizer_s"].ravel(),
            "comm_s": cols["comm_s"].ravel(),
            "comm.backward_s": cols["comm_s"].ravel(),
            "tokens": 4096,
            "samples": 8,
            "dev.cuda_memory_allocated_bytes": cols["mem"].ravel(),
            "dev.gpu_memory_total_bytes": 80.0 * 2**30,
        }
    )
    if sc.stages > 1:
        table["stage"] = stage_of[rank]
    if sc.ranks_per_node:
        table["node"] = [f"node{r // sc.ranks_per_node}" for r in table["rank"]]
    return table


def rank_table(sc: Scenario, piece: Piece, first: int, cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """Ranks ``first`` .. ``first + len - 1`` of ``piece``, rows by rank then step: the rows
    :func:`simulate_chunks` gives for them (the cause signals included; not the device signals,
    which are sampled across every rank). ``cols``: {column: (ranks, steps) array} of :data:`COLUMNS`."""
    if sc.gpu_signals:
        raise ValueError("a scenario with gpu_signals is simulated whole pieces at a time (simulate_chunks)")
    g, n = cols["start_s"].shape
    table = _frame(sc, np.repeat(np.arange(first, first + g), n), np.tile(np.arange(piece.lo, piece.lo + n), g), cols)
    if any(f.cause for f in sc.faults):
        _signals(table, sc, piece.coins, piece.lo)
    return table


GPU_BUSY = {"sm_compute": 0.85, "sm_comm": 0.06, "mfu_compute": 0.42, "kernel_gaps": 0.99}


def _device_signals(table: pd.DataFrame, sc: Scenario, lo: int) -> None:
    """GPU utilization, SM activity and MFU per rank and step, sampled every ``sc.sample_s`` seconds of
    job time within this piece of the table (steps lo..). Off by default, so that the tables of
    scenarios without them stay as they were. Per rank, over its time from one step's start to the
    next (data wait and host gaps idle), with 1% noise: NVML's GPU utilization (any kernel running: the
    phases' compute and the collective's kernel, which spins while it waits for the last rank), SM
    activity (compute kernels keep 85% of the SMs busy, the collective's kernel 6%) and MFU (42% of peak
    while computing); each step carries the time-weighted mean of the sample window its end falls in,
    as the device sampler's readings are attributed to steps by time."""
    R = sc.ranks
    n = len(table) // R

    def grid(col: str) -> np.ndarray:  # rows are step-major: (steps, ranks)
        return table[col].to_numpy(dtype=float).reshape(n, R)

    data, dur, comm = grid("data_s"), grid("duration_s"), grid("comm_s")
    begin = grid("start_s") - data  # when the rank's step began (before its data wait)
    phases = grid("forward_s") + grid("backward_s") + grid("optimizer_s")  # kernels, the collective's included
    compute = phases - comm
    wall = np.empty((n, R))
    wall[:-1] = begin[1:] - begin[:-1]  # to the next step's beginning: the host gap after it included
    wall[-1] = data[-1] + dur[-1] + sc.gap_s
    wall = np.maximum(wall, data + dur)
    rng = np.random.default_rng([sc.seed, 7, lo])  # its own draws: the steps' draws stay as they were
    noise = rng.lognormal(0, 0.01, size=(3, n, R))
    busy = {
        "dev.gpu_utilization_ratio": np.minimum(1.0, GPU_BUSY["kernel_gaps"] * phases / wall * noise[0]),
        "dev.gpu_sm_activity_ratio": np.minimum(
            1.0, (GPU_BUSY["sm_compute"] * compute + GPU_BUSY["sm_comm"] * comm) / wall * noise[1]
        ),
        "mfu": GPU_BUSY["mfu_compute"] * compute / wall * noise[2],
    }
    end = (begin + wall).max(axis=1)
    window = np.floor((end - end[0]) / sc.sample_s).astype(int)  # the sample each step's end falls in
    counts = np.bincount(window)
    weight = np.stack([np.bincount(window, wall[:, r], minlength=len(counts)) for r in range(R)], axis=1)
    for col, x in busy.items():
        sums = np.stack([np.bincount(window, x[:, r] * wall[:, r], minlength=len(counts)) for r in range(R)], axis=1)
        table[col] = (sums / weight)[window].ravel()


# What each cause looks like in the sampled signals: column -> (the culprit's value, everyone else's).
# Counters (ECC and NIC errors) grow by the culprit's value per step.
CAUSE_SIGNALS: dict[str, dict[str, tuple[float, float]]] = {
    "gpu_thermal": {
        "dev.gpu_clock_event_HwThermalSlowdown": (1.0, 0.0),
        "dev.gpu_temperature_celsius": (90.0, 66.0),
        "dev.gpu_sm_clock_hertz": (1.5e9, 1.98e9),
    },
    "gpu_power_cap": {"dev.gpu_clock_event_SwPowerCap": (1.0, 0.0), "dev.gpu_sm_clock_hertz": (1.6e9, 1.98e9)},
    "gpu_hw_slowdown": {"dev.gpu_clock_event_HwSlowdown": (1.0, 0.0), "dev.gpu_sm_clock_hertz": (1.2e9, 1.98e9)},
    "gpu_clocks": {"dev.gpu_sm_clock_hertz": (1.6e9, 1.98e9)},
    "gpu_errors": {"dev.gpu_ecc_errors_corrected": (1.0, 0.0)},
    "link_errors": {"dev.nic_errors_symbol_error": (5.0, 0.0)},
    # measured on a real 2-rank job, a process taking 60% of rank 1's core (tests/integration/test_cpu_causes.py)
    "cpu_contention": {
        "dev.cpu_runqueue_wait_ratio": (0.38, 0.04),
        "dev.cpu_running_ratio": (0.43, 0.42),
        "dev.process_involuntary_switches_per_second": (253.0, 163.0),
    },
    # ... and a 0.25-core CPU quota on rank 1's cgroup (the peers have none: no period is throttled)
    "cpu_throttled": {
        "dev.cpu_throttled_periods_ratio": (1.0, 0.0),
        "dev.cpu_throttled_ratio": (0.70, 0.0),
        "dev.cpu_runqueue_wait_ratio": (0.63, 0.03),
        "dev.cpu_running_ratio": (0.25, 0.42),
    },
    "memory_pressure": {"dev.process_major_faults_per_second": (80.0, 0.0)},
}


def _signals(table: pd.DataFrame, sc: Scenario, coins: np.ndarray, lo: int = 0) -> None:
    """Fill the device and host signals of each fault's ``cause`` (ground truth for cause finding):
    the culprit ranks' values on the steps the fault is active, the healthy value elsewhere.
    ``table`` holds steps lo.. (``coins``: their draws)."""
    steps, ranks = table["step"].to_numpy(), table["rank"].to_numpy()
    for fi, f in enumerate(sc.faults):
        if not f.cause:
            continue
        on = np.array([_active(f, lo + i, coins[fi, i]) for i in range(coins.shape[1])])[steps - lo]
        if f.ranks:
            on &= np.isin(ranks, f.ranks)
        for col, (bad, good) in CAUSE_SIGNALS[f.cause].items():
            if col.startswith(("dev.gpu_ecc", "dev.nic_errors_")):  # a counter: grows on the culprit's active steps
                grow = np.where(on, bad, 0.0)
                table[col] = pd.Series(grow).groupby(ranks).cumsum().to_numpy()
            else:
                table[col] = np.where(on, bad, table[col].to_numpy() if col in table else good)


def true_slowdown(sc: Scenario, first: int | None = None, last: int | None = None) -> float:
    """1 - healthy / faulty job time over steps first..last, from the same random draws."""
    a, b = simulate(sc), simulate(sc.healthy())

    def job_time(t: pd.DataFrame) -> pd.Series:
        return (t["duration_s"] + t["data_s"]).groupby(t["step"]).median()

    ta, tb = job_time(a), job_time(b)
    sel = slice(first, last)
    actual, ideal = float(ta.loc[sel].sum()), float(tb.loc[sel].sum())
    return 1.0 - ideal / actual if actual > 0 else 0.0
