"""Events to step records (telemetry/pipeline/assembler.py): a NaN or infinite value given to
telemetry.log is kept as data, counted and said once."""

import logging
import math

import telemetry
from telemetry.analysis.inputs.load import open_input


def test_a_diverged_loss_is_kept_as_data_counted_and_said_once(run_dir, caplog):
    telemetry.init(run_dir=run_dir, job="nan", sinks=["store"])
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        for loss in (1.0, float("nan"), float("inf"), float("nan")):
            with telemetry.step():
                telemetry.log(loss=loss, tokens=float("nan"))  # a NaN count must not break the step
    stats = telemetry.shutdown()
    # the run store keeps NaN and infinities as they are (Parquet has them): a diverged loss is data
    loss = open_input(run_dir).table["log.loss"].tolist()
    assert loss[0] == 1.0 and math.isnan(loss[1]) and loss[2] == math.inf and math.isnan(loss[3])
    assert stats["nonfinite_values"] == 7 and stats["records"] == 4  # loss x3, tokens x4
    said = sorted(r.getMessage() for r in caplog.records if "not a finite number" in r.getMessage())
    assert len(said) == 2  # once per name
    assert "step 0: telemetry.log(tokens=nan)" in said[0] and "step 1: telemetry.log(loss=nan)" in said[1]
