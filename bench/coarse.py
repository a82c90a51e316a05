"""``telemetry analyze`` of long runs from the run store's coarse level (telemetry/analysis/longrun/coarse.py),
measured against the issue's targets, and the coarse level made by three engines side by side.

1. 1,024 ranks x 10,000 steps (``telemetry simulate``, a straggler at rank 768, forward, x1.5):
   ``telemetry analyze --json`` from the blocks (the default) and with ``--raw`` (every row), each a
   fresh process: wall time, peak memory, findings (they must agree);
2. the coarse level computed from the same run's raw segments (per rank and 64-step block: rows and
   the median of duration, forward, backward, data) by this package's numpy code, by DuckDB's SQL over
   the segment files, and by Polars' streaming engine; and the stored aggregates read as ``analyze``
   reads them;
3. ``--huge``: 10,000 x 10,000 = 10^8 records; ``--billion``: 10,000 x 100,000 = 10^9 (about 60 GiB
   of disk and an hour here), each simulated, then analyzed as in 1 (blocks only);
4. ``--scenarios``: six simulated runs of 1,024 x 10,000 (healthy, a straggler below the warning bar,
   a regression, a data stall, slow communication, a late straggler), each analyzed from its blocks and
   from every row (in this process, one after the other): the findings side by side.

    python bench/coarse.py [--huge] [--billion] [--scenarios] [--keep DIR] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from store import CLI_CHILD, ENV, dir_bytes  # noqa: E402 - after the sys.path set-up above

COLUMNS = ("duration_s", "forward_s", "backward_s", "data_s")


SCENARIOS = (
    ("healthy", None),
    ("a straggler below the warning bar", "straggler:rank=700,phase=forward,factor=1.2"),
    ("a regression from step 6,000", "regression:factor=1.1,start=6000"),
    ("a data stall", "data_stall:rank=30,delay_ms=50"),
    ("slow communication from step 3,000", "slow_comm:factor=1.5,start=3000"),
    ("a straggler from step 5,000", "straggler:rank=7,phase=backward,factor=1.3,start=5000"),
)


def scenarios(tmp: str) -> list[tuple[str, list, float, list, float]]:
    """(name, findings from every row, seconds, findings from the blocks, seconds) of each scenario."""
    from telemetry.analysis import AnalysisOptions, analyze_run

    def found(res: object) -> list:
        return [
            (f.kind, f.severity, f.ranks[:3], f.phase, f.first_step, f.last_step, round(f.slowdown, 3))
            for f in res.findings
            if f.severity != "info"
        ]

    out = []
    for i, (name, spec) in enumerate(SCENARIOS):
        run = os.path.join(tmp, f"scenario-{i}")
        if not os.path.exists(os.path.join(run, "truth.json")):
            cmd = [sys.executable, "-m", "telemetry", "simulate", "--ranks", "1024", "--steps", "10000", "--out", run]
            subprocess.run(
                cmd + (["--inject", spec] if spec else []), cwd=ROOT, env=ENV, check=True, capture_output=True
            )
        t0 = time.perf_counter()
        rows = analyze_run(run, AnalysisOptions(raw=True))
        t1 = time.perf_counter()
        blocks = analyze_run(run)
        t2 = time.perf_counter()
        assert blocks.summary.get("coarse"), "read from its blocks"
        out.append((name, found(rows), t1 - t0, found(blocks), t2 - t1))
    return out


def simulate(tmp: str, ranks: int, steps: int) -> tuple[str, float | None]:
    out = os.path.join(tmp, f"sim-{ranks}x{steps}")
    if os.path.exists(os.path.join(out, "truth.json")):
        return out, None  # kept from an earlier run (--keep)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "telemetry", "simulate", "--ranks", str(ranks), "--steps", str(steps), "--out", out,
         "--inject", f"straggler:rank={(ranks * 3) // 4},phase=forward,factor=1.5"],
        cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=7200,
    )  # fmt: skip
    return out, time.perf_counter() - t0


def analyze(run: str, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CLI_CHILD, "analyze", run, "--json", *extra],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=7200,
    )  # fmt: skip
    cost = json.loads(proc.stderr.strip().splitlines()[-1])
    doc = json.loads(proc.stdout)
    found = [
        (f["kind"], f["severity"], f["ranks"][:4], f["phase"], f["first_step"], f["last_step"], round(f["slowdown"], 3))
        for f in doc["findings"]
        if f["severity"] != "info"
    ]
    return {**cost, "found": found, "coarse": doc["summary"].get("coarse"), "windows": doc["summary"].get("windows")}


def ours(run: str) -> tuple[float, int]:
    """Per-(rank, block) rows and medians of COLUMNS from the raw segments, this package's way."""
    import pyarrow.parquet as pq

    from telemetry.store.aggregates import block_aggregates

    t0 = time.perf_counter()
    rows = 0
    for path in sorted(glob.glob(os.path.join(run, "ranks", "*.seg-*.parquet"))):
        t = pq.read_table(path, columns=["rank", "step", *COLUMNS])
        rows += block_aggregates(t).num_rows
    return time.perf_counter() - t0, rows


