"""What the package exports, named once: Prometheus metrics (:mod:`telemetry.metrics.names`)."""
