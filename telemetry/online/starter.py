"""Starting online detection: the job's rendezvous store, found when the default process group
exists, and :class:`OnlineStarter`, the listener that waits for it.

``telemetry.init`` may run before ``init_process_group``: then :class:`OnlineStarter` looks for the
process group on every pipeline tick and starts detection when it appears.
"""

from __future__ import annotations

import logging
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..logonce import LogOnce
from ..pipeline.records import OnlineResult, StepRecord, TraceRoots
from .detector import OnlineDetector

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store  # torch.distributed.Store

log = logging.getLogger("telemetry")

_store_once = LogOnce(level=logging.INFO)


def default_store() -> Store | None:
    """The rendezvous store of the initialized default process group, or None. Cheap when there
    is none (it is asked on every pipeline tick until there is): torch is not imported here."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None  # nobody imported torch.distributed: no process group can exist
    try:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        store = dist.distributed_c10d._get_default_store()
        prefixed = dist.PrefixStore("telemetry/", store)
        prefixed.set_timeout(timedelta(seconds=5))
        return prefixed
    except Exception as exc:  # noqa: BLE001 - a private API: never fatal
        _store_once("store", "telemetry: online detection off (no rendezvous store: %s)", exc)
        return None


class OnlineStarter:
    """A pipeline listener that starts online detection once the default process group exists.

    ``telemetry.init`` usually runs after ``init_process_group``, and detection starts at once; when
    it ran first, each pipeline tick checks (one cheap call) until the group appears. Starting on
    rank 0 imports the analyzer there (a pause, once). If the job ends with no group, that is
    said once at shutdown.
    """

    def __init__(
        self, make: Callable[[Store], OnlineDetector], find_store: Callable[[], Store | None] | None = None
    ) -> None:
        self._make = make
        self._find_store = find_store or default_store
        self.detector: OnlineDetector | None = None
        self._failed = False
        self.try_start()

    def try_start(self) -> bool:
        if self.detector is None and not self._failed:
            store = self._find_store()
            if store is not None:
                try:
                    self.detector = self._make(store)
                except Exception as exc:  # noqa: BLE001 - online detection is optional; training is not
                    self._failed = True
                    log.warning("telemetry: online detection off (%s)", exc)
        return self.detector is not None

    def on_records(self, records: Sequence[StepRecord]) -> None:
        if self.try_start() and self.detector is not None:  # (started: a detector)
            self.detector.on_records(records)

    def poll(self) -> list[OnlineResult | TraceRoots]:
        return self.detector.poll() if self.detector is not None else []

    def finish(self, budget_s: float) -> list[OnlineResult | TraceRoots]:
        return self.detector.finish(budget_s) if self.detector is not None else []

    def stats(self) -> dict[str, Any]:
        return self.detector.stats() if self.detector is not None else {"online_started": False}

    def stop(self) -> None:
        if self.detector is not None:
            self.detector.stop()
        elif not self._failed:
            log.info(
                "telemetry: online detection never started: no torch.distributed process group "
                "appeared (init_process_group) while telemetry ran"
            )
