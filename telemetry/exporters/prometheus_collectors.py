"""The Prometheus sink's collectors read at scrape time: online detection's straggler scores, costs
and findings by kind (rank 0's :class:`FindingsCollector`), and the session's dropped-record and
capture counters (:class:`DropCollector`).
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from telemetry.metrics import names as N
from telemetry.metrics.names import BASE_LABELS

from .labels import LabelGate


class FindingsCollector(Collector):
    """On rank 0, from online detection: a score per scored rank and the findings so far by kind.
    Both carry rank 0's own labels; the rank a score is about is ``scored_rank``."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.base = [labels[k] for k in BASE_LABELS]
        self.scores: dict[int, float] = {}
        self.costs: dict[int, float] = {}
        self.counts: dict[str, int] = {}

    def collect(self):
        if self.scores:
            m = N.STRAGGLER_SCORE
            fam = GaugeMetricFamily(m.name, m.help, labels=list(m.all_labels))
            for scored, v in sorted(self.scores.items()):
                fam.add_metric(self.base + [str(scored)], v)
            yield fam
        if self.costs:
            m = N.STRAGGLER_COST
            fam = GaugeMetricFamily(m.name, m.help, labels=list(m.all_labels))
            for scored, v in sorted(self.costs.items()):
                fam.add_metric(self.base + [str(scored)], v)
            yield fam
        fam = GaugeMetricFamily(N.FINDINGS.name, N.FINDINGS.help, labels=list(N.FINDINGS.all_labels))
        for kind, n in sorted(self.counts.items()):
            fam.add_metric(self.base + [kind], float(n))
        yield fam


class DropCollector(Collector):
    """train_telemetry_dropped_total{sink}, and train_captures_total{outcome} with captures on: read from
    the session's counters at scrape time."""

    def __init__(
        self,
        labels: dict[str, str],
        stats: Callable[[], dict],
        gates: Iterable[LabelGate],
        push_failures: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._labels = labels
        self._stats = stats
        self._gates = list(gates)
        self._push_failures = push_failures

    def collect(self):
        fam = CounterMetricFamily(N.DROPPED.name, N.DROPPED.help, labels=list(N.DROPPED.all_labels))
        base = [self._labels[k] for k in BASE_LABELS]
        try:
            s = self._stats()
        except Exception:  # noqa: BLE001 - a scrape must not fail because of telemetry
            s = {}
        fam.add_metric(base + ["buffer"], float(s.get("events_dropped", 0)))
        for name, st in (s.get("sinks") or {}).items():
            fam.add_metric(base + [name], float(st.get("dropped", 0)))
        fam.add_metric(base + ["prometheus_labels"], float(sum(g.refused for g in self._gates)))
        pushes = self._push_failures()
        if pushes is not None:  # a Pushgateway is configured: its failed pushes (snapshots it never got)
            fam.add_metric(base + ["pushgateway"], float(pushes))
        yield fam
        if "captures_taken" in s:  # captures on, online detection started: every outcome, 0 included
            cap = CounterMetricFamily(N.CAPTURES.name, N.CAPTURES.help, labels=list(N.CAPTURES.all_labels))
            for outcome in ("planned", "taken", "missed", "skipped", "failed"):
                cap.add_metric(base + [outcome], float(s.get(f"captures_{outcome}", 0)))
            over = s.get("captures_over_budget", 0)  # traces too large (every rank) + findings past the budget (rank 0)
            cap.add_metric(base + ["over_budget"], float(over))
            yield cap
