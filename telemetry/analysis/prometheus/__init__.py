"""A live job read from a Prometheus server's HTTP API, as the loader's :class:`~telemetry.analysis.load.RunInput`.

What our exporter (``telemetry/exporters/prometheus.py``) publishes per rank, scraped by Prometheus,
becomes a steps table, progress heartbeats and per-step records, so the detectors and the dashboard
show a live job as they show a run directory. Only the standard library speaks HTTP here (urllib).

A step here is a window of time. The range ``[now - minutes, now]`` is cut into ``n`` windows of
``W`` seconds that end at ``now``: window ``k`` (``k = 0 .. n-1``, ``n = max(1, floor(range / W))``)
is ``(now - (n-k) W, now - (n-1-k) W]``. One row per (rank, window) in which the rank completed
steps: ``step = k``, ``start_s`` = the window's start (epoch s), ``duration_s`` = the mean step
wall time in it (increase of ``train_step_duration_seconds_sum`` / increase of its ``_count``),
``<phase>_s`` = each phase's mean time per step (phase sum increase / step count increase; a phase
that did not run in the window took 0), ``data_s`` the data-loader wait likewise, ``comm_s`` =
increase of ``train_collective_blocked_seconds_total`` / step count increase, ``tokens`` and
``samples`` per step where the job counts them, ``comm_bytes`` per step, ``mfu`` (mean of the
gauge) and ``dev.<signal>`` (the latest device reading at the window's end). A window in which a
rank made no step has no row (never a false zero). One ``query_range`` per metric family (step =
``W``, ``increase(...[W])``) returns every rank at once.

``records`` (one per row, shaped like the run store's step records, per step as they are):
``rank``, ``step``, ``start_s``, ``duration_s``, ``comm_s``, ``device`` (the latest readings at the
window's end, named as in the run store: ``gpu_utilization_ratio``, ``process_cpu_seconds``, ...;
a rank's GPU readings from its own GPU, label ``gpu`` = its local rank, when it exports several)
and ``ops`` (``{op: [count, duration_s, blocked_s, bytes, bus_bytes]}`` per step, as ``OpStats``:
calls and bytes from the counters' increase, duration from the collective histogram's sum,
``blocked_s = duration_s``, bus bytes = bytes x the op's bus factor (busbw / algbw gauges), else
busbw x duration; NaN when not known). ``progress``: a heartbeat per rank in the run store's
format, from the rank's latest samples: ``time_s`` is when it was last scraped (a rank no longer
scraped goes silent; a finished job is not live), ``last_step`` / ``last_step_end_s`` from
``train_last_step`` / ``train_last_step_timestamp_seconds``, an open step (``last_step + 1``)
since ``time_s - train_step_in_progress_seconds`` when that is above 0, ``collective`` =
``"a collective"`` while ``train_blocked_in_collective`` is 1 (the metric names no op), no
``phase`` (not exported), ``finished`` False, ``device`` the latest readings.

``W`` follows the window rule (:mod:`.window`): about 300 windows at most, each holding at least 4
scrapes, unless ``window_s`` is given, and within Prometheus's and the loader's bounds.

The exporter does not say in which phase collectives ran, so phase times include the time blocked
in collectives inside them. The table therefore carries ``comm.<phase>_s`` columns of NaN (not
known): with them, the detectors take a rank's compute as ``duration_s - comm_s`` (as for a run
directory) instead of summing the phases, which here include waiting.

One module per concern: :mod:`.client` (the HTTP API, the queries run a few at a time),
:mod:`.queries` (the PromQL, metric names from :mod:`telemetry.metrics.names`), :mod:`.window`
(the window rule, the scrape interval, the windows of a load), :mod:`.reshape` (answers -> arrays
over the windows; gauges -> progress values and device readings), :mod:`.steps` (arrays -> the
steps table, the records, the heartbeats) and :mod:`.source` (:func:`open_prometheus`,
:func:`list_jobs`: the job, its ranks, one load put together).

>>> run = open_prometheus("http://localhost:9090", job="exp1", minutes=30)   # doctest: +SKIP
>>> run.kind, run.meta["window_s"], run.world_size                            # doctest: +SKIP
('prometheus', 15.0, 8)
"""

from .source import PROMETHEUS, list_jobs, open_prometheus

__all__ = ["PROMETHEUS", "list_jobs", "open_prometheus"]
