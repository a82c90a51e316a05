"""A slow network is blocked time, not compute (issue 46, item 5): a user's 2-rank DDP job whose two ranks
sit in two network namespaces ("nodes") joined by a veth pair, gloo over it, the link capped at
400 Mbit/s (tc tbf, both ends) from step 60 while the job runs.

DDP's reducer waits for its buckets in C++ at the end of backward (telemetry/hooks/ddp.py times that
wait). Before that was timed, about 40 ms a step of waiting on the capped link read as backward compute,
and the straggler and regression detectors read compute. Needs root (network namespaces and tc);
skipped without, naming why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from telemetry.analysis.inputs.load import open_input
from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port, stop_group

# the compute column's growth and the share of the step's growth that is blocked time are measured
# against each other in one run: with nothing beside it (scripts/suite.sh), a neighbour's load shifts
# compute between the halves (a run beside the suite's other worker: 11 -> 27 ms of compute, no link cap)
pytestmark = pytest.mark.alone

STEPS, CAP_AT = 150, 60
CAP = "400mbit"
HELPER = os.path.join(ROOT, "tests", "helpers", "ddp_link_job.py")


def sh(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (cmd, done.stderr)


@pytest.fixture
def nodes():
    """Two namespaces and a veth pair between them, removed afterwards; their addresses and devices."""
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("tc")):
        pytest.skip("needs root and iproute2 (ip, tc): network namespaces and a tbf cap")
    tag = f"{os.getpid() % 100000}"
    ns, dev = [f"tt{tag}a", f"tt{tag}b"], [f"tv{tag}a", f"tv{tag}b"]
    net = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    made = subprocess.run(["ip", "netns", "add", ns[0]], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"network namespaces are not available here: {made.stderr.strip()}")
    try:
        sh("ip", "netns", "add", ns[1])
        veth = subprocess.run(
            ["ip", "link", "add", dev[0], "type", "veth", "peer", "name", dev[1]], capture_output=True, text=True
        )
        if veth.returncode != 0:
            pytest.skip(f"no veth pair here: {veth.stderr.strip()}")
        for i in (0, 1):
            sh("ip", "link", "set", dev[i], "netns", ns[i])
            sh("ip", "-n", ns[i], "addr", "add", f"{net}.{i + 1}/24", "dev", dev[i])
            sh("ip", "-n", ns[i], "link", "set", dev[i], "up")
            sh("ip", "-n", ns[i], "link", "set", "lo", "up")
        probe = subprocess.run(  # the cap comes mid-run: a kernel without tbf must skip now, not fail then
            ["ip", "netns", "exec", ns[0], "tc", "qdisc", "add", "dev", dev[0], "root", "tbf", "rate", CAP,
             "burst", "256kb", "latency", "50ms"],
            capture_output=True, text=True,
        )  # fmt: skip
        if probe.returncode != 0:
            pytest.skip(f"no tbf qdisc here: {probe.stderr.strip()}")
        sh("ip", "netns", "exec", ns[0], "tc", "qdisc", "del", "dev", dev[0], "root")
        yield ns, dev, [f"{net}.1", f"{net}.2"]
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def pin(rank: int) -> list[str]:
    """Each "node" on a core of its own, as two machines would be (with one intra-op thread a rank: the
    job sets it). Sharing both cores, torch's two threads a rank on each, the capped run's backward compute
    read 1.5x the free link's, before any wait: the last bucket became ready 14 ms later, off the main
    thread's CPU (bench/RESULTS.md, "Waits counted where they happen")."""
    taskset = shutil.which("taskset")
    return [taskset, "-c", str(rank % (os.cpu_count() or 1))] if taskset else []


def cap(ns: list[str], dev: list[str]) -> None:
    for n, d in zip(ns, dev):
        sh("ip", "netns", "exec", n, "tc", "qdisc", "add", "dev", d, "root", "tbf", "rate", CAP,
           "burst", "256kb", "latency", "50ms")  # fmt: skip


def test_a_link_capped_mid_run_is_slow_comm_with_the_backwards_compute_unchanged(nodes, tmp_path):
    ns, dev, addr = nodes
    run_dir, mark = str(tmp_path / "run"), str(tmp_path / "capped-now")
    port = str(free_port())
    procs = []
    try:
        for rank in (0, 1):
            env = {
                **os.environ,
                "RANK": str(rank),
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "2",
                "MASTER_ADDR": addr[0],
                "MASTER_PORT": port,
                "GLOO_SOCKET_IFNAME": dev[rank],
                "PYTHONPATH": ROOT,
                "RUN": run_dir,
                "STEPS": str(STEPS),
                "CAP_AT": str(CAP_AT),
                "MARK": mark,
            }
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns[rank], *pin(rank), sys.executable, HELPER],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 240
        while not os.path.exists(mark):  # rank 0 begins step CAP_AT
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [
                p.communicate()[0][-2000:] for p in procs if p.poll() is not None
            ]
            time.sleep(0.02)
        cap(ns, dev)
        outs = [p.communicate(timeout=300)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [o[-3000:] for o in outs]
    finally:
        for p in procs:
            stop_group(p)

    t = open_input(run_dir).table
    t = t.assign(compute=t["backward_s"] - t["comm.backward_s"])
    # steps 10-55 on the free link, 75 on on the capped one (the cap lands within a step or two of CAP_AT)
    free, capped = t[(t.step >= 10) & (t.step < CAP_AT - 5)], t[t.step >= CAP_AT + 15]
    med = {
        name: {c: float(part[c].median()) for c in ("duration_s", "backward_s", "comm.backward_s", "compute")}
        for name, part in (("free", free), ("capped", capped))
    }
    print(json.dumps(med))  # shown when the test fails
    grew = med["capped"]["duration_s"] - med["free"]["duration_s"]
    assert grew > 0.05, med  # the cap slows the step: 8.4 MB a step over 400 Mbit/s is some 170 ms
    # the backward's compute stays within 1.3x of the free link's; the blocked time takes at least 80%
    # of the step's growth (issue 46's done-when)
    assert med["capped"]["compute"] <= 1.3 * med["free"]["compute"], med
    assert med["capped"]["comm.backward_s"] - med["free"]["comm.backward_s"] >= 0.8 * grew, med

    done = subprocess.run(
        [sys.executable, "-m", "telemetry", "analyze", run_dir, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    findings = json.loads(done.stdout)["findings"]
    told = [(f["kind"], f["ranks"], f.get("phase"), f["severity"], f.get("first_step")) for f in findings]
    print(told)
    # slow_comm from the capped step; no straggler (both ranks wait on the same link); no regression of a
    # compute phase (a regression of the step itself, the link's doing, may stand beside slow_comm)
    slow = [f for f in findings if f["kind"] == "slow_comm"]
    assert slow and slow[0]["severity"] in ("warning", "critical"), told
    assert CAP_AT - 5 <= slow[0]["first_step"] <= CAP_AT + 15, told
    assert not [f for f in findings if f["kind"] == "straggler"], told
    assert not [
        f for f in findings if f["kind"] == "regression" and f.get("phase") in ("forward", "backward", "optimizer")
    ], told
