"""Online detection at 10,000 ranks: rank 0's OnlineDetector against a real TCPStore on 127.0.0.1.

A few poster processes post as 10,000 ranks would (per block, one ``set`` of a summary vector per
rank, on their own connections; the phase names once), one rank (``--straggler``) computing 1.5x
longer in forward. Rank 0's detector (its real online thread, on the connection of
the process that hosts the store, as in a job whose rank 0 hosts it) reads each block and analyzes
the window. The window is first filled with ``--window`` minus ``--blocks`` blocks put straight into
the detector (same vectors), so that every live block is analyzed at a full window: the steady state.

Per live block: the posting burst (all ranks' sets, and one set's latency: median, p99), rank 0's
gather (from the block's arrival to its rows being read: completeness check, reads), table build,
analysis, and rank 0's store requests (each one round trip); deletes done by the background deleter
on its own connection are counted apart. Run twice: with 10 ranks and with ``--ranks``. Exits 1 when
a block's gather + table + analysis at ``--ranks`` exceeds ``--limit-s`` (1 s), or the straggler is
not found. ``--window`` is the ``online_window`` setting: by default ``auto``, the default settings' window
for each world (200 blocks at 10 ranks, 50 at 10,000: :func:`telemetry.online.detector.online_window`).

    python bench/online_scale.py [--ranks 10000] [--small 10] [--blocks 6] [--window auto] [--posters 3]
                                 [--chunk 1000] [--impl PATH] [--out bench/RESULTS.md]

``--impl`` runs the same bench on another version of online detection: a copy of the
``telemetry/online/`` package (a folder, e.g. ``mkdir /tmp/old && git archive <commit> telemetry/online
| tar -x -C /tmp/old``, then ``--impl /tmp/old/telemetry/online``), or a version from before the
package, when it was the one file ``telemetry/online.py`` (e.g. the one before batching:
``git show <commit>:telemetry/online.py > /tmp/online_old.py``, then ``--impl /tmp/online_old.py``).
Either is loaded as ``telemetry._online_under_test``, so its relative imports reach this
checkout's ``telemetry``.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
from datetime import date, timedelta

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

PHASES = "backward,forward,optimizer"
EVERY = 10


def summaries(block: int, ranks: np.ndarray, straggler: int, seed: int, fixed: int = 7) -> np.ndarray:
    """Realistic summary vectors (one row per rank): block, steps, step time, compute, comm, data,
    (``fixed`` 7: the traced steps, none), then backward, forward and optimizer compute. The step
    time is the job's (synchronous ranks); the straggler's forward is 1.5x, and it waits that much
    less in the collectives. ``fixed``: the fields before the phases in the version measured (6 before
    the traced steps' count was added)."""
    rng = np.random.default_rng([seed, block])
    n = len(ranks)
    fwd = 0.012 * (1 + 0.02 * rng.standard_normal(n))
    fwd[ranks == straggler] *= 1.5
    bwd = 0.026 * (1 + 0.02 * rng.standard_normal(n))
    opt = 0.003 * (1 + 0.02 * rng.standard_normal(n))
    step = 0.050
    m = np.zeros((n, fixed + 3))
    m[:, 0], m[:, 1], m[:, 2] = block, EVERY, step
    m[:, 3] = fwd + bwd + opt + 0.001
    m[:, 4] = step - m[:, 3] - 0.001
    m[:, 5] = 0.001
    m[:, fixed], m[:, fixed + 1], m[:, fixed + 2] = bwd, fwd, opt
    return m


def poster(port: int, first: int, last: int, straggler: int, conn, fixed: int = 7) -> None:
    """One process posting for ranks first..last-1, one set per rank per block, as each rank's
    pipeline thread does; returns the burst's time and every set's latency."""
    import torch.distributed as dist

    store = dist.PrefixStore("telemetry/", dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=120)))
    ranks = np.arange(first, last)
    for r in ranks:
        store.set(f"phases/{r}", PHASES)
    conn.send("ready")
    while (block := conn.recv()) is not None:
        values = [v.tobytes() for v in summaries(block, ranks, straggler, seed=first, fixed=fixed)]
        keys = [f"s/{block}/{r}" for r in ranks]
        lat = np.empty(len(ranks))
        t0 = time.perf_counter()
        for i, (k, v) in enumerate(zip(keys, values)):
            a = time.perf_counter()
            store.set(k, v)
            lat[i] = time.perf_counter() - a
        conn.send((time.perf_counter() - t0, lat))


class Counting:
    """A store that counts rank 0's requests (each one round trip) and their time, by name."""

    def __init__(self, inner, calls=None, secs=None) -> None:
        self.inner = inner
        self.calls = collections.Counter() if calls is None else calls
        self.secs = collections.Counter() if secs is None else secs

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*a, **k):
            t0 = time.perf_counter()
            try:
                return attr(*a, **k)
            finally:
                self.calls[name] += 1
                self.secs[name] += time.perf_counter() - t0

        return counted

    @property
    def timeout(self):
        return self.inner.timeout

    def clone(self):
        self.deleter = Counting(self.inner.clone())
        return self.deleter


