"""telemetry.watch(loader) with spawned DataLoader workers: each a fresh interpreter that imports the
dataset, in which telemetry stays off and writes nothing. Forked workers: tests/unit/telemetry/hooks/."""

from tests.helpers.loader_datasets import workers_record_nothing


def test_worker_processes_record_nothing_and_start_nothing(run_dir, tmp_path):
    workers_record_nothing(run_dir, tmp_path, "spawn")
