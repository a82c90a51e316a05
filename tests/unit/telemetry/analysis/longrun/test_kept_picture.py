"""A long run's picture kept by ``telemetry compact`` (telemetry/analysis/longrun/kept_picture.py): per step, each band
of ranks' highest of what a heatmap draws and the step time's percentiles over every rank, the same
numbers as the rows give; read for some steps only while it is the run's, and never when it is not."""

import contextlib
import io
import os

import numpy as np
import pytest

from telemetry.analysis.longrun import coarse
from telemetry.analysis.longrun import kept_picture as picture
from telemetry.analysis.longrun.kept_picture import read_kept as read_picture
from telemetry.cli import main
from telemetry.demo.simrun import write_simulated_run
from telemetry.demo.simulate import Fault, Scenario
from telemetry.steptable.matrix import from_table
from telemetry.steptable.table import columns_to_table
from telemetry.store.segreads import read_step_columns


@pytest.fixture
def long_run(tmp_path, monkeypatch):
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10_000)  # 30 x 3,000 = 90,000 rows: a long run here
    monkeypatch.setattr(picture, "BANDS", 8)  # 30 ranks: 8 bands of 4 (the last of 2), as 10,000 in 256
    out = str(tmp_path / "long")
    fault = Fault("straggler", ranks=(9,), phase="forward", factor=1.5, start=1000)
    write_simulated_run(Scenario(name="long", ranks=30, steps=3000, seed=3, faults=(fault,)), out)
    return out


def compact(path: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compact", path]) == 0
    return out.getvalue()


def test_the_picture_holds_each_band_s_highest_and_the_percentiles_over_every_rank(long_run, monkeypatch):
    monkeypatch.setattr(picture, "WINDOW_VALUES", 30 * 700)  # windows of 700 steps, 3 ranks' rows read at a time
    monkeypatch.setattr(picture, "READ_ROWS", 2_000)
    said = compact(long_run)
    assert "kept its picture (24,000 rows: 8 bands of up to 4 ranks, every step)" in said, said
    got = read_picture(long_run, (1390, 1409))  # across a window's edge (1400)
    m = from_table(columns_to_table(read_step_columns(long_run, [], (1390, 1409))))
    assert got.matrix.steps.tolist() == list(range(1390, 1410)) == m.steps.tolist()
    assert got.matrix.ranks.tolist() == [0, 4, 8, 12, 16, 20, 24, 28] and got.last.tolist()[-2:] == [27, 29]
    starts = np.arange(0, 30, 4)
    for name, want in (
        ("compute", m.compute),
        ("data", m.data),
        ("forward", m.phase_compute["forward"]),
    ):
        have = got.matrix.compute if name == "compute" else got.matrix.phase_compute[name]
        np.testing.assert_allclose(have, np.maximum.reduceat(want, starts, axis=0), rtol=1e-6, err_msg=name)
    for c in got.matrix.columns:
        np.testing.assert_allclose(
            got.matrix.extra(c), np.maximum.reduceat(m.extra(c), starts, axis=0), rtol=1e-6, err_msg=c
        )
    t = m.duration + m.data
    np.testing.assert_allclose(got.p50, np.percentile(t, 50, axis=0), rtol=1e-6)
    np.testing.assert_allclose(got.p95, np.percentile(t, 95, axis=0), rtol=1e-6)
    # the straggler's band is the highest in its phase
    assert got.matrix.ranks[np.argmax(got.matrix.phase_compute["forward"].mean(axis=1))] == 8
    assert read_picture(long_run, (5000, 6000)) is None  # no such steps


def test_a_picture_is_read_only_while_it_is_the_run_s(long_run):
    compact(long_run)
    assert read_picture(long_run, (0, 10)) is not None
    assert "its analysis already kept" in compact(long_run)  # unchanged: neither is written again
    progress = os.path.join(long_run, "ranks", "rank-00003.progress.json")
    with open(progress, "a", encoding="utf-8") as f:  # a heartbeat since: the run is not the one pictured
        f.write(" ")
    assert read_picture(long_run, (0, 10)) is None
    assert "kept its picture" in compact(long_run) and read_picture(long_run, (0, 10)) is not None
    where = os.path.join(long_run, "summary", picture.FILE)
    with open(where, "r+b") as f:  # cut: no footer
        f.truncate(os.path.getsize(where) // 2)
    assert read_picture(long_run, (0, 10)) is None
    said = compact(long_run)  # the analysis is current, the picture is not: the picture alone is kept again
    assert "its analysis already kept" in said and "kept its picture" in said, said
    assert read_picture(long_run, (0, 10)) is not None


def test_no_picture_for_a_run_of_few_ranks(long_run, monkeypatch):
    monkeypatch.setattr(picture, "BANDS", 30)
    said = compact(long_run)
    assert "no picture kept: 30 ranks (a zoom reads 30 ranks or fewer row by row)" in said, said
    assert not os.path.exists(os.path.join(long_run, "summary", picture.FILE))
