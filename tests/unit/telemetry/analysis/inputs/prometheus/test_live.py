"""telemetry.analysis.inputs.prometheus.live without a server: --last durations, what "collecting" says, and
the detectors' stretches counted in windows when a column stands for several steps."""

import numpy as np
import pytest

from telemetry.analysis.detectors.regression import RegressionParams, for_columns
from telemetry.analysis.inputs.prometheus.live import NEED_WINDOWS, collecting, parse_duration
from telemetry.analysis.report import collecting_line
from telemetry.demo.simulate import Scenario, simulate
from telemetry.steptable.matrix import MIN_WINDOWS, columns_for, from_table


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("500ms", 0.5)])
def test_durations_are_prometheus_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "m", "1.5h", "30 m", "0s", "-5m", "1h-30m"])
def test_a_bad_duration_names_the_flag_and_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"--last .*accepted: a"):
        parse_duration(text)


class _Run:
    def __init__(self, table, window_s=15.0):
        self.table, self.meta = table, {"window_s": window_s}


def test_collecting_counts_windows_with_steps_until_there_are_enough():
    table = simulate(Scenario(ranks=2, steps=5))
    assert collecting(_Run(table)) == {"have": 5, "need": NEED_WINDOWS, "window_s": 15.0}
    assert collecting(_Run(table.iloc[:0])) == {"have": 0, "need": NEED_WINDOWS, "window_s": 15.0}
    assert collecting(_Run(simulate(Scenario(ranks=2, steps=NEED_WINDOWS)))) is None
    line = collecting_line({"have": 5, "need": 8, "window_s": 15.0})
    assert line.startswith("collecting: 5 of 8 windows of 15 s with steps (about 45 s more)")


def test_stretches_are_counted_in_windows_of_several_steps():
    table = simulate(Scenario(ranks=2, steps=40))
    steps_only = from_table(table)
    idx = np.arange(40)
    assert steps_only.weight is None and columns_for(steps_only, idx, 10) == 10
    assert for_columns(steps_only, idx, RegressionParams()) == RegressionParams()
    table["row_steps"] = 50.0  # each row a 15 s window of 50 steps
    windows = from_table(table)
    assert (windows.steps_per_column() == 50).all()
    assert columns_for(windows, idx, 10) == MIN_WINDOWS  # 10 steps fit one window: at least 5 windows
    assert columns_for(windows, idx, 400) == 8
    p = for_columns(windows, idx, RegressionParams())
    assert (p.min_segment, p.min_persist_steps, p.z_min) == (MIN_WINDOWS, MIN_WINDOWS, p.z_windows)


def test_goodput_from_windows_keeps_together_what_a_window_cannot_split():
    from telemetry.analysis.detectors import WAITS, analyze

    table = simulate(Scenario(ranks=4, steps=60))
    whole = analyze(table).summary["goodput"]
    assert {"communication", "other"} <= set(whole) and WAITS not in whole
    table["row_steps"] = 20.0  # the same rows as windows of 20 steps each
    g = analyze(table, step_resolution=False, gaps=True).summary["goodput"]
    assert set(g) <= {"compute", "data_wait", "between_steps", "lost", WAITS}, g
    assert g["compute"] == pytest.approx(whole["compute"], abs=0.02)
    assert sum(g.values()) == pytest.approx(sum(whole.values()), abs=0.01)
