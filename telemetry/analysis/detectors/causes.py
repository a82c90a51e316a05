"""The cause behind a finding: the culprit's device and host signals against its peers' over the
finding's steps (for a job-wide change, the signals after its onset against before), ranked.

Each cause is ``{"kind", "evidence"}`` and needs its ``dev.<signal>`` columns in the steps table (a
signal the table lacks is simply not a cause); each kind's rule is in the manual (docs/causes.md). A
cause is only attached to a finding, so a signal on its own (a throttle flag on a rank that is not
slow) is never reported; each cause's evidence is the numbers its rule fired on, and only those.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import cast

import numpy as np

from ...steptable.matrix import StepMatrix, even_sample, nanmedian
from ..findings import Finding
from . import inputs
from .stall import DataWait

THERMAL = ("HwThermalSlowdown", "SwThermalSlowdown")
POWER = ("SwPowerCap", "HwPowerBrakeSlowdown")
HW = ("HwSlowdown",)


def attach_causes(m: StepMatrix, findings: list[Finding]) -> tuple[int, str | None]:
    """Fill ``causes`` of each finding in place (ranked, strongest first; may stay empty). Returns
    how many findings' causes could not be worked out (an error in a cause rule: that finding keeps
    no causes) and the first such error as text, for the summary and one warning."""
    failed, first = 0, None
    for f in findings:
        try:
            ranked = [c for _, c in sorted(_causes(m, f), key=lambda sc: -sc[0])]
        except Exception as exc:  # noqa: BLE001 - a cause is a hint: an odd column must not cost the finding
            failed += 1
            first = first or f"{f.kind} on ranks {f.ranks}: {type(exc).__name__}: {exc}"
            ranked = []
        f.causes[:] = ranked
    return failed, first


def _steps(m: StepMatrix, f: Finding) -> np.ndarray:
    lo = f.first_step if f.first_step is not None else m.steps[0]
    hi = f.last_step if f.last_step is not None else m.steps[-1]
    return (m.steps >= lo) & (m.steps <= hi)


def _causes(m: StepMatrix, f: Finding) -> list[tuple[float, dict[str, str]]]:
    cols = _steps(m, f)
    if not cols.any():
        return []
    culprits = np.isin(m.ranks, f.ranks) if f.ranks else None
    out: list[tuple[float, dict[str, str]]] = []
    if culprits is not None and culprits.any() and (~culprits).any():
        who = f"rank {f.ranks[0]}" if len(f.ranks) == 1 else f"ranks {', '.join(map(str, f.ranks))}"
        pair = _Pair(m, culprits, ~culprits, cols)
        out += _device(pair, who, "its peers")
        if f.kind in LINK_FINDINGS:
            out += _links(pair, who)
        excess = f.details.get("excess_s") if isinstance(f.details, dict) else None
        out += _host(pair, who, "its peers", excess if isinstance(excess, float) else None)
        if f.kind == "input_bound":  # what about its input: storage, workers, host
            out += inputs.causes(m, culprits, cols)
        out += _data(m, f, culprits, cols, who)
    elif f.kind == "input_bound":
        out += inputs.causes(m, None, cols)
    elif _changed(f) and cols.any() and (~cols).any():
        before = ~cols & (np.arange(m.n_steps) < np.argmax(cols))
        if before.sum() >= 5:
            pair = _Pair(m, None, None, cols, before)
            with _quiet():
                grew = float(np.nanmedian(m.step_time()[cols]) - np.nanmedian(m.step_time()[before]))
            out += _device(pair, "after the change", "before the change")
            if f.kind in LINK_CHANGES:
                out += _links_after(m, cols, before)
            out += _host(
                pair, "after the change", "before the change", grew if np.isfinite(grew) and grew > 0 else None
            )
    return out


def _changed(f: Finding) -> bool:
    """A job-wide finding with an onset (its signals after it against before): a regression, slow
    communication, a data wait that begins. Not an input-bound job (no onset: the steps before
    its first are only the warm-up)."""
    if f.kind in ("regression", "slow_comm"):
        return True
    return f.kind == "data_stall" and isinstance(f.details, dict) and f.details.get("before_s") is not None


@contextlib.contextmanager
def _quiet():
    """All-NaN slices (a rank with no device readings in the range) give NaN, without numpy's
    floating-point or "All-NaN slice" warnings on the user's terminal."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


