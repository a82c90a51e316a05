"""Every setting of an analysis, with its default, written once: :class:`AnalysisOptions`.

The CLI's flags (``telemetry analyze``, ``telemetry demo``), their help and the manual's reference are
made from its fields; :class:`telemetry.config.Config` takes its analysis defaults from here, and online
detection, the dashboard and ``telemetry history`` build one from a Config, the CLI's arguments or by
hand. It sits low in the package (below ``config``) so that both can read it; ``telemetry.analysis``
re-exports it.

>>> AnalysisOptions(busy_bound=0.5).warn_bound
0.5
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from argparse import Namespace

T = TypeVar("T")

BUSY_WARN_BOUND = 0.6  # the warning bound's default, when the info bound is not below it


def _opt(default: T, flag: str, kind: str, help: str, metavar: str | None = None) -> T:
    """A field with what its CLI flag needs: the flag, the kind of value it parses, its help."""
    return field(default=default, metadata={"flag": flag, "kind": kind, "help": help, "metavar": metavar})


def parse_steps(text: str) -> tuple[int, int]:
    """``--steps A:B`` of every command (inclusive; either side may be empty) -> (first, last).

    The one parser: analyze, export and the others say the same for the same text.

    >>> parse_steps("100:200"), parse_steps(":50"), parse_steps("7:7")
    ((100, 200), (0, 50), (7, 7))
    """
    a, sep, b = text.partition(":")
    if not sep:
        raise ValueError(
            f"--steps {text!r}; accepted: A:B, A: or :B (step numbers, inclusive; one step: {text}:{text})"
        )
    try:
        first = int(a) if a.strip() else 0
        last = int(b) if b.strip() else 2**62
    except ValueError:
        raise ValueError(f"--steps {text!r}: not step numbers; accepted: A:B, A: or :B") from None
    if first < 0 or last < 0:
        raise ValueError(f"--steps {text!r}: step numbers are 0 or more; accepted: 0 <= A <= B")
    if last < first:
        raise ValueError(f"--steps {text!r}: the end is before the start; accepted: 0 <= A <= B")
    return first, last


@dataclass(frozen=True)
class AnalysisOptions:
    """What an analysis is asked for: which steps, the detectors' user-facing bounds, a baseline run.

    A field's ``metadata`` names its CLI flag, the kind of value (``seconds``, ``fraction``, ``rate``,
    ``rows``, ``steps``, ``count``, ``path``, ``switch``) and its help: the parser adds one flag per field.
    """

    steps: tuple[int, int] | None = _opt(
        None, "--steps", "steps", "analyze steps A to B only (inclusive; either may be empty)", "A:B"
    )
    last: int | None = _opt(
        None,
        "--last",
        "count",
        "analyze the last N steps only; with --prometheus a duration (30m, 2h; default: the whole job, at most 24h)",
        "N",
    )
    hang_after_s: float | None = _opt(
        None,
        "--hang-after",
        "seconds",
        "seconds without a finished step that count as a hang (default: 30x the median step, at least 10)",
        "SECONDS",
    )
    busy_bound: float = _opt(
        0.8,
        "--busy-bound",
        "fraction",
        "low_utilization: the busy share of the job's time (compute, device-timed or wall) under which a "
        "sustained stretch is a finding, at info (default 0.8)",
        "FRACTION",
    )
    busy_warn_bound: float | None = _opt(
        None,
        "--busy-warn-bound",
        "fraction",
        "low_utilization: the busy share under which it is a warning, critical under half of it "
        f"(default {BUSY_WARN_BOUND}, or --busy-bound when lower; at most --busy-bound)",
        "FRACTION",
    )
    failure_rate_per_hour: float = _opt(
        0.05,
        "--failure-rate-per-hour",
        "rate",
        "checkpoint advice: the job's failures per hour, used when the run has seen none (restarts, lost "
        "ranks) (default 0.05: one in 20 hours)",
        "RATE",
    )
    base: str | None = _opt(
        None,
        "--base",
        "path",
        "a baseline run (run directory or steps table) of the same job: a busy share, MFU, GPU utilization "
        "or SM activity lower here than there is a utilization_regression",
        "BASE",
    )
    window_rows: int = _opt(
        12_000_000,
        "--window-rows",
        "rows",
        "a run directory larger than this many rows (ranks x steps) is analyzed in windows of steps and the "
        "findings merged (default 12,000,000)",
        "ROWS",
    )
    raw: bool = _opt(
        False,
        "--raw",
        "switch",
        "read every step row of a long run (in windows) instead of its blocks: a run directory of more than "
        "4,000,000 rows analyzed whole is otherwise read from the medians of its 64-step blocks, and findings "
        "with ranks measured again on raw rows",
    )

    def __post_init__(self) -> None:
        def bad(name: str, accepted: str) -> ValueError:
            return ValueError(f"{name}={getattr(self, name)!r}; accepted: {accepted}")

        if not 0 < self.busy_bound <= 1:
            raise bad("busy_bound", "a fraction above 0 and at most 1 (0.8 = 80%)")
        if self.busy_warn_bound is not None:
            if not 0 < self.busy_warn_bound <= 1:
                raise bad("busy_warn_bound", "a fraction above 0 and at most 1 (0.6 = 60%)")
            if self.busy_warn_bound > self.busy_bound:
                raise ValueError(
                    f"--busy-warn-bound {self.busy_warn_bound} is above --busy-bound {self.busy_bound}; accepted: "
                    f"a warning bound at most the info bound (default {BUSY_WARN_BOUND} and 0.8)"
                )
        if self.hang_after_s is not None and not self.hang_after_s > 0:
            raise bad("hang_after_s", "seconds above 0")
        if not 0 < self.failure_rate_per_hour <= 1000:
            raise bad("failure_rate_per_hour", "a rate above 0 and at most 1000 per hour")
        if self.last is not None and self.last < 1:
            raise ValueError(
                f"--last {self.last!r}; accepted: a number of steps, 1 or more (a duration goes with --prometheus)"
            )
        if not 1000 <= self.window_rows <= 10**10:
            raise bad("window_rows", "1000 to 10,000,000,000 rows")
        if self.steps is not None and not 0 <= self.steps[0] <= self.steps[1]:
            raise bad("steps", "(first, last) step numbers with 0 <= first <= last")

    @property
    def warn_bound(self) -> float:
        """The busy share under which low utilization is a warning: as given, else 0.6 or the info bound
        when that is lower."""
        return min(BUSY_WARN_BOUND, self.busy_bound) if self.busy_warn_bound is None else self.busy_warn_bound

    @property
    def defaults(self) -> bool:
        """Whether the detectors' settings are the defaults (a kept analysis stands for the run then)."""
        return (
            self.hang_after_s is None
            and self.busy_bound == AnalysisOptions.busy_bound
            and self.warn_bound == BUSY_WARN_BOUND
            and self.failure_rate_per_hour == AnalysisOptions.failure_rate_per_hour
            and self.base is None
        )

    def replace(self, **changes: Any) -> AnalysisOptions:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_config(cls, cfg: object, **more: Any) -> AnalysisOptions:
        """The analysis settings a :class:`telemetry.config.Config` holds (same names), and ``more``."""
        given = {f.name: getattr(cfg, f.name) for f in fields(cls) if hasattr(cfg, f.name)}
        return cls(**{**given, **more})

    @classmethod
    def from_args(cls, ns: Namespace, names: tuple[str, ...] | None = None, **more: Any) -> AnalysisOptions:
        """The options of a parsed command line (``argparse.Namespace``): each field (of ``names``, None:
        all) whose flag the command has, its default where the flag was not given; ``--steps`` parsed,
        ``--last`` as steps (a duration with ``--prometheus`` is the source's, not a field). ValueError
        with a sentence."""
        given: dict[str, Any] = {}
        for f in fields(cls):
            if names is not None and f.name not in names:
                continue
            v = getattr(ns, f.name, None)
            if v is None or v is False:
                continue
            if f.name == "steps" and isinstance(v, str):
                v = parse_steps(v)
            if f.name == "last":
                if getattr(ns, "prometheus", None) is not None:
                    continue
                v = _steps_count(v)
            given[f.name] = v
        return cls(**{**given, **more})


def _steps_count(text: Any) -> int:  # --last as the command line parsed it
    """--last N for a path: a whole number of steps, 1 or more."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--last {text!r}; accepted: a number of steps, 1 or more (a duration goes with --prometheus)")
    return n


# the options each command takes as flags (its --steps may mean something else: demo's is a count)
ANALYZE = tuple(f.name for f in fields(AnalysisOptions))
DEMO = ("hang_after_s", "busy_bound", "busy_warn_bound")
DASHBOARD = ("hang_after_s", "busy_bound", "busy_warn_bound", "failure_rate_per_hour")


def flags(names: tuple[str, ...] = ANALYZE) -> list[dataclasses.Field[Any]]:
    """The fields of ``names``, in the order their flags are listed."""
    return [f for f in fields(AnalysisOptions) if f.name in names]
