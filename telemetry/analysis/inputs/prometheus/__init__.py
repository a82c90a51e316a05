"""A live job read from a Prometheus server's HTTP API, as the loader's :class:`~telemetry.analysis.inputs.load.RunInput`.

What our exporter publishes becomes a steps table whose columns are windows of time (one row per rank
and window with steps, per-step means; ``row_steps`` its steps; the rule: :mod:`.window`; each column's
source: :func:`.steps.build`), records and heartbeats; what windows cannot carry: docs/detectors.md, "A
live job from Prometheus". Modules: :mod:`.client` (HTTP, urllib only), :mod:`.queries` (PromQL),
:mod:`.reshape` (answers -> arrays), :mod:`.steps`, :mod:`.source` (:func:`open_prometheus`) and :mod:`.live`.

>>> run = open_prometheus("http://localhost:9090", job="exp1", minutes=30)   # doctest: +SKIP
>>> run.kind, run.meta["window_s"], run.world_size                            # doctest: +SKIP
('prometheus', 15.0, 8)
"""

from .source import PROMETHEUS, list_jobs, open_prometheus

__all__ = ["PROMETHEUS", "list_jobs", "open_prometheus"]