def duckdb_way(run: str) -> tuple[float, int]:
    import duckdb

    t0 = time.perf_counter()
    meds = ", ".join(f"median({c})" for c in COLUMNS)
    n = duckdb.sql(
        f"SELECT rank, step // 64 AS block, count(*), {meds} FROM read_parquet('{run}/ranks/*.seg-*.parquet', "
        "union_by_name = true) GROUP BY ALL"
    ).fetchall()
    return time.perf_counter() - t0, len(n)


def polars_way(run: str) -> tuple[float, int]:
    import polars as pl

    t0 = time.perf_counter()
    out = (
        pl.scan_parquet(f"{run}/ranks/*.seg-*.parquet", missing_columns="insert")
        .group_by(pl.col("rank"), (pl.col("step") // 64).alias("block"))
        .agg(pl.len(), *[pl.col(c).median() for c in COLUMNS])
        .collect(engine="streaming")
    )
    return time.perf_counter() - t0, out.height


def stored(run: str) -> tuple[float, int]:
    from telemetry.store.aggreads import read_aggregates

    t0 = time.perf_counter()
    t = read_aggregates(run, [], summarize=False)
    return time.perf_counter() - t0, t.num_rows


def engines(run: str) -> list[tuple[str, float | None, int | str]]:
    out = []
    for name, fn in (
        ("this package: numpy over each segment (telemetry/store/aggregates.py)", ours),
        ("DuckDB over the segment files (SQL, median)", duckdb_way),
        ("Polars, streaming engine (scan_parquet, group_by, median)", polars_way),
        ("the stored aggregates, read as analyze reads them (no segment opened)", stored),
    ):
        try:
            secs, rows = fn(run)
            out.append((name, secs, rows))
        except ImportError as exc:
            out.append((name, None, f"not installed ({exc.name}): pip install duckdb polars"))
    return out


def big(tmp: str, ranks: int, steps: int, keep: bool) -> dict:
    run, gen = simulate(tmp, ranks, steps)
    files = len(os.listdir(os.path.join(run, "ranks")))
    disk = dir_bytes(run)
    cost = analyze(run)
    if not keep:
        shutil.rmtree(run)
    return {"ranks": ranks, "steps": steps, "gen_s": gen, "files": files, "disk_gib": disk / 2**30, **cost}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--huge", action="store_true", help="also 10,000 x 10,000 (10^8 records)")
    ap.add_argument("--billion", action="store_true", help="also 10,000 x 100,000 (10^9 records; ~60 GiB of disk)")
    ap.add_argument(
        "--scenarios", action="store_true", help="also six scenarios of 1,024 x 10,000, blocks against rows"
    )
    ap.add_argument(
        "--keep", metavar="DIR", help="write the simulated runs here and keep them (a later run reuses them)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        run, gen = simulate(tmp, 1024, 10000)
        blocks = analyze(run)
        raw = analyze(run, "--raw")
        side = engines(run)
        if not args.keep:
            shutil.rmtree(run)
        larger = [big(tmp, 10000, n, bool(args.keep)) for n, on in ((10000, args.huge), (100000, args.billion)) if on]
        cases = scenarios(tmp) if args.scenarios else []
    same = [f[:4] for f in blocks["found"]] == [f[:4] for f in raw["found"]]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, 2 cores, Python {platform.python_version()} "
        f"(`python bench/coarse.py{' --huge' if args.huge else ''}{' --billion' if args.billion else ''}"
        f"{' --scenarios' if args.scenarios else ''}`); "
        "`telemetry analyze --json` in a fresh process each (imports included), the straggler injected at rank "
        "3/4 of the world, forward, x1.5.",
        "",
        "| input | read from | analyze (total) | peak memory | target | findings (warning+: kind, severity, ranks, phase, steps, what-if) |",
        "|---|---|---|---|---|---|",
        f"| 1,024 x 10,000 run directory{f' (written in {gen:.1f} s)' if gen else ''} | its blocks (default) | {blocks['total_s']:.1f} s | "
        f"{blocks['peak_gib']:.2f} GiB | 5 s: {'met' if blocks['total_s'] <= 5 else '**missed**'} | {blocks['found']} |",
        f"| the same | every row (`--raw`) | {raw['total_s']:.1f} s | {raw['peak_gib']:.2f} GiB | | {raw['found']} |",
    ]
    for h in larger:
        n = h["ranks"] * h["steps"]
        target = (60, 4) if n <= 10**8 else (600, None)
        ok = h["total_s"] <= target[0] and (target[1] is None or h["peak_gib"] * 2**30 <= target[1] * 1e9)
        written = f"written in {h['gen_s']:.0f} s; " if h["gen_s"] else ""
        goal = f"{target[0]} s" + (f", {target[1]} GB" if target[1] else "")
        lines.append(
            f"| {h['ranks']:,} x {h['steps']:,} = 10^{len(str(n)) - 1} records ({written}{h['files']:,} files, "
            f"{h['disk_gib']:.1f} GiB) | its blocks | {h['total_s']:.1f} s | {h['peak_gib']:.2f} GiB | "
            f"{goal}: {'met' if ok else '**missed**'} | {h['found']} |"
        )
    lines += [
        "",
        f"Blocks and rows name the same findings (kind, severity, ranks, phase): {'yes' if same else '**no**'}. "
        f"From the blocks: {blocks['coarse']['rows']:,} rows of {blocks['coarse']['block_steps']}-step blocks; measured "
        f"again on raw rows: {blocks['coarse']['measured_again']}.",
        "",
        "**The coarse level from the 1,024 x 10,000 run's raw segments, three engines side by side** (per rank and "
        "64-step block: rows and the median of duration, forward, backward and data; this process, one after the "
        "other):",
        "",
        "| engine | time | rows out |",
        "|---|---|---|",
        *[f"| {name} | {f'{secs:.1f} s' if secs is not None else '-'} | {rows:,} |" if secs is not None
          else f"| {name} | - | {rows} |" for name, secs, rows in side],
    ]  # fmt: skip
    if cases:
        lines += [
            "",
            "**Six scenarios of 1,024 x 10,000, from the blocks and from every row** (`analyze_run` in this process, "
            "one after the other; findings at warning or above: kind, severity, ranks, phase, first and last step, what-if):",
            "",
            "| scenario | every row (`--raw`) | time | from the blocks | time |",
            "|---|---|---|---|---|",
            *[
                f"| {name} | {rows} | {t_rows:.1f} s | {blocks} | {t_blocks:.1f} s |"
                for name, rows, t_rows, blocks, t_blocks in cases
            ],
        ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        from results import update_section

        update_section(args.out, "Analyze from the coarse level (bench/coarse.py)", text)


if __name__ == "__main__":
    main()
