"""What the package exports, named once: Prometheus metrics (:mod:`telemetry.metrics.names`) and the
steps table's column families (:mod:`telemetry.metrics.steps`)."""
