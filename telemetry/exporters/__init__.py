"""Sinks that send telemetry to other systems (Prometheus, OpenTelemetry, Perfetto)."""
