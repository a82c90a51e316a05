"""The steps table format (telemetry/steptable/table.py): phase columns, required columns named, bad
rows reported and skipped, never invented."""

import numpy as np
import pandas as pd
import pytest

from telemetry.steptable.table import TableError, phase_columns, validate


def test_phase_columns_follow_the_contract():
    t = validate(
        pd.DataFrame(
            {
                "rank": [0],
                "step": [0],
                "start_s": [0.0],
                "duration_s": [1.0],
                "data_s": [0.1],
                "forward_s": [0.2],
                "comm_s": [0.3],
                "comm.forward_s": [0.1],
                "log.loss_s": [1.0],
                "tokens": [5],
            }
        )
    )
    assert phase_columns(t) == ["data_s", "forward_s"]


def test_missing_required_columns_are_named():
    with pytest.raises(TableError, match=r"missing column\(s\) start_s, duration_s; a steps table needs rank, step"):
        validate(pd.DataFrame({"rank": [0], "step": [1]}))


def test_bad_rows_are_reported_and_skipped_never_invented(caplog):
    t = validate(
        pd.DataFrame(
            {
                "rank": [0, 0, 0, 1],
                "step": [0, 1, 2, 0],
                "start_s": [0.0, 1.0, 2.0, 0.0],
                "duration_s": [1.0, np.nan, -1.0, 1.0],
                "forward_s": [0.5, 0.5, 0.5, np.nan],
            }
        )
    )
    assert t[["rank", "step"]].values.tolist() == [[0, 0], [1, 0]]
    assert np.isnan(t.loc[t["rank"] == 1, "forward_s"]).all()  # a missing phase stays missing
    assert "2 row(s) with missing, non-finite or negative" in caplog.text
