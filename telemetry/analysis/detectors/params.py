"""The detectors' own settings, one dataclass each (what users set is AnalysisOptions; these are the
detectors' tunables): imbalance, regression, utilization, checkpoints. Here, below every detector module
and the detectors' context, so that each imports them without importing another detector."""

from __future__ import annotations

from dataclasses import dataclass

from ...analysis_options import BUSY_WARN_BOUND, AnalysisOptions


@dataclass(frozen=True)
class ImbalanceParams:
    min_rel_excess: float = 0.05
    min_slowdown: float = 0.01
    min_phase_correlation: float = 0.5
    max_top_share: float = 0.5


@dataclass(frozen=True)
class RegressionParams:
    z_min: float = 6.0
    min_effect: float = 0.02  # a practical floor; z_min decides whether a change is real (bench: 20 clean demo runs)
    min_persist_steps: int = 10
    persist_fraction: float = 0.6
    min_segment: int = 8
    z_confirm: float = 3.0
    # windows of several steps each (a live job read from Prometheus): a rank test over a few dozen
    # window means cannot reach z_min (10 against 10 windows, perfectly apart, give z = 3.8), while
    # each mean is many steps' reading, far quieter than one step's time; this bar instead
    z_windows: float = 3.5


@dataclass(frozen=True)
class UtilizationParams:
    # busy share of the job's time under which a sustained stretch is a finding (info)
    bound: float = AnalysisOptions.busy_bound
    warn_bound: float = BUSY_WARN_BOUND  # ... under which it is a warning (critical under half of it)
    window: int = 51  # steps in the running window (at most half the shortest stretch)
    min_fraction: float = 0.25  # a stretch covers at least this share of the steps after warm-up ...
    min_steps: int = 20  # ... and at least this many steps
    # the running share must be this far under the bound (a job at the bound is not flagged by its noise)
    margin: float = 0.01
    min_drop: float = 0.05  # utilization_regression: the smallest drop reported, relative to the level before
    z_min: float = 6.0  # ... and how certain the change point must be (rank test, as regression's)
    alpha: float = 1e-3  # ... against a baseline run: Mann-Whitney p bound on blocks of 10 steps

    def __post_init__(self) -> None:
        for name in ("bound", "warn_bound"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise ValueError(
                    f"utilization {name}={v!r}; accepted: a fraction above 0 and at most 1 (0.8 = busy 80% of the step)"
                )
        if self.warn_bound > self.bound:
            raise ValueError(
                f"utilization warn_bound={self.warn_bound!r} is above bound={self.bound!r}; accepted: "
                "warn_bound <= bound (a share under warn_bound is a warning, under bound info)"
            )


@dataclass(frozen=True)
class CheckpointParams:
    slow_ratio: float = 0.5  # a rank's bandwidth under this share of the other ranks' median
    min_extra_s: float = 0.05  # ... and at least this much longer per checkpoint than at their bandwidth
    budget: float = 0.05  # the typical rank's time blocked in checkpoints over this share of the run's
    failure_rate_per_hour: float = AnalysisOptions.failure_rate_per_hour  # failures per hour, when the run saw none
