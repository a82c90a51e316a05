"""The History view for real: `telemetry dashboard RUN --history DIR` on a simulated series of 12 runs
(backward 3% slower from run 8), opened at ?view=history in headless Chromium."""

import os

import pytest

pytest.importorskip("streamlit")

from telemetry.demo.simrun import write_series
from telemetry.demo.simulate import Fault, Scenario
from tests.helpers import browser


def test_a_real_browser_shows_the_history_and_its_change_at_run_8(tmp_path):
    if browser.chromium() is None:
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)")
    series = str(tmp_path / "series")
    sc = Scenario(
        name="hist", ranks=8, steps=300, seed=7, faults=(Fault("regression", phase="backward", factor=1.03, start=0),)
    )
    write_series(sc, series, 12, from_run=8)
    with browser.dashboard(os.path.join(series, "run-12"), "--history", series) as url:
        dom = browser.dump_dom_until(
            f"{url}/?view=history",
            "from run 8 (run-08)",
            'data-testid="stVegaLiteChart"',
            "Compare run-08 against run-07",
        )
    assert 'data-testid="stApp"' in dom
    assert "Changes (" in dom and "from run 8 (run-08): backward_s +" in dom
    assert 'data-testid="stVegaLiteChart"' in dom
    assert "Compare run-08 against run-07" in dom
    assert 'data-testid="stException"' not in dom