def load(path: str | None):
    """Online detection to measure: this checkout's package, or the one at ``path`` (a package's
    folder, or a single online.py of the versions before the package)."""
    if path is None:
        from telemetry import online

        return online
    name = "telemetry._online_under_test"
    if os.path.isdir(path):
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def fixed_fields(impl) -> int:
    """How many fields come before the phases in ``impl``'s summary vector (``wire.FIXED``; 6 in the
    versions before the traced steps' count)."""
    wire = getattr(impl, "wire", None)
    return len(getattr(wire, "FIXED", getattr(impl, "FIXED", ()))) or 6


def set_chunk(impl, chunk: int) -> None:
    """Keys per store request of rank 0: ``reads.CHUNK`` in the package, ``CHUNK`` in the one file."""
    if hasattr(impl, "reads"):
        impl.reads.CHUNK = chunk
    else:
        impl.CHUNK = chunk


def block(impl, ranks: np.ndarray, m: np.ndarray):
    """One block of summaries as ``det._rows`` holds it in ``impl`` (Block, _Block or rank -> vector)."""
    if hasattr(impl, "wire"):
        return impl.wire.Block([(ranks, m)])
    if hasattr(impl, "_Block"):
        return impl._Block([(ranks, m)])
    return dict(enumerate(m))


def run(impl, ranks: int, blocks: int, window: int, posters: int, straggler: int) -> dict:
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=120), wait_for_workers=False)
    posters = max(1, min(posters, ranks))
    bounds = np.linspace(0, ranks, posters + 1).astype(int)
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for i in range(posters):
        here, there = ctx.Pipe()
        p = ctx.Process(
            target=poster,
            args=(server.port, int(bounds[i]), int(bounds[i + 1]), straggler, there, fixed_fields(impl)),
            daemon=True,
        )
        p.start()
        pipes.append(here)
        procs.append(p)
    for here in pipes:
        assert here.recv() == "ready"

    store = Counting(dist.PrefixStore("telemetry/", server))
    det = impl.OnlineDetector(store, rank=0, world=ranks, every=EVERY, window=window, wait_blocks=3, min_interval_s=0.0)
    prefill = max(0, window - blocks)
    for b in range(prefill):  # the window as it stands in a long run: filled, straight into the detector
        m = summaries(b, np.arange(ranks), straggler, seed=0, fixed=fixed_fields(impl))
        det._rows[b] = block(impl, np.arange(ranks), m)

    timing: dict[str, float] = {}
    done = threading.Event()

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timing[name] = timing.get(name, 0.0) + time.perf_counter() - t0
                timing[name + "_end"] = time.perf_counter()
                if name == "analyze":
                    done.set()

        return wrapper

    det._collect = timed("collect", det._collect)
    det._table = timed("table", det._table)
    det._analyze = timed("analyze", det._analyze)
    rows, results = [], []
    try:
        for b in range(prefill, prefill + blocks):
            for here in pipes:
                here.send(b)
            got = [here.recv() for here in pipes]
            lat = np.concatenate([g[1] for g in got])
            timing.clear()
            done.clear()
            calls0 = collections.Counter(store.calls)
            t0 = time.perf_counter()
            det._inbox.put(b)  # rank 0's own post of the block
            if not done.wait(120):
                raise RuntimeError(f"block {b} was not analyzed in 120 s")
            calls = collections.Counter(store.calls)
            calls.subtract(calls0)
            gather = timing["collect_end"] - t0
            table = timing.get("table", 0.0)
            analysis = timing["analyze"] - table
            results.extend(det.poll())
            rows.append(
                {
                    "block": b,
                    "burst_s": max(g[0] for g in got),
                    "set_med_us": float(np.median(lat)) * 1e6,
                    "set_p99_us": float(np.percentile(lat, 99)) * 1e6,
                    "gather_s": gather,
                    "table_s": table,
                    "analysis_s": analysis,
                    "requests": {k: v for k, v in calls.items() if v},
                }
            )
        deleter = getattr(store, "deleter", None)
        if deleter is not None:  # let the background deletes finish, to count them
            deadline = time.monotonic() + 60
            while deleter.calls["delete_key"] < ranks * blocks and time.monotonic() < deadline:
                time.sleep(0.05)
        left = sum(1 for k in dist.PrefixStore("telemetry/", server).list_keys() if k.startswith("s/"))
    finally:
        det.stop()
        for here in pipes:
            here.send(None)
        for p in procs:
            p.join(10)
    findings = [f for r in results for f in r.findings]
    return {
        "ranks": ranks,
        "rows": rows,
        "findings": findings,
        "deletes": dict(deleter.calls) if deleter is not None else {},
        "delete_s": dict(deleter.secs) if deleter is not None else {},
        "keys_left": left,
        "found": any(f["kind"] == "straggler" and f["ranks"] == [straggler] for f in findings),
    }


