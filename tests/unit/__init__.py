"""Unit tests, in the test's own process, one folder per package folder (tests/unit/telemetry/...)."""
