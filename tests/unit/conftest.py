import sys

import pytest


@pytest.fixture
def fake_nvml(monkeypatch):
    """pynvml replaced by tests/helpers/fake_pynvml.py: an H100 whose readings the tests know."""
    from tests.helpers import fake_pynvml

    fake_pynvml.state.calls.clear()
    fake_pynvml.state.handles.clear()
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    return fake_pynvml
