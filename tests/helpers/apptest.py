"""The Streamlit dashboard driven in-process by Streamlit's AppTest: run it on a path, switch its
view, and check that nothing raised (the dashboard's tests and the fault suite's share these)."""

from streamlit.testing.v1 import AppTest

from telemetry.dashboards.serve import APP

VIEWS = ["Overview", "Ranks", "Findings", "Collectives", "Kernels", "Input and devices", "I/O", "Compare", "History"]
# views.VIEWS' keys
KEYS = ["overview", "ranks", "findings", "collectives", "kernels", "devices", "io", "compare", "history"]


def run_app(monkeypatch, path):
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PATH", path)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def show(at, view):
    """Switch the app to ``view`` (a key of views.VIEWS) and check it drew without an exception."""
    [radio] = [r for r in at.sidebar.radio if r.label == "view"]
    radio.set_value(view).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.header[0].value == dict(zip(KEYS, VIEWS))[view]
    return at
