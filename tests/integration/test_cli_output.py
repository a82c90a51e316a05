"""`telemetry analyze` as a process: a report that cannot be written is one line and exit 5."""

from tests.helpers.runs import record


def test_a_report_that_cannot_be_written_is_one_line_and_exit_5_never_a_traceback(tmp_path):
    """stdout on a full disk (/dev/full): the report is lost, the user is told once, the exit code says it."""
    import os
    import subprocess
    import sys

    run_dir = str(tmp_path / "run")
    record(run_dir, 30)
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "telemetry", "analyze", run_dir],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    assert proc.returncode == 5, proc.stderr
    assert "telemetry: cannot write the output: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
