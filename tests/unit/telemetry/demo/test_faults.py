"""--inject specs (telemetry/demo/faults.py): parsed, refused with what is accepted, checked against
the job."""

import pytest

from telemetry.demo.faults import FaultPlan, InjectError, check_against_job, parse_inject


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "stragler:rank=1",
            "unknown kind 'stragler'; accepted kinds: straggler, data_stall, regression, slow_comm, hang",
        ),
        (
            "straggler:rank=1,phase=forward,factor=1.5,speed=2",
            "unknown key 'speed' for straggler; accepted: rank, phase, factor",
        ),
        ("straggler:rank=1,factor=1.5", "straggler needs phase"),
        ("straggler:rank=1,phase=loss,factor=1.5", "phase='loss'; accepted: forward, backward, optimizer"),
        ("straggler:rank=x,phase=forward,factor=1.5", "rank='x' is not an integer"),
        ("slow_comm:factor=0.5", "factor=0.5; accepted: a number above 1"),
        ("data_stall:rank=0,delay_ms=-3", "delay_ms=-3.0; accepted: above 0"),
    ],
)
def test_bad_inject_specs(spec, message):
    with pytest.raises(InjectError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_inject(spec)


def test_inject_checked_against_the_job():
    with pytest.raises(InjectError, match=r"rank=7 but the job has --ranks 4 \(accepted: 0..3\)"):
        check_against_job([parse_inject("hang:rank=7,step=3")], ranks=4, steps=100)
    with pytest.raises(InjectError, match=r"start=500 but the job runs --steps 100"):
        check_against_job([parse_inject("regression:factor=2,start=500")], ranks=4, steps=100)


def test_host_work_between_steps_from_a_step_on():
    f = parse_inject("host_gap:delay_ms=10,start=100")
    assert (f.kind, f.ranks, f.delay_s, f.start) == ("host_gap", (), 0.01, 100)
    plan = FaultPlan([f], rank=3)  # every rank
    assert plan.host_gap_s(99) == 0.0 and plan.host_gap_s(100) == plan.host_gap_s(150) == 0.01
    with pytest.raises(InjectError, match="host_gap needs delay_ms"):
        parse_inject("host_gap:start=100")
    check_against_job([f], ranks=4, steps=200)
