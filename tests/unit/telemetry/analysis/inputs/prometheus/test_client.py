"""Reading a live job from Prometheus (telemetry/analysis/inputs/prometheus/client.py) without a server: an
unreachable one is named, quickly. Against a real server: tests/integration/test_prometheus_source.py."""

from __future__ import annotations

import time

import pytest

from telemetry.analysis.inputs.prometheus import list_jobs, open_prometheus
from telemetry.steptable.table import TableError
from tests.helpers.servers import free_port


def test_unreachable_server_is_named():
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(TableError, match=f"cannot reach Prometheus at {url}: .*refused"):
        open_prometheus(url, "x")
    with pytest.raises(TableError, match=f"cannot reach Prometheus at {url}"):
        list_jobs(url)
    assert time.monotonic() - t0 < 5
