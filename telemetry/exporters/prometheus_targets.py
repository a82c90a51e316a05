"""Prometheus service discovery (file_sd), the sink's targets: each rank writes
``RUN_DIR/prometheus/rank-NNNNN.json`` (this rank's target); rank 0 merges them into
``RUN_DIR/prometheus_targets.json`` (all ranks of the run) and into ``<prometheus_sd_dir>/<job>.json``,
one directory shared by all runs so that one ``file_sd_configs`` glob (``.../prometheus_targets/*.json``)
finds every run; by default it is ``prometheus_targets/`` beside the run directory
(``runs/prometheus_targets/`` for ``runs/<job>``), ``off`` writes none. Rank 0 removes its file there
at shutdown (the endpoints are gone), unless a newer run of the same job has replaced it.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import socket
from typing import TYPE_CHECKING

from telemetry.store.layout import write_json_atomic

if TYPE_CHECKING:
    from telemetry.config import Config
    from telemetry.rank import RankContext

log = logging.getLogger("telemetry")
SD_DIR_DEFAULT = "prometheus_targets"  # beside the run directory, shared by the runs there


def target_address(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Targets:
    """This rank's file_sd entry, written once its /metrics is served; on rank 0 the run's targets
    merged until every rank's entry is there, and the job's file in the shared directory."""

    def __init__(self, config: Config, ctx: RankContext, address: str, labels: dict[str, str]) -> None:
        self.ctx = ctx
        self.address = address
        self.labels = labels
        self._run_dir = config.run_dir
        self._world = ctx.world_size
        self.done = False
        self._sd_failed = False
        self._shared_sd = _shared_sd_path(config) if ctx.rank == 0 else None
        self._shared_written: list | None = None
        self._shared_failed = False

    def _sd_dir(self) -> str:
        return os.path.join(self._run_dir, "prometheus")

    def write_entry(self) -> None:
        entry = [{"targets": [self.address], "labels": {**self.labels, **self.ctx.placement_labels()}}]
        try:
            os.makedirs(self._sd_dir(), exist_ok=True)
            write_json_atomic(os.path.join(self._sd_dir(), f"rank-{self.ctx.rank:05d}.json"), entry)
        except OSError as exc:
            self._sd_failed = True
            log.warning("telemetry: cannot write Prometheus targets under %s: %s", self._run_dir, exc)

    def merge(self, shared: bool = True) -> None:
        if self._sd_failed:
            return
        entries = []
        for path in sorted(glob.glob(os.path.join(self._sd_dir(), "rank-*.json"))):
            try:
                with open(path, encoding="utf-8") as f:
                    entries.extend(json.load(f))
            except (OSError, ValueError):
                continue
        try:
            write_json_atomic(os.path.join(self._run_dir, "prometheus_targets.json"), entries)
        except OSError:
            return
        if shared:
            self._write_shared_targets(entries)
        self.done = len(entries) >= self._world

    def _write_shared_targets(self, entries: list) -> None:
        if self._shared_sd is None or self._shared_failed or entries == self._shared_written:
            return
        try:
            os.makedirs(os.path.dirname(self._shared_sd), exist_ok=True)
            write_json_atomic(self._shared_sd, entries)
            self._shared_written = entries
        except OSError as exc:
            self._shared_failed = True
            log.warning(
                "telemetry: cannot write Prometheus targets to %s: %s (the run's own "
                "%s/prometheus_targets.json is still written)",
                self._shared_sd,
                exc,
                self._run_dir,
            )

    def remove_shared(self) -> None:
        """At shutdown: this run's endpoints are gone, so its targets leave the shared directory,
        unless a newer run of the same job has written its own there since."""
        if self._shared_sd is None or self._shared_written is None:
            return
        try:
            with open(self._shared_sd, encoding="utf-8") as f:
                if json.load(f) != self._shared_written:
                    return
            os.remove(self._shared_sd)
        except (OSError, ValueError):
            pass


def _shared_sd_path(config: Config) -> str | None:
    """``<prometheus_sd_dir>/<job>.json``; the directory defaults to ``prometheus_targets/`` beside
    the run directory; ``off``: none."""
    sd_dir = getattr(config, "prometheus_sd_dir", "") or ""
    if sd_dir == "off":
        return None
    if not sd_dir:
        sd_dir = os.path.join(os.path.dirname(os.path.abspath(config.run_dir)), SD_DIR_DEFAULT)
    return os.path.join(sd_dir, f"{config.job}.json")