class _Pair:
    """One signal, the culprit's against its peers' over the steps (or, job-wide: the median over
    ranks after the change against before)."""

    def __init__(
        self,
        m: StepMatrix,
        a_rows: np.ndarray | None,
        b_rows: np.ndarray | None,
        cols: np.ndarray,
        before: np.ndarray | None = None,
    ) -> None:
        self.m, self.a_rows, self.b_rows, self.cols, self.before = m, a_rows, b_rows, cols, before

    def values(self, name: str | np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``name``: a ``dev.`` signal, or an (R, S) grid made from some."""
        g = self.m.extra("dev." + name) if isinstance(name, str) else name
        if g is None:
            return None
        if self.before is None:
            return g[self.a_rows][:, self.cols], g[self.b_rows][:, self.cols]
        return nanmedian(g[:, self.cols], axis=0), nanmedian(g[:, self.before], axis=0)

    def level(self, name: str | np.ndarray) -> tuple[float, float] | None:
        v = self.values(name)
        if v is None:
            return None
        with _quiet():
            a, b = float(np.nanmedian(v[0])), float(np.nanmedian(v[1]))
        return (a, b) if np.isfinite(a) and np.isfinite(b) else None

    def own(self, name: str) -> float | None:
        """The culprit's level alone (after the change, job-wide), whether or not its peers have it."""
        v = self.values(name)
        if v is None:
            return None
        with _quiet():
            a = float(np.nanmedian(v[0]))
        return a if np.isfinite(a) else None

    def share(self, name: str) -> tuple[float, float] | None:
        """Share of steps the flag was on: the culprit's (its worst rank) and its peers' (median rank)."""
        v = self.values(name)
        if v is None:
            return None
        with _quiet():
            a, b = v
            if self.before is None:
                sa = float(np.nanmax(np.nanmean(a > 0.5, axis=1)))
                sb = float(np.nanmedian(np.nanmean(b > 0.5, axis=1)))
            else:
                sa, sb = float(np.nanmean(a > 0.5)), float(np.nanmean(b > 0.5))
        return sa, sb

    def growth(self, name: str) -> tuple[float, float] | None:
        """How much a cumulative counter grew over the steps: the culprit's and its peers'."""
        v = self.values(name)
        if v is None:
            return None
        with _quiet():
            a, b = v
            if self.before is None:
                ga = float(np.nanmax(np.nanmax(a, axis=1) - np.nanmin(a, axis=1)))
                gb = float(np.nanmedian(np.nanmax(b, axis=1) - np.nanmin(b, axis=1)))
            else:
                ga, gb = float(np.nanmax(a) - np.nanmin(a)), 0.0
        return (ga, gb) if np.isfinite(ga) else None


def _device(p: _Pair, who: str, peers: str) -> list[tuple[float, dict[str, str]]]:
    out = []
    flagged = False
    for kind, reasons, what in (
        ("gpu_thermal", THERMAL, "thermal"),
        ("gpu_power_cap", POWER, "power"),
        ("gpu_hw_slowdown", HW, "hardware"),
    ):
        for r in reasons:
            s = p.share(f"gpu_clock_event_{r}")
            if s and s[0] >= 0.2 and s[0] - s[1] >= 0.2:
                flagged = True
                out.append(
                    (
                        1.0 + s[0],
                        {
                            "kind": kind,
                            "evidence": (
                                f"{who}: NVML reports {r} ({what} clock limit) on {s[0]:.0%} of these steps, "
                                f"against {s[1]:.0%} for {peers}"
                            ),
                        },
                    )
                )
                break
    temp, clock = p.level("gpu_temperature_celsius"), p.level("gpu_sm_clock_hertz")
    if not flagged and temp and clock and temp[0] - temp[1] >= 10 and clock[0] <= 0.95 * clock[1]:
        flagged = True
        out.append(
            (
                0.9,
                {
                    "kind": "gpu_thermal",
                    "evidence": (
                        f"{who}: GPU at {temp[0]:.0f} °C against {temp[1]:.0f} °C for {peers}, SM clock "
                        f"{clock[0] / 1e6:.0f} MHz against {clock[1] / 1e6:.0f} MHz"
                    ),
                },
            )
        )
    if not flagged and clock and clock[1] > 0 and clock[0] <= 0.95 * clock[1]:
        out.append(
            (
                0.8 * (1 - clock[0] / clock[1]) + 0.5,
                {
                    "kind": "gpu_clocks",
                    "evidence": (
                        f"{who}: SM clock {clock[0] / 1e6:.0f} MHz against {clock[1] / 1e6:.0f} MHz for {peers} "
                        "(no clock-event reason reported)"
                    ),
                },
            )
        )
    errors = []
    for name, label in (
        ("gpu_ecc_errors_corrected", "corrected ECC errors"),
        ("gpu_ecc_errors_uncorrected", "uncorrected ECC errors"),
        ("gpu_pcie_replays", "PCIe replays"),
        ("gpu_xid_errors", "XID errors"),
    ):
        g = p.growth(name)
        if g and g[0] > 0 and g[0] > 2 * g[1]:
            errors.append(f"{g[0]:.0f} new {label}")
    if errors:
        out.append((0.95, {"kind": "gpu_errors", "evidence": f"{who}: {', '.join(errors)} during these steps"}))
    return out


# link_errors: the error counters of the node's RDMA NICs (node totals: every rank of a node reads the
# same) and of the rank's GPU's NVLinks; only a rank's straggler or slow_comm finding, and a job-wide
# slow_comm or regression, can have them as a cause
LINK_ERRORS = ("nic_errors_", "gpu_nvlink_errors_")
LINK_FINDINGS, LINK_CHANGES = ("straggler", "slow_comm"), ("slow_comm", "regression")


def _link_signals(m: StepMatrix) -> list[str]:
    return sorted(c[4:] for c in m.columns if c.startswith("dev.") and c[4:].startswith(LINK_ERRORS))


def _links(p: _Pair, who: str) -> list[tuple[float, dict[str, str]]]:
    """link_errors of a rank's finding: the culprit's link error counters grew over the steps, by
    more than twice its peers' growth. A NIC counter is compared with the ranks on other nodes
    (its node-mates read the same counters) where the table names the nodes and there are some."""
    names = _link_signals(p.m)
    if not names:
        return []
    away, peers_away = p, "its peers"
    if p.m.nodes is not None:
        other = cast(np.ndarray, p.b_rows) & ~np.isin(p.m.nodes, p.m.nodes[p.a_rows])  # a rank's pair: its peers'
        if other.any():
            away, peers_away = _Pair(p.m, p.a_rows, other, p.cols), "its peers on other nodes"
    grew = []
    for name in names:
        nic = name.startswith("nic_")
        g = (away if nic else p).growth(name)
        if g and g[0] > 0 and g[0] > 2 * g[1]:
            grew.append(f"{name} grew by {g[0]:.0f} against {g[1]:.0f} for {peers_away if nic else 'its peers'}")
    if not grew:
        return []
    return [(0.9, {"kind": "link_errors", "evidence": f"{who}: " + "; ".join(grew) + " during these steps"})]


def _links_after(m: StepMatrix, cols: np.ndarray, before: np.ndarray) -> list[tuple[float, dict[str, str]]]:
    """link_errors of a job-wide change: ranks whose link error counters grew after the onset, more
    than twice as fast per step as before it. Each rank is looked at, not the median over ranks: one
    node's bad link slows the whole job."""
    grew = []
    scale = cols.sum() / max(before.sum(), 1)
    for name in _link_signals(m):
        g = cast(np.ndarray, m.extra("dev." + name))  # a column of the matrix's: not None
        with _quiet():
            after = np.nanmax(g[:, cols], axis=1) - np.nanmin(g[:, cols], axis=1)
            prior = (np.nanmax(g[:, before], axis=1) - np.nanmin(g[:, before], axis=1)) * scale
        hit = np.isfinite(after) & (after > 0) & (after > 2 * np.where(np.isfinite(prior), prior, 0.0))
        if not hit.any():
            continue
        worst = int(np.flatnonzero(hit)[np.argmax(after[hit])])
        ranks = [int(r) for r in m.ranks[hit]]
        where = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:8]))}"
        where += f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
        if m.nodes is not None:
            nodes = sorted(set(m.nodes[hit]))
            where += f" (node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes[:4]))}{', ...' if len(nodes) > 4 else ''})"
        was = prior[worst] if np.isfinite(prior[worst]) else 0.0
        grew.append(f"{name} grew by {after[worst]:.0f} on {where} against {was:.0f} over as many steps before")
    if not grew:
        return []
    return [(0.9, {"kind": "link_errors", "evidence": "after the change: " + "; ".join(grew)})]


