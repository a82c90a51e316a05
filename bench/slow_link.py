"""A slow link is blocked time, not compute (issue 46, item 5): a user's 2-rank DDP job
(tests/helpers/ddp_link_job.py: 8 layers of 512x512, two buckets, 8.4 MB of gradients a step), each rank
in a network namespace of its own ("nodes" joined by a veth pair, gloo over it), the link free or capped
at a rate (tc tbf on both ends) for the whole run.

Two CPU layouts: ``pinned``, each node on a core of its own with one intra-op thread (two machines);
``shared``, both nodes on both cores with torch's default threads (two ranks of two threads on two
cores). Prints, per layout and link, the medians over steps 20+ of the step, the backward, its time
blocked in collectives and its compute (backward less blocked), as a markdown table. Needs root.

    sudo .venv/bin/python bench/slow_link.py [--cap 400mbit] [--steps 120] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "helpers", "ddp_link_job.py")
NS, DEV, NET = ("bsl0", "bsl1"), ("bslv0", "bslv1"), "10.252.0"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def nodes_up(cap: str | None) -> None:
    nodes_down()
    for n in NS:
        sh("ip", "netns", "add", n)
    sh("ip", "link", "add", DEV[0], "type", "veth", "peer", "name", DEV[1])
    for i in (0, 1):
        sh("ip", "link", "set", DEV[i], "netns", NS[i])
        sh("ip", "-n", NS[i], "addr", "add", f"{NET}.{i + 1}/24", "dev", DEV[i])
        sh("ip", "-n", NS[i], "link", "set", DEV[i], "up")
        sh("ip", "-n", NS[i], "link", "set", "lo", "up")
        if cap:
            sh("ip", "netns", "exec", NS[i], "tc", "qdisc", "add", "dev", DEV[i], "root", "tbf", "rate", cap,
               "burst", "256kb", "latency", "50ms")  # fmt: skip


def nodes_down() -> None:
    for n in NS:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def run(layout: str, cap: str | None, steps: int, batch: int, port: int) -> dict[str, float]:
    run_dir = tempfile.mkdtemp(prefix="slow-link-")
    nodes_up(cap)
    procs = []
    try:
        for rank in (0, 1):
            env = {
                **os.environ,
                "RANK": str(rank),
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "2",
                "MASTER_ADDR": f"{NET}.1",
                "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": DEV[rank],
                "PYTHONPATH": ROOT,
                "RUN": run_dir,
                "STEPS": str(steps),
                "CAP_AT": str(steps + 1),
                "MARK": os.path.join(run_dir, "unused"),
                "BATCH": str(batch),
                "THREADS": "1" if layout == "pinned" else "",
            }
            pin = ["taskset", "-c", str(rank)] if layout == "pinned" and shutil.which("taskset") else []
            cmd = ["ip", "netns", "exec", NS[rank], *pin, sys.executable, JOB]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=600)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit("\n".join(o[-2000:] for o in outs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        nodes_down()
    sys.path.insert(0, ROOT)
    from telemetry.analysis.inputs.load import open_input

    t = open_input(run_dir).table
    t = t[t.step >= 20]
    shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "step": float(t["duration_s"].median()),
        "backward": float(t["backward_s"].median()),
        "blocked": float(t["comm.backward_s"].median()),
        "compute": float((t["backward_s"] - t["comm.backward_s"]).median()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", default="400mbit")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/slow_link.py needs root: network namespaces and tc")
    print(f"2 ranks, DDP 8x512x512, batch {a.batch}, {a.steps} steps, medians of steps 20+; cap {a.cap} (tbf)\n")
    print(
        "| layout | link | step ms | backward ms | blocked ms | compute ms | compute vs free | blocked share of the step's growth |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    port = 29700 + os.getpid() % 200
    for layout in ("pinned", "shared"):
        free = run(layout, None, a.steps, a.batch, port)
        capped = run(layout, a.cap, a.steps, a.batch, port + 1)
        port += 2
        grew = capped["step"] - free["step"]
        for name, m in (("free", free), (a.cap, capped)):
            ratio = f"{m['compute'] / free['compute']:.2f}x"
            share = f"{(capped['blocked'] - free['blocked']) / grew:.0%}" if m is capped and grew > 0 else "-"
            print(
                f"| {layout} | {name} | {m['step'] * 1e3:.1f} | {m['backward'] * 1e3:.1f} | {m['blocked'] * 1e3:.1f} "
                f"| {m['compute'] * 1e3:.1f} | {ratio} | {share} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
