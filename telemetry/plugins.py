"""Plug-ins found by name: sinks and exports, declared as entry points (ours in pyproject.toml too).

Group ``training_telemetry.sinks``: ``name = "module:Factory"``, where ``Factory(config,
rank_context, run_info)`` returns a :class:`~telemetry.pipeline.sinks.Sink` (or None to stay off).
Group ``training_telemetry.exports``: ``name = "module:Export"``, an offline writer of a run
(:class:`~telemetry.analysis.exports.Export`) chosen by the output file's suffix. The built-in
sinks (``store``, ``prometheus``, ``otlp``) and the Perfetto export are entries like any third
party's, so a new backend is one module and one entry point, and the config accepts exactly the
names installed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

SINKS = "training_telemetry.sinks"
EXPORTS = "training_telemetry.exports"


@functools.lru_cache(maxsize=None)
def _entries(group: str) -> "dict[str, EntryPoint]":
    from importlib.metadata import entry_points  # read once, at init: importing telemetry stays cheap

    out: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        out.setdefault(ep.name, ep)  # the first installed distribution wins a name
    return out


def names(group: str) -> tuple[str, ...]:
    """The names installed in ``group``, sorted."""
    return tuple(sorted(_entries(group)))


def load(group: str, name: str) -> Any:
    """The object entry ``name`` of ``group`` names. KeyError if none; ImportError if it fails to import."""
    return _entries(group)[name].load()


def missing_hint(group: str) -> str:
    """What to say when a group is empty: the package's own entries are missing, so it is not installed."""
    if _entries(group):
        return ""
    return (
        " (no plug-ins are registered at all: install the package, e.g. pip install -e ., so that its "
        "entry points exist)"
    )