# cpu_contention from the scheduler's run-queue delay: of the time the culprit's training thread was
# ready to run, it waited for a CPU RUNQ_POINTS more than its peers (a share of its ready time, not of
# the wall clock: a victim blocked in a collective is not runnable, and must not look less contended
# than the straggler for that; 5 points more makes its work at least 5% slower than theirs), and the
# time that extra wait takes per step is at least RUNQ_EXPLAINS of the finding's excess per step (a
# small difference in a host's load does not explain a large straggler)
RUNQ_POINTS, RUNQ_EXPLAINS = 0.05, 0.25
# cpu_throttled: its cgroup throttled in THROTTLED_PERIODS of the quota's periods (that many more
# than its peers'), or THROTTLED_RATIO seconds per second (that much more than its peers')
THROTTLED_PERIODS, THROTTLED_RATIO = 0.10, 0.05


def _runnable_wait(p: _Pair) -> np.ndarray | None:
    """(R, S) the training thread's run-queue wait as a share of the time it was ready to run
    (waiting + running); the wait per second alone where its time on a CPU is not known."""
    wait, run = p.m.extra("dev.cpu_runqueue_wait_ratio"), p.m.extra("dev.cpu_running_ratio")
    if wait is None or run is None:
        return wait
    with _quiet():
        return np.where(wait + run > 0, wait / (wait + run), np.nan)


