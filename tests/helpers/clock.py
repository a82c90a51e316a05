"""The stress mode's clocks (scripts/stress.sh): every clock Python code reads runs ``factor`` times as
fast as the real one, from the moment this is called (2.0: a second of real time reads as two).

What it changes: ``time.time``, ``time.monotonic``, ``time.perf_counter`` and their ``_ns`` forms, which
the recorder, the pipeline, the sinks, the detectors' callers and the tests read. What it leaves alone:
waits in C (``time.sleep``, ``threading.Event.wait``, socket timeouts) and other processes, so timed
waits and timeouts meet scaled clocks as they would meet a clock that jumps or drifts. A test that
checks a measurement against a real duration (a sleep of known length) cannot hold under it and says so
with ``@pytest.mark.real_clock`` (skipped in this mode).
"""

from __future__ import annotations

import time


def scale_clocks(factor: float) -> None:
    if factor <= 0:
        raise ValueError(f"TELEMETRY_TEST_CLOCK_SCALE={factor}; accepted: a number above 0, e.g. 0.5 or 2")
    for name in ("time", "monotonic", "perf_counter"):
        real = getattr(time, name)
        real_ns = getattr(time, name + "_ns")
        t0, t0_ns = real(), real_ns()

        def scaled(real=real, t0=t0) -> float:
            return t0 + (real() - t0) * factor

        def scaled_ns(real_ns=real_ns, t0_ns=t0_ns) -> int:
            return t0_ns + int((real_ns() - t0_ns) * factor)

        setattr(time, name, scaled)
        setattr(time, name + "_ns", scaled_ns)
