"""Bounding label cardinality: a label takes at most N distinct values per rank, then drops."""

from __future__ import annotations

from telemetry.logonce import LogOnce


class LabelGate:
    """Admits the first ``limit`` distinct values of a label; counts what it refuses."""

    def __init__(self, label: str, limit: int) -> None:
        self.label = label
        self.limit = limit
        self.values: set[str] = set()
        self.refused = 0
        self._once = LogOnce()

    def admit(self, value: str) -> bool:
        if value in self.values:
            return True
        if len(self.values) < self.limit:
            self.values.add(value)
            return True
        self.refused += 1
        self._once(
            "refused",
            "telemetry: more than %d distinct values of label %r (refused %r); further "
            "values are dropped and counted in train_telemetry_dropped_total"
            '{sink="prometheus_labels"} (raise max_label_values to allow more)',
            self.limit,
            self.label,
            value,
        )
        return False