def _host(p: _Pair, who: str, peers: str, excess_s: float | None = None) -> list[tuple[float, dict[str, str]]]:
    """``excess_s``: the finding's excess per step, where it states one (a rank's)."""
    out = []
    job = p.before is not None
    waited = _runqueue(p, peers, excess_s)
    throttled = _throttled(p, who, peers, waited)
    if throttled:
        out.append(throttled)
    steal = p.level("host_cpu_steal_ratio")
    sw = p.level("process_involuntary_switches_per_second")
    cpu = p.level("process_cpu_ratio")
    why = []
    if waited and not throttled:  # a quota makes the thread wait too: then it is the quota's doing
        why.append(waited)
    if steal and steal[0] - steal[1] >= 0.05:
        why.append(f"its host's CPU steal is {steal[0]:.0%} against {steal[1]:.0%}")
    if not throttled:
        if sw and sw[0] >= 20 and sw[0] >= 3 * max(sw[1], 1.0):
            why.append(
                f"its training thread was switched out involuntarily {sw[0]:.0f}/s against {sw[1]:.0f}/s for {peers}"
            )
        if cpu and cpu[1] > 0 and cpu[0] <= 0.8 * cpu[1]:
            why.append(
                f"{'the median rank' if job else 'it'} got {cpu[0]:.2f} cores against "
                f"{cpu[1]:.2f} {peers if job else 'for ' + peers}"
            )
    if why:
        score = (0.9 if waited and not throttled else 0.85) + 0.05 * len(why)
        out.append((score, {"kind": "cpu_contention", "evidence": f"{who}: " + "; ".join(why)}))
    faults = p.level("process_major_faults_per_second")
    swap = p.growth("host_swap_used_bytes")
    why = []
    if faults and faults[0] >= 5 and faults[0] >= 3 * max(faults[1], 1.0):
        why.append(f"{faults[0]:.0f} major page faults/s against {faults[1]:.0f}/s for {peers}")
    if swap and swap[0] >= 64 * 2**20 and swap[0] > 2 * swap[1]:
        why.append(f"swap in use grew by {swap[0] / 2**20:.0f} MiB")
    if why:
        out.append((0.8, {"kind": "memory_pressure", "evidence": f"{who}: " + "; ".join(why)}))
    return out


def _throttled(p: _Pair, who: str, peers: str, waited: str) -> tuple[float, dict[str, str]] | None:
    """cpu_throttled: the culprit's cgroup throttled by its CPU quota (its share of the quota's
    periods throttled, or its throttled seconds per second, clearly above its peers')."""
    periods, secs = _or_unthrottled(p, "cpu_throttled_periods_ratio"), _or_unthrottled(p, "cpu_throttled_ratio")
    by_periods = bool(
        periods and periods[0] >= THROTTLED_PERIODS and periods[0] - (periods[1] or 0) >= THROTTLED_PERIODS
    )
    by_time = bool(secs and secs[0] >= THROTTLED_RATIO and secs[0] - (secs[1] or 0) >= THROTTLED_RATIO)
    if not (by_periods or by_time):
        return None
    quota = p.own("cpu_quota_cores")
    whose = "the median rank's cgroup" if p.before is not None else "its cgroup"
    against = peers if p.before is not None else "for " + peers
    what = []
    if periods:
        theirs = f"against {periods[1]:.0%} {against}" if periods[1] is not None else f"({peers} ran no quota periods)"
        what.append(f"in {periods[0]:.0%} of the quota's periods {theirs}")
    if secs:
        theirs = (
            f"against {secs[1] * 1e3:.0f} ms {against}"
            if secs[1] is not None
            else f"({peers} report no throttling counters)"
        )
        what.append(f"{secs[0] * 1e3:.0f} ms per second {theirs}")
    limit = f" (quota {quota:.2f} cores)" if quota else ""
    evidence = f"{who}: {whose} was throttled by its CPU quota{limit} " + ", ".join(what)
    if waited:
        evidence += f"; {waited}"
    return 0.95 + 0.04 * min(max(periods[0] if periods else 0.0, secs[0] if secs else 0.0), 1.0), {
        "kind": "cpu_throttled",
        "evidence": evidence,
    }


