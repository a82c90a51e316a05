"""The detectors run on a simulated job (telemetry.demo.simulate), and what they found, as the
detector tests compare it with the faults put in."""

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import simulate


def found(sc, severity=("warning", "critical")):
    """The fault findings. Not low_utilization: a simulated job with heavy jitter or many ranks really
    computes under 80% of its time (it waits for the slowest rank);
    tests/unit/telemetry/analysis/detectors/test_utilization.py."""
    return [f for f in analyze(simulate(sc)).findings if f.severity in severity and f.kind != "low_utilization"]


def kinds(findings):
    return sorted((f.kind, tuple(f.ranks), f.phase) for f in findings)
