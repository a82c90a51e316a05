"""The dashboard's server process, started by ``telemetry dashboard`` as
``python -I -c "from telemetry.dashboards.serve import main; ..." [streamlit run flags]``.

Isolated mode (``-I``): neither the current directory nor PYTHONPATH is on ``sys.path``, so a folder
holding its own ``telemetry/`` or ``streamlit/`` never runs its code as the user who opens the
dashboard; the script lives alone in ``script/``, since Streamlit puts its folder first on ``sys.path``.
Streamlit runs the script only when a browser connects, so this process imports pandas, pyarrow,
Altair and the detectors, warms them on a tiny simulated table, and reads the run it was given (at
most ``READY_WAIT_S``) before it serves: the first visitor waits for none of it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "script", "app.py")
# the server waits this long at most for the run it was given to be read before it serves (read_ahead)
READY_WAIT_S = 20.0
# Streamlit's developer chrome (the Deploy button, the developer menu) is not for a user of the page.
CHROME_OFF = ("--client.toolbarMode", "viewer")


def command(flags: list[str]) -> list[str]:
    """The server process's command line: this interpreter, isolated, then Streamlit's ``flags``."""
    return [
        sys.executable,
        "-I",
        "-c",
        "import sys; from telemetry.dashboards.serve import main; main(sys.argv[1:])",
        *CHROME_OFF,
        *flags,
    ]


def warm_up() -> float:
    """Import what the app uses and exercise the load and analysis path once; returns seconds."""
    t0 = time.perf_counter()
    import altair  # noqa: F401 - imported to warm up the app before it serves
    import streamlit  # noqa: F401 - imported to warm up the app before it serves

    from telemetry.dashboards import charts, comm, data, devices, source, views  # noqa: F401 - imported to warm up the app before it serves
    from telemetry.demo.simulate import Scenario, simulate

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "warm.parquet")
        simulate(Scenario(ranks=4, steps=40)).to_parquet(path, index=False)
        view = source.load_view(path)  # pyarrow's reader, validation, every detector
        data.step_percentiles(view.matrix)
        charts.heatmap(data.heatmap(view.matrix, "compute"), "compute (ms per step)", {}).to_dict()
    return time.perf_counter() - t0


def read_ahead(wait_s: float = READY_WAIT_S) -> list[str]:
    """Read the run ``telemetry dashboard`` was given, and its base run, each in a thread of its own
    (source.load_ahead), waiting for them ``wait_s`` seconds at most: the server answers its health check
    (and ``telemetry dashboard`` prints its URL) once the run is read, so the first visitor's view is
    drawn from it at once; a run that takes longer is still being read when the server starts serving,
    and the first visitor waits for what is left of that read, not all of it. Returns the paths read."""
    from concurrent.futures import wait

    from telemetry.dashboards import source

    paths = [p for p in (os.environ.get(f"TELEMETRY_DASHBOARD_{k}", "") for k in ("PATH", "BASE")) if p]
    wait([source.load_ahead(p) for p in dict.fromkeys(paths)], timeout=wait_s)
    return paths


def main(argv: list[str]) -> None:
    from telemetry.children import die_with_parent

    die_with_parent()  # started by `telemetry dashboard`: it ends with that command, however it ends
    warm_up()
    read_ahead()
    from streamlit.web import cli as stcli

    sys.argv = ["streamlit", "run", APP, *argv]
    stcli.main()


if __name__ == "__main__":  # python -m telemetry.dashboards.serve (not how telemetry dashboard starts it)
    main(sys.argv[1:])
