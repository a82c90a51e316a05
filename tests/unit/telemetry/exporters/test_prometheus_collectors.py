"""The Prometheus sink's collectors read at scrape time (telemetry/exporters/prometheus_collectors.py):
the capture counters by outcome, only when captures run."""

from telemetry.exporters.prometheus_collectors import DropCollector
from telemetry.metrics.names import BASE_LABELS


def test_captures_are_counted_by_outcome_only_when_captures_run():
    labels = dict.fromkeys(BASE_LABELS, "x")
    off = list(DropCollector(labels, lambda: {"events_dropped": 0}, []).collect())
    assert [f.name for f in off] == ["train_telemetry_dropped"]  # no capture counters: not "none taken"
    stats = {"captures_planned": 1, "captures_taken": 1, "captures_missed": 0, "captures_skipped": 2}
    stats.update(captures_failed=0, captures_over_budget=3)
    fams = {f.name: f for f in DropCollector(labels, lambda: stats, []).collect()}
    got = {s.labels["outcome"]: s.value for s in fams["train_captures"].samples}
    assert got == {"planned": 1, "taken": 1, "missed": 0, "skipped": 2, "failed": 0, "over_budget": 3}
