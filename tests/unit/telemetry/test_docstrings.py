"""The examples in the package's docstrings run as written (each module's doctests)."""

import doctest
import importlib
import pkgutil

import pytest

import telemetry

# Started as programs, not imported: the Streamlit page and the demo's rank (it joins a process group).
NOT_IMPORTED = ("telemetry.dashboards.script", "telemetry.demo.worker", "telemetry.__main__")


def modules() -> list[str]:
    out = []
    for m in pkgutil.walk_packages(telemetry.__path__, "telemetry."):
        if not m.name.startswith(NOT_IMPORTED):
            out.append(m.name)
    return sorted(out)


def test_the_walk_finds_the_package():
    names = modules()
    assert len(names) > 80 and "telemetry.metrics.names" in names and "telemetry.analysis.longrun.windows" in names


@pytest.mark.parametrize("name", [n for n in modules() if not n.startswith("telemetry.integrations.")])
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} docstring examples failed"
