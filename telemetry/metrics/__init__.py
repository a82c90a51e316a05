"""What the package exports to Prometheus, named once: :mod:`telemetry.metrics.names`."""
