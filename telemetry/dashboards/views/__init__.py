"""The dashboard's views, one function each: Streamlit elements over the tables of data.py, comm.py,
devices.py, io.py, kernels.py and history.py and the charts of charts.py. ``app.py`` picks the run
and the view and calls one (:data:`VIEWS`).

Every view takes the run (``RunView``) and the sidebar's choice (``Choice``: step range, ranks). The
views are grouped by what they show: run.py (Overview, Ranks, Findings), resources.py (Collectives,
Input and devices, I/O), traces.py (Kernels), comparisons.py (Compare, History); common.py holds
what they share.
"""

from __future__ import annotations

import time
from typing import Callable

from .common import Choice
from .comparisons import HISTORY_PAIR, compare, history_view
from .resources import collectives, input_and_devices, io_view
from .run import findings, overview, ranks
from .traces import kernels_view

__all__ = ["HISTORY_PAIR", "VIEWS", "Choice", "clock"]


VIEWS: dict[str, tuple[str, Callable[..., None]]] = {
    "overview": ("Overview", overview),
    "ranks": ("Ranks", ranks),
    "findings": ("Findings", findings),
    "collectives": ("Collectives", collectives),
    "kernels": ("Kernels", kernels_view),
    "devices": ("Input and devices", input_and_devices),
    "io": ("I/O", io_view),
    "compare": ("Compare", compare),
    "history": ("History", history_view),
}


def clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"
