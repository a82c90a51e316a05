"""A run's step columns and records read back (telemetry/store/segreads.py): the records of some
steps and ranks are those of every record."""

from telemetry.store.segreads import read_records
from tests.helpers.store_runs import make_run


def test_records_of_some_steps_and_ranks_are_those_of_every_record(tmp_path):
    # the dashboard's zoom into a long run reads only the records of the steps and ranks chosen
    run = make_run(tmp_path, rank=0)
    make_run(tmp_path, rank=1)
    every = read_records(run, [])
    some = read_records(run, [], steps=(12, 52), ranks=[1])
    assert some == [r for r in every if r["rank"] == 1 and 12 <= r["step"] <= 52]
    assert {r["step"] for r in some} == set(range(12, 53)) and all(r["spans"] for r in some)
    assert read_records(run, [], steps=(60, 70)) == []
