"""The demo job behind `telemetry demo`: a real gloo training run with injectable faults."""