def _runqueue(p: _Pair, peers: str, excess_s: float | None) -> str:
    """The run-queue rule's evidence, or "" when it does not fire."""
    share_grid = _runnable_wait(p)
    share = p.level(share_grid) if share_grid is not None else None
    wait = p.level("cpu_runqueue_wait_ratio")
    if not (share and wait and share[0] - share[1] >= RUNQ_POINTS):
        return ""
    by_ready = share_grid is not p.m.extra("dev.cpu_runqueue_wait_ratio")
    run = p.level("cpu_running_ratio") if by_ready else None
    with _quiet():
        step = float(np.nanmedian(p.m.step_time()[p.cols]))
    extra = ""
    if np.isfinite(step):
        ready = wait[0] + run[0] if run else 1.0  # the culprit's ready time per second of the wall clock
        extra_s = (share[0] - share[1]) * ready * step
        if excess_s and extra_s < RUNQ_EXPLAINS * excess_s:
            return ""
        than = "than before the change" if p.before is not None else f"than at {peers}' share"
        extra = f": about {extra_s * 1e3:.1f} ms more of each {step * 1e3:.1f} ms step {than}"
    whose = "the median rank's" if p.before is not None else "its"
    return (
        f"{whose} training thread waited for a CPU {share[0]:.0%} of the time"
        f"{' it was ready to run' if by_ready else ''} (run-queue delay {wait[0] * 1e3:.0f} ms/s) against "
        f"{share[1]:.0%} {peers if p.before is not None else 'for ' + peers}{extra}"
    )


def _or_unthrottled(p: _Pair, name: str) -> tuple[float, float | None] | None:
    """The culprit's level against its peers'; (its level, None) where its peers have no reading
    at all (a cgroup without a quota runs no quota periods; a cgroup v2 root has no counters): no
    quota throttled them."""
    level = p.level(name)
    if level is not None or p.before is not None:
        return level
    mine, g = p.own(name), p.m.extra("dev." + name)
    if mine is None or g is None or np.isfinite(g[p.b_rows][:, p.cols]).any():
        return None
    return mine, None


def _data(
    m: StepMatrix, f: Finding, culprits: np.ndarray, cols: np.ndarray, who: str
) -> list[tuple[float, dict[str, str]]]:
    if f.kind == "data_stall" or f.phase == "data":
        w = DataWait.of(m, culprits, cols)
        if not (np.isfinite(w.mean_s) and np.isfinite(w.peer_mean_s) and w.stands_out()):
            return []  # its wait does not stand out over these steps: no input cause to name
        some = ""
        if w.median_s < 0.5 * w.mean_s:  # the time comes from long waits on some steps
            some = f" (a median of {w.median_s * 1e3:.1f} ms: long waits on some steps)"
        return [
            (
                0.7,
                {
                    "kind": "data_loader",
                    "evidence": (
                        f"{who} waits {w.mean_s * 1e3:.1f} ms per step for its next batch on average{some} against "
                        f"{w.peer_mean_s * 1e3:.1f} ms for its peers"
                        + (f" ({w.ratio:.1f}x)" if np.isfinite(w.ratio) else "")
                        + ", while its compute is "
                        + (
                            f"{w.compute_ratio:.2f}x theirs"
                            if np.isfinite(w.compute_ratio) and w.compute_ratio >= 1.005
                            else "no slower than theirs"
                        )
                        + ": its input pipeline, not its device"
                    ),
                },
            )
        ]
    mine = np.flatnonzero(culprits)
    peers = even_sample(np.flatnonzero(~culprits))  # the peers' centre needs no more than 64 of them

    def busy(rows: np.ndarray) -> np.ndarray:  # what a rank does itself; its wait in collectives is its peers' doing
        return (m.compute[rows] + m.data[rows])[:, cols]

    with _quiet():
        excess = float(np.nanmedian(busy(mine)) - np.nanmedian(busy(peers)))
        dwait = float(np.nanmedian(m.data[mine][:, cols]) - np.nanmedian(m.data[peers][:, cols]))
    if np.isfinite(excess) and np.isfinite(dwait) and excess > 0 and dwait >= 0.5 * excess:
        return [
            (
                0.6,
                {
                    "kind": "data_loader",
                    "evidence": (
                        f"{who} waits {dwait * 1e3:.1f} ms more per step for data than its peers, half or more of its excess"
                    ),
                },
            )
        ]
    return []
