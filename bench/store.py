"""The run store (format 2: JSON-lines tail sealed into Parquet segments) against format 1 (one
JSON object per step), measured side by side in one run:

1. pipeline-thread time per record: format 1's line encoder (kept here as it was) against the
   format 2 sink's ``write`` (its tail line plus, every 2,048 records, the seal), on the demo's
   records (five spans, eight host readings, one collective op), in ticks of 12 records;
2. bytes on disk per step record, spans included: a real 4-rank ``telemetry demo`` run directory,
   and a 10,000-step run written through the sink (full segments);
3. segments as Parquet or Arrow IPC (zstd): bytes and read time of the same 64 x 10,000 rows;
4. ``telemetry analyze`` wall time and peak memory (a fresh process each): 64 x 10,000 and
   1,024 x 10,000 from run directories written by ``telemetry simulate``, and 1,024 x 10,000 from
   one Parquet steps table.

    python bench/store.py [--out bench/RESULTS.md] [--quick]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import pyarrow as pa  # noqa: E402 - after the sys.path set-up above
import pyarrow.dataset as ds  # noqa: E402 - after the sys.path set-up above
import pyarrow.feather as feather  # noqa: E402 - after the sys.path set-up above

from telemetry.pipeline.records import SPAN_COLLECTIVE, SPAN_DATA, SPAN_PHASE, OpStats, Span, StepRecord  # noqa: E402 - after the sys.path set-up above
from telemetry.store.writer import RunStoreSink  # noqa: E402 - after the sys.path set-up above

ENV = {**os.environ, "PYTHONPATH": ROOT}


def demo_record(step: int) -> StepRecord:
    """A record shaped as the demo's (see a demo run's tail), its times jittered as a real run's are
    (identical records would compress to almost nothing and flatter the format)."""
    rng = random.Random(step)
    j = [rng.lognormvariate(0, 0.2) for _ in range(6)]
    t = 1.8e9 + step * 0.045 + rng.random() * 0.003
    d, f, b, c, o = 0.0006 * j[0], 0.0055 * j[1], 0.0295 * j[2], 0.019 * j[3], 0.0022 * j[4]
    spans = (
        Span(SPAN_DATA, "data", t - d, t),
        Span(SPAN_PHASE, "forward", t, t + f),
        Span(SPAN_PHASE, "backward", t + f, t + f + b),
        Span(SPAN_COLLECTIVE, "all_reduce", t + f + b - c, t + f + b, True, 449536),
        Span(SPAN_PHASE, "optimizer", t + f + b, t + f + b + o),
    )
    k = step // 22  # the sampler's readings change about once a second (22 steps)
    device = {
        "process_cpu_seconds": 4.5 + k * 0.7,
        "process_resident_memory_bytes": 410800128.0 + 4096 * (k % 7),
        "process_cpu_ratio": 0.6 + 0.01 * (k % 9),
        "process_involuntary_switches_per_second": 95.4 + k % 13,
        "process_major_faults_per_second": 0.0,
        "host_cpu_busy_ratio": 0.7 + 0.01 * (k % 11),
        "host_cpu_steal_ratio": 0.03,
        "host_swap_used_bytes": 0.0,
    }
    return StepRecord(
        rank=0,
        step=step,
        start_s=t,
        duration_s=f + b + o,
        ok=True,
        phases={"data": d, "forward": f, "backward": b, "optimizer": o},
        phase_comm={"backward": c},
        comm_s=c,
        ops={"all_reduce": OpStats(1, c, c, 449536, 674304.0)},
        tokens=512,
        samples=8,
        scalars={"loss": 40.0 / (step + 1) * j[5]},
        spans=spans,
        device=device,
    )


def format1_line(r: StepRecord) -> str:
    """Format 1's writer, as it was (telemetry/store/writer.py before the columnar store)."""
    bad = {k: repr(v) for k, v in r.scalars.items() if type(v) is float and not math.isfinite(v)}
    scalars = {k: (None if k in bad else v) for k, v in r.scalars.items()} if bad else r.scalars
    obj = {
        "rank": r.rank,
        "step": r.step,
        "start_s": r.start_s,
        "duration_s": r.duration_s,
        "ok": r.ok,
        "phases": r.phases,
        "phase_comm": r.phase_comm,
        "comm_s": r.comm_s,
        "ops": {k: list(v) for k, v in r.ops.items()},
        "tokens": r.tokens,
        "samples": r.samples,
        "scalars": scalars,
        "spans": [list(s) for s in r.spans],
    }
    if bad:
        obj["nonfinite"] = bad
    if r.spans_dropped:
        obj["spans_dropped"] = r.spans_dropped
    if r.device:
        obj["device"] = r.device
    if r.mfu is not None:
        obj["mfu"] = r.mfu
    if r.host_duration_s is not None:
        obj["host_duration_s"] = r.host_duration_s
    return json.dumps(obj, separators=(",", ":")) + "\n"


