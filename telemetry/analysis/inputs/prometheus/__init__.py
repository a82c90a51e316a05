"""A live job read from a Prometheus server's HTTP API, as the loader's :class:`~telemetry.analysis.inputs.load.RunInput`.

What our exporter (``telemetry/exporters/prometheus.py``) publishes per rank, scraped by Prometheus,
becomes a steps table, progress heartbeats and per-step records, so the detectors and the dashboard
show a live job as they show a run directory. Only the standard library speaks HTTP here (urllib).

A column here is a window of time. The range ``[now - minutes, now]`` is cut into ``n`` windows of
``W`` seconds that end at ``now``: window ``k`` (``k = 0 .. n-1``, ``n = max(1, floor(range / W))``)
is ``(now - (n-k) W, now - (n-1-k) W]``. One row per (rank, window) in which the rank completed
steps: ``step`` = the job's last completed step at the window's end (the largest ``train_last_step``
over ranks in the window; strictly increasing over windows with steps, never a window number),
``row_steps`` = how many steps the rank made in it (increase of the step counter), ``start_s`` =
when the rank's last step in the window ended (``train_last_step_timestamp_seconds``, clipped into
the window) less ``row_steps`` x (duration + data wait): its steps packed back to back, so the time
between one window's steps and the next's is the job's time between steps, as in a run directory.
``duration_s`` = the mean step wall time in it (increase of ``train_step_duration_seconds_sum`` /
increase of its ``_count``), ``<phase>_s`` = each phase's mean time per step (phase sum increase /
step count increase; a phase that did not run in the window took 0), ``data_s`` the data-loader wait
likewise, ``comm_s`` = increase of ``train_collective_blocked_seconds_total`` / step count increase,
``comm.<phase>_s`` = the time blocked in collectives inside each phase per step (increase of
``train_phase_blocked_seconds_total{phase}``; NaN, not known, from an exporter older than that
counter), ``tokens`` and ``samples`` per step where the job counts them, ``comm_bytes`` per step,
``mfu`` (mean of the gauge) and ``dev.<signal>`` (the latest device reading at the window's end). A
window in which a rank made no step has no row (never a false zero). One ``query_range`` per metric
family (step = ``W``, ``increase(...[W])``) returns every rank at once.

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

With ``comm.<phase>_s`` known, a phase's compute is its time less the time blocked inside it, so a
straggler read from Prometheus is named in the phase the run store names. The detectors weigh each
window by its ``row_steps`` (goodput, busy share, gaps) and count stretches in windows
(:func:`~telemetry.steptable.matrix.columns_for`); :mod:`.live` analyzes a job as
``telemetry analyze --prometheus`` and the dashboard do, and says when there are too few windows yet.
What a window's means cannot carry: each step's spread over ranks. The collectives' own time (the
last rank's blocked time, step by step), the waits for late ranks and step-time spikes are therefore
one goodput part from windows, ``communication_and_waits`` (bench/RESULTS.md, "Prometheus and the run
store"), and a straggler's what-if reads higher than the run store's.

One module per concern: :mod:`.client` (the HTTP API, the queries run a few at a time),
:mod:`.queries` (the PromQL, metric names from :mod:`telemetry.metrics.names`), :mod:`.window`
(the window rule, the scrape interval, the windows of a load), :mod:`.reshape` (answers -> arrays
over the windows; gauges -> progress values and device readings), :mod:`.steps` (arrays -> the
steps table, the records, the heartbeats) and :mod:`.source` (:func:`open_prometheus`,
:func:`list_jobs`: the job, its ranks, one load put together) and :mod:`.live` (the whole job, or
``--last``, analyzed, with what is still being collected).

>>> run = open_prometheus("http://localhost:9090", job="exp1", minutes=30)   # doctest: +SKIP
>>> run.kind, run.meta["window_s"], run.world_size                            # doctest: +SKIP
('prometheus', 15.0, 8)
"""

from .source import PROMETHEUS, list_jobs, open_prometheus

__all__ = ["PROMETHEUS", "list_jobs", "open_prometheus"]
