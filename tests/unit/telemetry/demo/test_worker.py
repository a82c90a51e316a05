"""The demo's ranks (telemetry/demo/worker.py): an injected regression is real compute, a straggler a
held phase."""

from telemetry.demo.faults import parse_inject


def test_demo_regression_is_real_compute_and_a_straggler_a_held_phase():
    # a regression must cost CPU (on fewer cores than ranks a sleep would only hand the CPU to the
    # other ranks and the job would not slow down); a straggler holds its rank inside the phase
    import time

    from telemetry.demo.faults import FaultPlan
    from telemetry.demo.worker import _compute_more

    plan = FaultPlan(
        [
            parse_inject("regression:factor=2,start=10,phase=backward"),
            parse_inject("straggler:rank=1,phase=forward,factor=1.5"),
        ],
        rank=1,
    )
    assert plan.work_factor(9, "backward") == 1.0 and plan.work_factor(10, "backward") == 2.0
    assert plan.phase_factor(10, "backward") == 1.0 and plan.work_factor(10, "forward") == 1.0
    assert plan.phase_factor(0, "forward") == 1.5
    c0 = time.thread_time()
    while time.thread_time() - c0 < 0.05:
        pass
    done = time.thread_time() - c0
    _compute_more(c0, 2.0)
    assert time.thread_time() - c0 >= 2 * done