def fmt_requests(req: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(req.items())) or "-"


def report(res: dict, window: int, setting: int | str = "auto") -> str:
    lines = [
        f"**{res['ranks']:,} ranks posting**, window {window} blocks ({res['ranks'] * window:,} rows; "
        f"online_window={setting}), online_every {EVERY}:",
        "",
        "| block | post: burst of all ranks' sets (ms) | one set: median / p99 (µs) | gather (ms) | table (ms) "
        "| analysis (ms) | gather + table + analysis (ms) | rank 0's store requests |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        total = r["gather_s"] + r["table_s"] + r["analysis_s"]
        lines.append(
            f"| {r['block']} | {r['burst_s'] * 1e3:.0f} | {r['set_med_us']:.0f} / {r['set_p99_us']:.0f} "
            f"| {r['gather_s'] * 1e3:.0f} | {r['table_s'] * 1e3:.0f} | {r['analysis_s'] * 1e3:.0f} "
            f"| {total * 1e3:.0f} | {fmt_requests(r['requests'])} |"
        )
    n = len(res["rows"])
    deletes = res["deletes"].get("delete_key", 0)
    if deletes:
        lines += [
            "",
            f"Background deletes (own connection): {deletes / n:,.0f} delete_key per block, "
            f"{res['delete_s'].get('delete_key', 0.0) / n * 1e3:.0f} ms per block.",
        ]
    lines.append(
        f"Summary keys left in the store at the end: {res['keys_left']}. Straggler found: "
        f"{'yes' if res['found'] else 'NO'}."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=10000)
    ap.add_argument("--small", type=int, default=10, help="ranks of the small run (0: none)")
    ap.add_argument("--blocks", type=int, default=6, help="live blocks posted through the store")
    ap.add_argument(
        "--window", default="auto", help="online_window: blocks analyzed; auto (default): the default settings' window"
    )
    ap.add_argument("--posters", type=int, default=3, help="processes posting for the ranks")
    ap.add_argument("--straggler", type=int, default=None, help="the straggler rank (default: ranks * 3 // 4 + 1)")
    ap.add_argument("--limit-s", type=float, default=1.0)
    ap.add_argument("--chunk", type=int, default=None, help="keys per store request of rank 0 (online.reads.CHUNK)")
    ap.add_argument(
        "--impl",
        default=None,
        help="another online detection to measure: a telemetry/online/ folder or an old online.py",
    )
    ap.add_argument("--out", default=None, help="write the section into this RESULTS.md")
    args = ap.parse_args(argv)
    from telemetry.online.detector import online_window

    setting = args.window if args.window == "auto" else int(args.window)
    impl = load(args.impl)
    if args.chunk:
        set_chunk(impl, args.chunk)
    sizes = ([args.small] if args.small else []) + [args.ranks]
    out, ok, worst = [], True, None
    t0 = time.monotonic()
    for ranks in sizes:
        straggler = args.straggler if args.straggler is not None else ranks * 3 // 4 + 1
        window = online_window(setting, ranks)
        res = run(impl, ranks, args.blocks, window, args.posters, min(straggler, ranks - 1))
        out.append(report(res, window, setting))
        print(out[-1] + "\n", flush=True)
        if ranks == args.ranks:
            worst = max(r["gather_s"] + r["table_s"] + r["analysis_s"] for r in res["rows"])
            if worst > args.limit_s:
                print(f"FAIL: gather + table + analysis reached {worst:.2f} s for a block (limit {args.limit_s} s)")
                ok = False
        if not res["found"]:
            print(f"FAIL: the straggler was not found with {ranks} ranks")
            ok = False
    print(f"({time.monotonic() - t0:.0f} s in all)")
    if args.out:
        from results import update_section

        body = (
            f"Measured {date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()} (`python bench/online_scale.py"
            + ("" if args.window == "auto" else f" --window {args.window}")
            + "`): "
            + ("the default online_window (auto)" if args.window == "auto" else f"online_window={args.window}")
            + ", one TCPStore on 127.0.0.1, "
            f"{args.posters} processes posting for the ranks, rank 0's detector in the process hosting the "
            "store.\n\n" + "\n\n".join(out)
        )
        if worst is not None:
            body += (
                f"\n\nTarget: rank 0's gather + table + analysis under {args.limit_s:g} s per block at "
                f"{args.ranks:,} ranks{' with the default settings' if args.window == 'auto' else ''}: "
                + ("met" if worst <= args.limit_s else "**missed**")
                + f" (at most {worst * 1e3:.0f} ms)."
            )
        update_section(args.out, "Online detection at scale (bench/online_scale.py)", body)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