def sink(run_dir: str) -> RunStoreSink:
    cfg = SimpleNamespace(run_dir=run_dir, job="bench", as_dict=lambda: {}, tags=(), otlp_sample_every=0)
    ctx = SimpleNamespace(
        rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        node_rank=0,
        node="bench",
        launcher="none",
        placement_labels=lambda: {},
    )
    return RunStoreSink(cfg, ctx, {"session": "s", "start_time_s": time.time(), "versions": {}})


def write_cost(n: int, tick: int = 12, rounds: int = 3) -> dict:
    """Microseconds of pipeline-thread time per record, both formats, alternated, best of rounds."""
    recs = [demo_record(i) for i in range(n)]
    best = {"format 1": float("inf"), "format 2": float("inf")}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "f1.jsonl"), "w") as f:
                t0 = time.perf_counter()
                for i in range(0, n, tick):
                    f.write("".join(format1_line(r) for r in recs[i : i + tick]))
                    f.flush()
                best["format 1"] = min(best["format 1"], (time.perf_counter() - t0) / n * 1e6)
            s = sink(os.path.join(tmp, "run"))
            t0 = time.perf_counter()
            for i in range(0, n, tick):
                s.write(recs[i : i + tick])
                s.flush(1.0)
            s.close(5.0)
            best["format 2"] = min(best["format 2"], (time.perf_counter() - t0) / n * 1e6)
    return best


def dir_bytes(path: str, pattern: str = "*") -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "ranks", pattern)))


def demo_bytes(tmp: str) -> dict:
    run = os.path.join(tmp, "demo")
    subprocess.run(
        [sys.executable, "-m", "telemetry", "demo", "--run-dir", run, "--json"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        check=True,
        timeout=600,
    )
    steps = dir_bytes(run, "*.seg-*")
    spans = dir_bytes(run, "*.spans-*")
    n = 4 * 200
    return {"records": n, "steps_b": steps / n, "spans_b": spans / n, "total_b": (steps + spans) / n}


def sink_bytes(tmp: str, n: int = 10240) -> dict:
    run = os.path.join(tmp, "sink")
    s = sink(run)
    for i in range(0, n, 12):
        s.write([demo_record(j) for j in range(i, min(n, i + 12))])
    s.close(5.0)
    steps, spans = dir_bytes(run, "*.seg-*"), dir_bytes(run, "*.spans-*")
    f1 = sum(len(format1_line(demo_record(i))) for i in range(0, n, 10)) * 10 / n
    return {"records": n, "total_b": (steps + spans) / n, "steps_b": steps / n, "spans_b": spans / n, "format1_b": f1}


def simulate(tmp: str, ranks: int, steps: int) -> tuple[str, float]:
    out = os.path.join(tmp, f"sim-{ranks}x{steps}")
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "telemetry",
            "simulate",
            "--ranks",
            str(ranks),
            "--steps",
            str(steps),
            "--out",
            out,
            "--inject",
            f"straggler:rank={(ranks * 3) // 4},phase=forward,factor=1.5",
        ],
        cwd=ROOT,
        env=ENV,
        check=True,
        capture_output=True,
        timeout=3600,
    )
    return out, time.perf_counter() - t0


CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from telemetry.analysis import analyze_run, open_input
t1 = time.perf_counter()
run = open_input(sys.argv[1])
t2 = time.perf_counter()
res = analyze_run(run)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "analyze_s": t3 - t2, "total_s": t3 - t0,
                  "rows": len(run.table), "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "found": [(f.kind, f.ranks[:4], f.phase) for f in res.findings if f.severity != "info"
                            and f.kind != "low_utilization"]}))
"""


def analyze_cost(path: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, path], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=3600
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


CLI_CHILD = """
import json, resource, sys, time
from telemetry.cli import main
t0 = time.perf_counter()
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "total_s": time.perf_counter() - t0,
                  "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), file=sys.stderr)
"""


def huge(tmp: str, ranks: int = 10000, steps: int = 10000) -> dict:
    """``telemetry analyze`` (windows, findings merged) on ranks x steps written by simulate."""
    run, gen = simulate(tmp, ranks, steps)
    files = len(glob.glob(os.path.join(run, "ranks", "*.seg-*")))
    disk = dir_bytes(run, "*.seg-*")
    proc = subprocess.run(
        [sys.executable, "-c", CLI_CHILD, "analyze", run, "--json", "--raw"],  # every row, in windows
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    cost = json.loads(proc.stderr.strip().splitlines()[-1])
    doc = json.loads(proc.stdout)
    shutil.rmtree(run)
    found = [
        (f["kind"], f["ranks"][:4], f["phase"], f["first_step"], f["last_step"])
        for f in doc["findings"]
        if f["severity"] != "info" and f["kind"] != "low_utilization"
    ]
    return {
        "ranks": ranks,
        "steps": steps,
        "gen_s": gen,
        "files": files,
        "disk_gib": disk / 2**30,
        "windows": doc["summary"].get("windows"),
        "found": found,
        **cost,
    }


def segment_formats(run: str) -> dict:
    """The same segments as Parquet (as written) and as Arrow IPC files (zstd): bytes, read time."""
    files = sorted(glob.glob(os.path.join(run, "ranks", "*.seg-*.parquet")))
    out = {}
    t0 = time.perf_counter()
    table = ds.dataset(files, format="parquet").to_table()
    out["parquet"] = {"bytes": sum(os.path.getsize(f) for f in files), "read_s": time.perf_counter() - t0}
    with tempfile.TemporaryDirectory() as tmp:
        ipc = []
        for i, f in enumerate(files):
            path = os.path.join(tmp, f"{i}.arrow")
            feather.write_feather(ds.dataset(f, format="parquet").to_table(), path, compression="zstd")
            ipc.append(path)
        t0 = time.perf_counter()
        ds.dataset(ipc, format="ipc").to_table()
        out["ipc"] = {"bytes": sum(os.path.getsize(p) for p in ipc), "read_s": time.perf_counter() - t0}
    out["rows"] = table.num_rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="64 ranks only (no 1,024-rank run)")
    ap.add_argument(
        "--huge",
        action="store_true",
        help="only 10,000 ranks x 10,000 steps, analyzed in windows (--raw; bench/coarse.py --huge reads its blocks) "
        "(about 4.5 GB of disk and 10-20 minutes here); its own section",
    )
    args = ap.parse_args()
    if args.huge:
        with tempfile.TemporaryDirectory() as tmp:
            h = huge(tmp)
        n = h["ranks"] * h["steps"]
        per_window = h["total_s"] / max(1, h["windows"]["count"] if h["windows"] else 1)
        text = "\n".join(
            [
                f"Measured {time.strftime('%Y-%m-%d')} (`python bench/store.py --huge`): {h['ranks']:,} ranks x "
                f"{h['steps']:,} steps = {n:,} step records, written by `telemetry simulate` in {h['gen_s']:.0f} s "
                f"({n / h['gen_s'] * 60 / 1e6:.0f} million a minute; {h['files']:,} segments, {h['disk_gib']:.1f} GiB), "
                f"then `telemetry analyze --raw` (every row; a fresh process): {h['total_s']:.0f} s, peak {h['peak_gib']:.2f} GiB "
                f"(target 8 GB), in {h['windows']['count'] if h['windows'] else 1} windows of "
                f"{h['windows']['steps_each'] if h['windows'] else h['steps']:,} steps; found {h['found']} (the "
                f"straggler injected at rank {(h['ranks'] * 3) // 4}, forward, from step 0).",
                "",
                f"10^9 records (100,000 steps at 10,000 ranks): the windows are the same size, so the peak memory stays "
                f"about {h['peak_gib']:.1f} GiB and the time grows with the windows, about {per_window:.0f} s each: "
                f"about {per_window * 10 * (h['windows']['count'] if h['windows'] else 1) / 60:.0f} minutes here; "
                f"writing them would take {h['gen_s'] * 10 / 60:.0f} minutes and {h['disk_gib'] * 10:.0f} GiB, "
                f"in {h['files'] * 10:,} segment files (each window lists them all and reads the footer of each once, "
                f"cached: a few hundred bytes each).",
            ]
        )
        print(text)
        if args.out:
            from results import update_section

            update_section(args.out, "Run store at 10^8 records (bench/store.py --huge)", text)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cost = write_cost(20480)
        by_sink = sink_bytes(tmp)
        demo = demo_bytes(tmp)
        small, small_gen = simulate(tmp, 64, 10000)
        small_cost = analyze_cost(small)
        formats = segment_formats(small)
        rows = [("64 x 10,000 run directory", small_cost, "2 s, 1 GB", small_gen)]
        if not args.quick:
            big, big_gen = simulate(tmp, 1024, 10000)
            rows.append(("1,024 x 10,000 run directory", analyze_cost(big), "30 s, 4 GB", big_gen))
            shutil.rmtree(big)
            from detectors.scale import make_table

            pq_path = os.path.join(tmp, "steps.parquet")
            make_table(1024, 10000).to_parquet(pq_path)
            rows.append(("1,024 x 10,000 Parquet steps table", analyze_cost(pq_path), "7 s (as before)", None))
    body = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, Python {platform.python_version()}, "
        f"pyarrow {pa.__version__} (`python bench/store.py`).",
        "",
        "**Pipeline-thread time per record** (the demo's records, ticks of 12, best of 3, alternated): "
        f"format 1 (a JSON object per line) {cost['format 1']:.1f} us; format 2 (a JSON array per tail line, "
        f"sealed every 2,048 records into Parquet) {cost['format 2']:.1f} us "
        f"({cost['format 2'] / cost['format 1']:.2f}x; target: no more than format 1).",
        "",
        "**Bytes on disk per step record, spans included** (target 200): a real `telemetry demo` run "
        f"(4 ranks x 200 steps, one 200-record segment per rank) {demo['total_b']:.0f} B (steps "
        f"{demo['steps_b']:.0f} + spans {demo['spans_b']:.0f}); {by_sink['records']:,} demo records through "
        f"the sink (full segments) {by_sink['total_b']:.0f} B (steps {by_sink['steps_b']:.0f} + spans "
        f"{by_sink['spans_b']:.0f}); format 1 wrote {by_sink['format1_b']:.0f} B per record.",
        "",
        f"**Segment format** ({formats['rows']:,} rows of 64 x 10,000, zstd): Parquet "
        f"{formats['parquet']['bytes'] / formats['rows']:.1f} B/row, read {formats['parquet']['read_s']:.2f} s; "
        f"Arrow IPC {formats['ipc']['bytes'] / formats['rows']:.1f} B/row, read {formats['ipc']['read_s']:.2f} s.",
        "",
        "**`analyze`** (a fresh process each; read = open_input, the steps table; the straggler injected at "
        "rank 3/4 of the world, forward):",
        "",
        "| input | rows | written by `telemetry simulate` in | read | analyze | total (with imports) | peak memory | target | found (warning+, not low_utilization) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c, target, gen in rows:
        body.append(
            f"| {name} | {c['rows']:,} | {f'{gen:.1f} s' if gen else '-'} | {c['read_s']:.1f} s | "
            f"{c['analyze_s']:.1f} s | {c['total_s']:.1f} s | {c['peak_gib']:.2f} GiB | {target} | {c['found']} |"
        )
    text = "\n".join(body)
    print(text)
    if args.out:
        from results import update_section

        update_section(args.out, "Run store (bench/store.py)", text)


if __name__ == "__main__":
    main()
