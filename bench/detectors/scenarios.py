"""The labelled simulated scenarios the detectors are scored on (evaluate.py) and online phase
attribution is checked on (online_phase.py): each a Scenario of telemetry.demo.simulate and the
findings it must give (Expect). A warning not expected is a false positive, unless the scenario holds
that fault (evaluate.implied)."""

from __future__ import annotations

from dataclasses import dataclass

from telemetry.demo.simulate import Fault, Scenario


@dataclass(frozen=True)
class Expect:
    kind: str
    ranks: tuple[int, ...] | None = None  # None: job-wide (empty ranks) or not checked
    phase: str | None = None
    start: int = 0
    cause: str | None = (
        None  # the first of the finding's causes must be this kind (low_utilization: its largest idle part)
    )
    info: bool = False  # expected at info (it costs under 1% today): matched at any severity
    end: int | None = None  # the fault's last step, for faults that end before the run


def S(name, expect=(), **kw):
    return Scenario(name=name, **kw), tuple(expect)


SCENARIOS = [
    S("healthy, 8 ranks"),
    S("healthy, heavy jitter (30%) and 2% static differences", jitter=0.3, static=0.02),
    S(
        "healthy, GC spikes and checkpoints every 25 steps",
        spikes=((3, 50, 0.2), (6, 120, 0.3), (1, 222, 0.5)),
        checkpoint_every=25,
        static=0.02,
    ),
    S("healthy, 256 ranks, 15% jitter", ranks=256, steps=200, jitter=0.15, static=0.02),
    S("healthy, 1024 ranks", ranks=1024, steps=120, jitter=0.1, static=0.02),
    S(
        "straggler 1.5x forward",
        [Expect("straggler", (5,), "forward")],
        faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),),
    ),
    S(
        "straggler 1.2x backward (12% of compute)",
        [Expect("straggler", (2,), "backward")],
        faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.2),),
    ),
    S(
        "straggler from step 150",
        [Expect("straggler", (2,), "backward", 150)],
        faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.4, start=150),),
    ),
    S(
        "intermittent straggler (20% of steps, 2x forward)",
        [Expect("straggler", (6,), "forward")],
        steps=400,
        faults=(Fault("straggler", ranks=(6,), phase="forward", factor=2.0, probability=0.2),),
    ),
    S(
        "two stragglers, 16 ranks",
        [Expect("straggler", (3,), "forward"), Expect("straggler", (11,), "optimizer")],
        ranks=16,
        faults=(
            Fault("straggler", ranks=(3,), phase="forward", factor=1.6),
            Fault("straggler", ranks=(11,), phase="optimizer", factor=3.0),
        ),
    ),
    S(
        "straggler among 256 ranks",
        [Expect("straggler", (200,), "backward")],
        ranks=256,
        steps=200,
        jitter=0.1,
        faults=(Fault("straggler", ranks=(200,), phase="backward", factor=1.6),),
    ),
    S(
        "straggler with GC spikes and checkpoints",
        [Expect("straggler", (4,), "forward")],
        spikes=((3, 50, 0.2), (6, 120, 0.3)),
        checkpoint_every=25,
        faults=(Fault("straggler", ranks=(4,), phase="forward", factor=1.5),),
    ),
    S(
        "straggler in a 4-stage pipeline layout",
        [Expect("straggler", (5,), "forward")],
        stages=4,
        faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),),
    ),
    S(
        "input-bound rank: its batch 10 ms late from the start",
        [Expect("input_bound", (4,), "data")],
        faults=(Fault("data_stall", ranks=(4,), delay_s=0.01),),
    ),
    S(
        "data stall from step 100",
        [Expect("data_stall", (1,), "data", 100)],
        faults=(Fault("data_stall", ranks=(1,), delay_s=0.01, start=100),),
    ),
    S(
        "slow communication x3 from step 150",
        [Expect("slow_comm", None, None, 150)],
        faults=(Fault("slow_comm", factor=3.0, start=150),),
    ),
    S(
        # a staircase: the two rises merge into one change, held by its lower step too
        "slow communication in two steps: x2 from step 150, x2 again from step 300",
        [Expect("slow_comm", None, None, 150)],
        steps=450,
        faults=(Fault("slow_comm", factor=2.0, start=150), Fault("slow_comm", factor=2.0, start=300)),
    ),
    S(
        "regression: backward 1.3x from step 120",
        [Expect("regression", None, "backward", 120)],
        faults=(Fault("regression", phase="backward", factor=1.3, start=120),),
    ),
    S(
        "small regression under 30% jitter: backward 1.15x from step 150",
        [Expect("regression", None, "backward", 150)],
        seed=1,
        jitter=0.3,
        faults=(Fault("regression", phase="backward", factor=1.15, start=150),),
    ),
    S(
        "4% regression: forward 1.16x from step 300 of 800",
        [Expect("regression", None, "forward", 300)],
        steps=800,
        faults=(Fault("regression", phase="forward", factor=1.16, start=300),),
    ),
    S(
        "2.5% regression: backward 1.05x from step 300 of 800",
        [Expect("regression", None, "backward", 300)],
        steps=800,
        faults=(Fault("regression", phase="backward", factor=1.05, start=300),),
    ),
    S("healthy, 800 steps with checkpoints every 50", steps=800, checkpoint_every=50, seed=5),
    S(
        "temporary regression: forward 1.6x, steps 100-180",
        [Expect("regression", None, "forward", 100)],
        faults=(Fault("regression", phase="forward", factor=1.6, start=100, end=180),),
    ),
    S("moving imbalance, 16 ranks", [Expect("imbalance")], ranks=16, faults=(Fault("imbalance"),)),
    S(
        "stage imbalance: last of 4 stages 1.5x",
        [Expect("stage_imbalance", (6, 7))],
        stages=4,
        faults=(Fault("stage_imbalance", stage=3, factor=1.5),),
    ),
    S(
        "memory growth on one rank (4 MiB/step)",
        [Expect("memory_growth", (2,))],
        ranks=4,
        faults=(Fault("memory_growth", ranks=(2,)),),
    ),
    # stragglers in groups and in the small (each under 1% alone)
    S(
        "co-stragglers: ranks 3 and 11 1.2x forward, 16 ranks",
        [Expect("straggler", (3,), "forward"), Expect("straggler", (11,), "forward")],
        ranks=16,
        steps=400,
        faults=(Fault("straggler", ranks=(3, 11), phase="forward", factor=1.2),),
    ),
    S(
        "slow node: ranks 4-7 1.1x backward, 4 ranks per node",
        [Expect("straggler", (4, 5, 6, 7), "backward")],
        ranks=16,
        steps=400,
        ranks_per_node=4,
        faults=(Fault("straggler", ranks=(4, 5, 6, 7), phase="backward", factor=1.1),),
    ),
    S(
        "hidden straggler: 1.12x backward among 256 noisy ranks (info)",
        [Expect("straggler", (100,), "backward", info=True)],
        ranks=256,
        steps=300,
        jitter=0.1,
        faults=(Fault("straggler", ranks=(100,), phase="backward", factor=1.12),),
    ),
    # the cause behind a straggler: its device and host signals against its peers'
    *[
        S(
            f"straggler 1.3x forward, cause {c}",
            [Expect("straggler", (3,), "forward", cause=c)],
            faults=(Fault("straggler", ranks=(3,), phase="forward", factor=1.3, cause=c),),
        )
        for c in (
            "gpu_thermal",
            "gpu_power_cap",
            "gpu_hw_slowdown",
            "gpu_clocks",
            "gpu_errors",
            "cpu_contention",
            "cpu_throttled",
            "memory_pressure",
        )
    ],
    S(
        "straggler 1.5x backward whose data wait grows with it (1.6x, a contended core): no data stall",
        [Expect("straggler", (3,), "backward", cause="cpu_contention")],
        faults=(
            Fault("straggler", ranks=(3,), phase="backward", factor=1.5, cause="cpu_contention"),
            Fault("data_stall", ranks=(3,), delay_s=0.0003),
        ),
    ),
    S(
        "input-bound rank 10 ms, cause data_loader",
        [Expect("input_bound", (6,), "data", cause="data_loader")],
        faults=(Fault("data_stall", ranks=(6,), delay_s=0.01),),
    ),
    S(
        "healthy, one rank throttled (HwSlowdown) but not slower: a signal alone is no finding",
        faults=(Fault("straggler", ranks=(3,), phase="forward", factor=1.0, cause="gpu_hw_slowdown"),),
    ),
    S(
        "small straggler: 1.05x forward among 64 ranks (info)",
        [Expect("straggler", (17,), "forward", info=True)],
        ranks=64,
        faults=(Fault("straggler", ranks=(17,), phase="forward", factor=1.05),),
    ),
    # onsets and ends
    S(
        "intermittent straggler from step 200 (30% of steps, 2x forward)",
        [Expect("straggler", (6,), "forward", 200)],
        steps=500,
        faults=(Fault("straggler", ranks=(6,), phase="forward", factor=2.0, probability=0.3, start=200),),
    ),
    S(
        "intermittent straggler, steps 150-350",
        [Expect("straggler", (6,), "forward", 150, end=350)],
        steps=500,
        faults=(Fault("straggler", ranks=(6,), phase="forward", factor=2.0, probability=0.3, start=150, end=350),),
    ),
    # Healthy jobs whose ranks compute 60-80% of the time (most real data-parallel jobs): no warning.
    S("healthy, 77% busy (exposed communication)", comm_s=0.008),
    S("healthy, 71% busy", comm_s=0.012),
    S("healthy, 65% busy", comm_s=0.016),
    S("healthy, 62% busy", comm_s=0.019),
    S("healthy, 72% busy, host work between steps, GPU signals", gap_s=0.006, gpu_signals=True),
    S("healthy, 63% busy, GPU signals, 20% jitter", comm_s=0.012, gpu_signals=True, jitter=0.2),
    # Utilization drops within a run: host work between steps from step S, the devices idle for it
    S(
        "utilization drop: 10 ms of host work between steps from step 150, GPU signals",
        [Expect("utilization_regression", None, None, 150)],
        gpu_signals=True,
        faults=(Fault("host_gap", delay_s=0.01, start=150),),
    ),
    S(
        "utilization drop: 8 ms of host work between steps from step 203, 16 ranks",
        [Expect("utilization_regression", None, None, 203)],
        ranks=16,
        steps=500,
        faults=(Fault("host_gap", delay_s=0.008, start=203),),
    ),
    S(
        "utilization drop that ends: 10 ms of host work between steps over steps 150-300",
        [Expect("utilization_regression", None, None, 150)],
        steps=450,
        gpu_signals=True,
        faults=(Fault("host_gap", delay_s=0.01, start=150, end=300),),
    ),
    S(
        "utilization drop under 30% jitter: 15 ms of host work from step 311 (under 60% busy after it)",
        [Expect("utilization_regression", None, None, 311), Expect("low_utilization", info=True)],
        steps=500,
        jitter=0.3,
        faults=(Fault("host_gap", delay_s=0.015, start=311),),
    ),
    S(
        "an improvement (backward 0.6x from step 200) is no finding, and no utilization regression",
        [],
        steps=400,
        gpu_signals=True,
        faults=(Fault("regression", phase="backward", factor=0.6, start=200),),
    ),
    # Intermittent stragglers at several duty cycles, among 16 ranks, starting off the blocks of 10
    # steps online detection summarizes: the onset is where the slow steps begin to come often.
    *(
        S(
            f"intermittent straggler, {duty:.0%} of steps from step {start}, {factor}x forward, 16 ranks",
            [Expect("straggler", (6,), "forward", start)],
            ranks=16,
            steps=600,
            seed=seed,
            faults=(Fault("straggler", ranks=(6,), phase="forward", factor=factor, probability=duty, start=start),),
        )
        for duty, factor, start, seed in (
            (0.1, 2.0, 157, 0),
            (0.1, 2.0, 203, 1),
            (0.2, 1.6, 203, 0),
            (0.3, 1.4, 311, 0),
            (0.3, 1.4, 157, 1),
            (0.5, 1.4, 157, 0),
        )
    ),
    S(
        "straggler steps 100-250",
        [Expect("straggler", (2,), "backward", 100, end=250)],
        steps=400,
        faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.4, start=100, end=250),),
    ),
    S(
        "a 1% wobble from step 484, then forward 1.3x from step 750",
        [Expect("regression", None, "forward", 750)],
        steps=1000,
        faults=(
            Fault("regression", phase="forward", factor=1.01, start=484),
            Fault("regression", phase="forward", factor=1.3, start=750),
        ),
    ),
    # utilization gaps, each with its largest idle part
    S(
        "utilization gap: input-bound (every rank waits 25 ms for data, 51% busy)",
        [Expect("input_bound", None, "data"), Expect("low_utilization", cause="data_wait")],
        data_s=0.025,
    ),
    S(
        "utilization gap: exposed communication (30 ms all-reduce, 52% busy)",
        [Expect("low_utilization", cause="exposed_comm")],
        comm_s=0.03,
    ),
    S(
        "utilization gap: a checkpoint every 3 steps",
        [Expect("low_utilization", cause="checkpoint")],
        checkpoint_every=3,
        checkpoint_s=0.2,
    ),
    S(
        "utilization gap: 30 ms of host work between steps (48% busy)",
        [Expect("low_utilization", cause="between_steps")],
        gap_s=0.03,
    ),
    S(
        "utilization gap: waiting for ranks under heavy jitter (60%, 50% busy)",
        [Expect("low_utilization", cause="waiting_for_ranks")],
        jitter=0.6,
        seed=3,
    ),
    S(
        "61% busy, 20 ms all-reduce exposed: low_utilization at info, its largest part named",
        [Expect("low_utilization", cause="exposed_comm", info=True)],
        comm_s=0.02,
    ),
]
