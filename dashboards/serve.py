"""The dashboard's server process: ``python -m dashboards.serve [streamlit run flags]``, started by
``telemetry dashboard``.

Streamlit runs the app's script only when a browser connects, so a plain ``streamlit run`` makes
the first visitor wait for every import (pandas, pyarrow, Altair, the detectors: about 2 s here)
on top of the run's load and analysis. This process imports them and runs the loader and the
detectors once on a tiny simulated table before it starts serving; the app, run in this same
process, then finds them ready.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "app.py")


def warm_up() -> float:
    """Import what the app uses and exercise the load and analysis path once; returns seconds."""
    t0 = time.perf_counter()
    import altair  # noqa: F401
    import streamlit  # noqa: F401

    from dashboards import charts, comm, data, devices, views  # noqa: F401
    from telemetry.demo.simulate import Scenario, simulate

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "warm.parquet")
        simulate(Scenario(ranks=4, steps=40)).to_parquet(path, index=False)
        view = data.load_view(path)  # pyarrow's reader, validation, every detector
        data.step_percentiles(view.matrix)
        charts.heatmap(data.heatmap(view.matrix, "compute"), "compute (ms per step)", {}).to_dict()
    return time.perf_counter() - t0


def main(argv: list[str]) -> None:
    warm_up()
    from streamlit.web import cli as stcli

    sys.argv = ["streamlit", "run", APP, *argv]
    stcli.main()


if __name__ == "__main__":
    main(sys.argv[1:])
