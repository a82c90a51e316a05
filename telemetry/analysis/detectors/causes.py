"""The cause behind a finding: the culprit's device and host signals against its peers' over the
finding's steps (for a job-wide change, the signals after its onset against before), ranked.

Each cause is ``{"kind", "evidence"}`` and needs the signal named below in the steps table (the
``dev.<signal>`` columns the sampler fills; a signal the table lacks is simply not a cause). A cause
is only attached to a finding, so a signal on its own (a throttle flag on a rank that is not slow)
is never reported as a problem.

=================  ==========================================================================
kind               evidence it needs (culprit against the median of its peers, over the steps)
=================  ==========================================================================
gpu_thermal        a thermal clock-event reason (HwThermalSlowdown, SwThermalSlowdown) active on
                   at least 20% of the steps and 20 points more often than its peers; or the GPU
                   10 °C hotter with its SM clock 5% lower
gpu_power_cap      SwPowerCap or HwPowerBrakeSlowdown active, as above
gpu_hw_slowdown    HwSlowdown active, as above
gpu_clocks         SM clock at least 5% under its peers' with no reason flag to explain it
gpu_errors         ECC errors, PCIe replays or XID errors that grew during the steps (and not on
                   its peers)
cpu_contention     the training thread switched out involuntarily at least 3x as often as its
                   peers' (and 20/s or more), or at least 5 points more CPU steal on its host, or
                   it got at most 80% of its peers' CPU time
memory_pressure    major page faults at least 3x its peers' (and 5/s or more), or swap in use
                   that grew during the steps
data_loader        a finding in the data phase, or the culprit's data wait is at least half of
                   its excess: the input pipeline, not the device
=================  ==========================================================================

Job-wide findings (``regression``, ``slow_comm``, job-wide ``data_stall``) compare the median over
ranks after the onset with before: clocks that fell, throttle reasons that appeared, CPU steal.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from ..findings import Finding
from .matrix import StepMatrix, even_sample, nanmedian

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
        out += _host(pair, who, "its peers")
        out += _data(m, f, culprits, cols, who)
    elif f.kind in ("regression", "slow_comm", "data_stall") and cols.any() and (~cols).any():
        before = ~cols & (np.arange(m.n_steps) < np.argmax(cols))
        if before.sum() >= 5:
            pair = _Pair(m, None, None, cols, before)
            out += _device(pair, "after the change", "before the change")
            out += _host(pair, "after the change", "before the change")
    return out


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

    def __init__(self, m: StepMatrix, a_rows, b_rows, cols, before=None) -> None:
        self.m, self.a_rows, self.b_rows, self.cols, self.before = m, a_rows, b_rows, cols, before

    def values(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        g = self.m.extra("dev." + name)
        if g is None:
            return None
        if self.before is None:
            return g[self.a_rows][:, self.cols], g[self.b_rows][:, self.cols]
        return nanmedian(g[:, self.cols], axis=0), nanmedian(g[:, self.before], axis=0)

    def level(self, name: str) -> tuple[float, float] | None:
        v = self.values(name)
        if v is None:
            return None
        with _quiet():
            a, b = float(np.nanmedian(v[0])), float(np.nanmedian(v[1]))
        return (a, b) if np.isfinite(a) and np.isfinite(b) else None

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


def _host(p: _Pair, who: str, peers: str) -> list[tuple[float, dict[str, str]]]:
    out = []
    sw = p.level("process_involuntary_switches_per_second")
    steal = p.level("host_cpu_steal_ratio")
    cpu = p.level("process_cpu_ratio")
    why = []
    if sw and sw[0] >= 20 and sw[0] >= 3 * max(sw[1], 1.0):
        why.append(
            f"its training thread was switched out involuntarily {sw[0]:.0f}/s against {sw[1]:.0f}/s for {peers}"
        )
    if steal and steal[0] - steal[1] >= 0.05:
        why.append(f"its host's CPU steal is {steal[0]:.0%} against {steal[1]:.0%}")
    if cpu and cpu[1] > 0 and cpu[0] <= 0.8 * cpu[1]:
        why.append(
            f"{'it' if p.before is None else 'the median rank'} got {cpu[0]:.2f} cores against "
            f"{cpu[1]:.2f} {'for ' + peers if p.before is None else peers}"
        )
    if why:
        out.append((0.85 + 0.05 * len(why), {"kind": "cpu_contention", "evidence": f"{who}: " + "; ".join(why)}))
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


def _data(
    m: StepMatrix, f: Finding, culprits: np.ndarray, cols: np.ndarray, who: str
) -> list[tuple[float, dict[str, str]]]:
    if f.kind == "data_stall" or f.phase == "data":
        d = m.data
        with _quiet():
            a = float(np.nanmedian(d[culprits][:, cols]))
            b = float(np.nanmedian(d[~culprits][:, cols]))
        if np.isfinite(a) and np.isfinite(b):
            return [
                (
                    0.7,
                    {
                        "kind": "data_loader",
                        "evidence": (
                            f"{who} waits {a * 1e3:.1f} ms per step for its next batch against {b * 1e3:.1f} ms for its peers: "
                            "its input pipeline, not its device"
                        ),
                    },
                )
            ]
        return []
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
