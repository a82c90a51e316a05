"""The window rule (telemetry/analysis/inputs/prometheus/window.py) without a server: the window's length
from the range and the scrape interval, raised to the bounds with a warning, and the windows of a
load ending at now. Against a real server: tests/integration/test_prometheus_source.py."""

from __future__ import annotations

import numpy as np
import pytest

from telemetry.analysis.inputs.prometheus.window import MAX_CELLS, Grid, window
from telemetry.steptable.table import TableError


def test_the_window_holds_four_scrapes_and_at_most_300_windows():
    said: list[str] = []
    assert window(1800.0, None, None, 8, said) == 15.0  # the floor
    assert window(1800.0, None, 10.0, 8, said) == 40.0  # 4 scrapes
    assert window(86400.0, None, 15.0, 8, said) == 288.0  # 300 windows
    assert window(1800.0, None, 15.004, 8, said) == 60.0  # a few ms of measured interval add no second
    assert said == []


def test_a_window_too_small_is_raised_to_the_bounds_and_said():
    said: list[str] = []
    assert window(1800.0, 1.0, 15.0, 4096, said) == float(np.ceil(1800.0 * 4096 / MAX_CELLS))
    assert "fewer than 2 scrapes" in said[0] and "raised to 30 s" in said[1]
    with pytest.raises(TableError, match="window_s=0"):
        window(1800.0, 0, None, 8, [])


def test_the_windows_end_at_now():
    g = Grid.ending(now=1_000_000.0004, range_s=60.0, w=15.0)
    assert (g.w_ms, g.n, g.end_ms) == (15_000, 4, 1_000_000_000)
    assert g.first_ms == g.end_ms - 3 * 15_000
    assert g.start_s(np.int64(0)) == (g.first_ms - 15_000) / 1000
    assert g.index(np.array([g.first_ms / 1000, g.end_ms / 1000])).tolist() == [0, 3]
