"""Offline exports: a run, as the loader opened it, written to a file another tool reads.

An export is a plug-in (entry point group ``training_telemetry.exports``, see
:mod:`telemetry.plugins`) chosen by the output file's suffix; the built-in one is the Perfetto /
Chrome trace (``telemetry.exporters.perfetto``). The steps table itself (``.csv``, ``.parquet``) is not a
plug-in: it is the interchange format (:func:`telemetry.steptable.table.write_table`).

>>> class Lines(Export):
...     suffixes = (".txt",)
...     def write(self, run, path, first_step=None, last_step=None):
...         open(path, "w").write(f"{len(run.table)} rows")
...         return f"wrote {path}"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import plugins

if TYPE_CHECKING:
    from .inputs.load import RunInput


class ExportError(ValueError):
    """The run cannot be written in this format; the message says why."""


class Export:
    """Writes one run to ``path``; returns one line telling the user what was written."""

    suffixes: tuple[str, ...] = ()
    needs_records = False  # True: needs a run directory's step records (spans), not only the table

    def write(self, run: "RunInput", path: str, first_step: int | None = None, last_step: int | None = None) -> str:
        raise NotImplementedError


def export_for(path: str) -> Export | None:
    """The installed export whose suffix ``path`` ends with, or None."""
    low = path.lower()
    for name in plugins.names(plugins.EXPORTS):
        try:
            cls = plugins.load(plugins.EXPORTS, name)
        except ImportError:
            continue
        if any(low.endswith(s) for s in cls.suffixes):
            return cls()
    return None


def export_suffixes() -> list[str]:
    """Every suffix an installed export writes."""
    out: list[str] = []
    for name in plugins.names(plugins.EXPORTS):
        try:
            out.extend(plugins.load(plugins.EXPORTS, name).suffixes)
        except ImportError:
            continue
    return out
