"""Readers the training side hands to the device sampler after ``init``: things read off the hot path
at the sampler's interval that only exist once the training code builds them (a watched dataset's
worker fetch counters, :mod:`telemetry.hooks.dataset`).

A reader has ``read() -> dict[str, float]``, like the sampler's own sources. The sampler reads every
reader added here at each of its readings, after its own sources; a reader whose read fails is counted
and said once there, like a source. Readers are held weakly: a dataset that is dropped stops being read.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol


class Reader(Protocol):
    def read(self) -> dict[str, float]: ...


_lock = threading.Lock()  # add() runs on the training thread, current() on the sampler's
_readers: "weakref.WeakSet[Reader]" = weakref.WeakSet()


def add(reader: Reader) -> None:
    with _lock:
        _readers.add(reader)


def discard(reader: Reader) -> None:
    with _lock:
        _readers.discard(reader)


def current() -> list[Reader]:
    with _lock:
        return list(_readers)
