"""The fault suite's table: each test adds the row it proved, `make faults` writes it into the manual.

A row says what was done to the job, what happened to training (finished or not, the step-time ratio
against a healthy run of the same job measured in this session) and what was lost (nothing, or
exactly what). The table is printed at the end of the pytest run and written to build/faults.md;
`tests/faults/table.py --write` makes the manual's page of it, docs/faults-table.md.
"""

from __future__ import annotations

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE_PATH = os.path.join(ROOT, "build", "faults.json")
AREAS = ("baseline", "backends", "storage", "processes", "user code", "dashboard", "bad input", "security")


class FaultTable:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, area: str, fault: str, training: str, lost: str) -> None:
        """One row. `training`: what happened to the job ("finished, step time 1.02x healthy");
        `lost`: "nothing" or exactly what was lost."""
        assert area in AREAS, f"area {area!r}; accepted: {', '.join(AREAS)}"
        self.rows.append({"area": area, "fault": fault, "training": training, "lost": lost})


_TABLE = FaultTable()


@pytest.fixture
def fault_table() -> FaultTable:
    return _TABLE


@pytest.fixture(scope="session")
def healthy_job(tmp_path_factory):
    """The gloo job with nothing wrong, run once per session: the step-time baseline of the ratios."""
    from tests.faults.gloo_job import GlooJob

    with GlooJob(tmp_path_factory.mktemp("healthy")) as job:
        result = job.wait()
    assert result.ok, result.describe()
    return result


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _TABLE.rows:
        return
    from tests.faults.table import markdown

    os.makedirs(os.path.dirname(TABLE_PATH), exist_ok=True)
    with open(TABLE_PATH, "w") as f:
        json.dump(_TABLE.rows, f, indent=1)
    terminalreporter.section("faults and bad input: what happened to training, what was lost")
    terminalreporter.write(markdown(_TABLE.rows) + "\n")
    terminalreporter.write(
        f"(written to {os.path.relpath(TABLE_PATH, ROOT)}; "
        "`python tests/faults/table.py --write` makes docs/faults-table.md of it)\n"
    )
