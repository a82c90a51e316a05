"""Pushing a rank's registry to a Pushgateway, for jobs too short to be scraped.

A worker thread pushes every ``push_interval_s`` and once more at close, each push bounded by a
timeout, so a dead gateway costs only this thread. Each rank pushes under its own grouping key
(``job``, ``rank``), so ranks do not overwrite each other.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import push_to_gateway

from telemetry.logonce import LogOnce

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from telemetry.config import Config


class PushWorker:
    def __init__(self, config: Config, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        self.url = config.pushgateway_url
        self.job = config.job
        self.interval = config.push_interval_s
        self.registry = registry
        self.grouping = {"rank": labels["rank"]}
        self.pushes = 0
        self.failures = 0
        self._once = LogOnce()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry-pushgateway", daemon=True)
        self._thread.start()

    def _push(self, timeout_s: float) -> None:
        try:
            push_to_gateway(
                self.url, job=self.job, registry=self.registry, grouping_key=self.grouping, timeout=timeout_s
            )
            self.pushes += 1
        except Exception as exc:  # noqa: BLE001 - a dead gateway must not matter to training
            self.failures += 1
            self._once("push", "telemetry: push to %s failed: %s (further failures counted)", self.url, exc)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._push(min(5.0, self.interval))

    def close(self, timeout_s: float) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        self._thread.join(max(0.0, min(1.0, deadline - time.monotonic())))
        final = threading.Thread(target=self._push, args=(max(0.05, deadline - time.monotonic()),), daemon=True)
        final.start()
        final.join(max(0.0, deadline - time.monotonic()))

    def stats(self) -> dict[str, Any]:
        return {"pushes": self.pushes, "push_failures": self.failures}
