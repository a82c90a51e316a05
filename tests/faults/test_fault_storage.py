"""Storage faults: the run directory's disk fills up, or turns read-only, while the job runs; the
demo launcher's own logs on a full disk. Real file systems: a small tmpfs mounted for the test
(we run as root), unmounted in a finally."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from telemetry.analysis.inputs.load import open_input
from tests.faults.gloo_job import NOT_SLOWED, ROOT, GlooJob

pytestmark = pytest.mark.slow

STEPS, FILL_AT = 200, 100


@contextlib.contextmanager
def tmpfs(path, size: str):
    """A tmpfs of ``size`` at ``path``, unmounted (lazily if still busy) on the way out."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield str(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: str) -> str:
    """Write a filler file until the disk says ENOSPC; returns its path."""
    path = os.path.join(disk, "filler")
    _write_until_full(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644), (b"\0" * 65536, b"\0" * 512))
    return path


def remount(disk: str, mode: str) -> None:
    """``ro`` or ``rw``; a remount to ro waits until no file is open for writing there (the store
    holds none between ticks)."""
    deadline = time.monotonic() + 10
    while subprocess.run(["mount", "-o", f"remount,{mode}", disk], capture_output=True).returncode:
        assert time.monotonic() < deadline, f"remount,{mode} {disk} kept failing"
        time.sleep(0.01)


def stored_steps(run_dir: str) -> dict[int, list[int]]:
    t = open_input(run_dir).table
    return {int(r): sorted(int(s) for s in g["step"]) for r, g in t.groupby("rank")}


def wait_stored(run_dir: str, steps: int, world: int = 2, timeout: float = 30.0) -> None:
    """Until every rank's first ``steps`` steps are in the store (flushed by a pipeline tick)."""
    deadline = time.monotonic() + timeout
    while True:
        got = stored_steps(run_dir)
        if len(got) == world and all(len(s) >= steps for s in got.values()):
            return
        assert time.monotonic() < deadline, f"not flushed: {[(r, len(s)) for r, s in got.items()]}"
        time.sleep(0.1)


def steps_of(text: str) -> set[int]:
    """``103-150, 170`` -> the steps."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def analyze_json(run_dir: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "telemetry", "analyze", run_dir, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def store_warnings(stderr: str) -> list[str]:
    """The run store's failure lines (the first failure is logged; the rest only counted)."""
    return [line for line in stderr.splitlines() if "telemetry: run store:" in line]


def not_delivered(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "not delivered: store:" in line]


def store_counters(result, rank: int, summary: str) -> dict:
    """The run store's final counters (``shutdown()``'s return value), which the rank's shutdown
    warning states: ``N step record(s) not written to DIR (steps A-B): reason``."""
    final = result.ranks[rank]["final_stats"]["sinks"]["store"]
    m = re.search(r"store: (\d+) step record\(s\) not written to .* \(steps ([0-9, .-]+)\): ", summary)
    assert m and (int(m.group(1)), m.group(2)) == (final["dropped"], final["lost_steps"]), (summary, final)
    assert final["failures"] >= 1
    return final


def broken_until_the_end(tmp_path, healthy_job, fault_table, fault: str, breaker) -> None:
    """Hold the job before step FILL_AT with steps 0..FILL_AT-1 flushed, break the disk with
    ``breaker(disk)``, let it run to the end; check what the store kept against what the ranks say
    they lost."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        run_dir = os.path.join(disk, "run")
        with GlooJob(tmp_path, steps=STEPS, hold_at=FILL_AT, run_dir=run_dir) as job:
            job.wait_held()
            wait_stored(run_dir, FILL_AT)
            breaker(disk)
            job.release()
            result = job.wait()
        assert result.ok, result.describe()
        stored = stored_steps(run_dir)
        doc = analyze_json(run_dir)  # what was written before the disk broke is still read, by the CLI
        with contextlib.suppress(Exception):
            remount(disk, "rw")
    lost_text = []
    for r in range(2):
        assert len(store_warnings(result.stderr[r])) == 1, result.stderr[r][-3000:]  # logged once
        [summary] = not_delivered(result.stderr[r])  # and said once at shutdown, with the steps
        final = store_counters(result, r, summary)
        lost = steps_of(final["lost_steps"])
        kept = set(stored[r])
        assert set(range(FILL_AT)) <= kept, f"rank {r}: steps before the fault missing"
        assert kept | lost == set(range(STEPS)) and not kept & lost, (r, final, sorted(kept))
        assert final["dropped"] == len(lost) > 0
        lost_text.append(f"rank {r} steps {final['lost_steps']} ({final['dropped']} records)")
    assert doc["summary"]["ranks"] == 2 and doc["summary"]["last_step"] >= FILL_AT - 1
    ratio = result.ratio(healthy_job)
    assert ratio < NOT_SLOWED
    fault_table.add(
        "storage",
        fault,
        f"finished; step time {ratio:.2f}x healthy; shutdown {result.shutdown_s():.2f} s",
        f"{'; '.join(lost_text)}: counted in stats()['sinks']['store']['dropped'] with the steps in "
        "['lost_steps'], logged once per rank and in shutdown's warning; every step before is "
        "read by `telemetry analyze`",
    )


def test_disk_full_until_the_end_loses_exactly_the_steps_it_says(tmp_path, healthy_job, fault_table):
    broken_until_the_end(
        tmp_path,
        healthy_job,
        fault_table,
        f"the run directory's disk full (tmpfs, ENOSPC) from step {FILL_AT} to the end",
        fill,
    )


def test_read_only_run_directory_loses_exactly_the_steps_it_says(tmp_path, healthy_job, fault_table):
    broken_until_the_end(
        tmp_path,
        healthy_job,
        fault_table,
        f"the run directory's file system remounted read-only (EROFS) from step {FILL_AT} to the end",
        lambda disk: remount(disk, "ro"),
    )


def test_disk_full_for_a_while_then_freed_loses_nothing(tmp_path, healthy_job, fault_table):
    """The disk fills at step 100 and is freed some 60 steps later (ticks fail meanwhile): the store
    held what it could not write and writes it, in order, once space comes back."""
    steps = 2 * STEPS  # long enough that the job still runs when the disk is freed
    with tmpfs(tmp_path / "disk", "4m") as disk:
        run_dir = os.path.join(disk, "run")
        with GlooJob(tmp_path, steps=steps, hold_at=FILL_AT, run_dir=run_dir) as job:
            job.wait_held()
            wait_stored(run_dir, FILL_AT)
            filler = fill(disk)
            job.release()
            job.wait_step(0, FILL_AT + 60)
            time.sleep(0.6)  # a tick at least fails to write
            freed_at = job.at_step(0)
            os.remove(filler)
            result = job.wait()
        assert result.ok, result.describe()
        stored = stored_steps(run_dir)
        analyze_json(run_dir)
    assert freed_at < steps - 10, "the job ended before the disk was freed: nothing was tested"
    for r in range(2):
        during = result.ranks[r]["stats"]["sinks"]["store"]  # before shutdown: the failed writes counted
        assert during["failures"] >= 1 and during["write_failures"] >= 1 and during["dropped"] == 0, during
        final = result.ranks[r]["final_stats"]["sinks"]["store"]
        assert final["dropped"] == 0 and final["lost_steps"] == "" and final["unwritten"] == 0, final
        assert stored[r] == list(range(steps)), r
        assert len(store_warnings(result.stderr[r])) == 1 and not not_delivered(result.stderr[r])
    ratio = result.ratio(healthy_job)
    assert ratio < NOT_SLOWED
    failures = [result.ranks[r]["stats"]["sinks"]["store"]["failures"] for r in range(2)]
    fault_table.add(
        "storage",
        f"the run directory's disk full from step {FILL_AT} to about step {freed_at} (of {steps}), then freed",
        f"finished; step time {ratio:.2f}x healthy; {min(failures)}-{max(failures)} failed writes "
        "per rank, counted, logged once",
        "nothing: what the disk refused was held in memory (at most 2048 records per rank) and "
        "written, in order, once it had space again",
    )


def pad(path: str) -> None:
    """Append to ``path`` until the full disk refuses even a byte: its last page is full too."""
    _write_until_full(os.open(path, os.O_WRONLY | os.O_APPEND), (b"\n" * 512, b"\n"))


def _write_until_full(fd: int, chunks: tuple[bytes, ...]) -> None:
    """Write each chunk (largest first) until the disk refuses it (ENOSPC), then close ``fd``."""
    try:
        for chunk in chunks:
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)


def test_the_demo_launcher_survives_a_full_disk_for_its_rank_logs_and_run_directory(tmp_path, fault_table):
    """`telemetry demo` with its run directory (the rank logs in logs/, the run store) on a disk
    that fills mid-run: the job finishes, the launcher says what happened, and no process is left."""
    import psutil

    steps = 300
    with tmpfs(tmp_path / "disk", "4m") as disk:
        run_dir = os.path.join(disk, "run")
        out_path = tmp_path / "demo.out"
        with open(out_path, "w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "telemetry",
                    "demo",
                    "--run-dir",
                    run_dir,
                    "--ranks",
                    "2",
                    "--steps",
                    str(steps),
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
            )
        ranks = []
        try:
            deadline = time.monotonic() + 120
            while "median step" not in out_path.read_text():  # the ranks are training
                assert proc.poll() is None and time.monotonic() < deadline, out_path.read_text()
                time.sleep(0.1)
            ranks = [p for p in psutil.Process(proc.pid).children(recursive=True)]
            fill(disk)
            for r in range(2):
                pad(os.path.join(run_dir, "logs", f"rank-{r}.log"))
            t_full = time.monotonic()
            _, err = proc.communicate(timeout=240)
            shown = out_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        survivors = [p.pid for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err + shown, (err + shown)[-3000:]
    assert not survivors
    m = re.search(
        r"job completed in ([0-9.]+) s: every rank finished its 300 steps, but the run directory holds "
        r"fewer \(rank 0: (\d+), rank 1: (\d+)\): its disk is full \(0 KiB free\)",
        shown,
    )
    assert m, shown[-3000:]
    held = {r: int(m.group(2 + r)) for r in range(2)}
    assert 0 < min(held.values()) and max(held.values()) < steps
    fault_table.add(
        "storage",
        "`telemetry demo`: the disk of its run directory (rank logs, run store) full from "
        f"about step {min(held.values())} of {steps}",
        f"finished ({steps} steps, exit 0, {time.monotonic() - t_full:.1f} s after the disk filled); "
        "the launcher says 'every rank finished its 300 steps, but the run directory holds fewer "
        f"(rank 0: {held[0]}, rank 1: {held[1]}): its disk is full'; no traceback; every rank process "
        "ended",
        "; ".join(f"rank {r} steps {n}-{steps - 1} from the run store" for r, n in held.items())
        + ", and the rank logs' lines after the disk filled (each rank counted its loss; its log could "
        "not take the warning)",
    )


def test_disk_full_longer_than_the_memory_bound_drops_the_oldest_and_says_which(tmp_path, monkeypatch, fault_table):
    """In one process, the store's memory bound made small (20 records instead of 2,048): the disk is
    full for 120 steps; the store keeps the newest 20 it could not write, drops the older ones (and
    says which), and writes the kept ones and everything after once the disk has space again."""
    import telemetry
    from telemetry.store import writer

    monkeypatch.setattr(writer, "MAX_UNWRITTEN", 20)

    def steps(first: int, n: int) -> None:
        for i in range(first, first + n):
            with telemetry.step():
                with telemetry.phase("forward"):
                    telemetry.log(loss=float(i))
                    if i >= 100:  # a new shape of record while the disk is full: its shape line must survive
                        telemetry.log(lr=0.1)
            time.sleep(0.005)

    with tmpfs(tmp_path / "disk", "2m") as disk:
        run_dir = os.path.join(disk, "run")
        telemetry.init(run_dir=run_dir, job="bound", sinks=["store"], flush_interval_s=0.05, announce=False)
        try:
            steps(0, 40)
            wait_stored(run_dir, 40, world=1)
            filler = fill(disk)
            steps(40, 120)
            time.sleep(0.2)  # a few more ticks fail
            os.remove(filler)
            steps(160, 40)
            wait_stored(run_dir, 200 - telemetry.stats()["sinks"]["store"]["dropped"], world=1)
            live = telemetry.stats()["sinks"]["store"]
            # read while the job runs: from the tail itself, as after a crash (shutdown seals a segment)
            read = {"live": (set(stored_steps(run_dir)[0]), open_input(run_dir).table.set_index("step"))}
        finally:
            final = telemetry.shutdown()
        read["after shutdown"] = (set(stored_steps(run_dir)[0]), open_input(run_dir).table.set_index("step"))
    store = final["sinks"]["store"]
    lost = steps_of(store["lost_steps"])
    assert (live["dropped"], live["lost_steps"]) == (store["dropped"], store["lost_steps"])
    assert store["dropped"] == len(lost) >= 80 and max(lost) < 160
    for when, (kept, table) in read.items():
        assert kept | lost == set(range(200)) and not kept & lost, (when, store, sorted(kept))
        assert kept & set(range(max(lost) + 1, 160)), "the newest records held while the disk was full were written"
        # the records after the dropped ones decode, with the shape line a dropped record brought (step 100's)
        assert all(table.loc[s, "log.loss"] == float(s) for s in kept), when
        assert all(table.loc[s, "log.lr"] == 0.1 for s in kept if s >= 100) and 100 in lost, when
    fault_table.add(
        "storage",
        "the run directory's disk full for 120 steps with the store's memory bound at 20 "
        "records (in-process; default 2,048)",
        "training went on (one process, 200 steps)",
        f"steps {store['lost_steps']} ({store['dropped']} records, the oldest beyond the bound): counted "
        "in stats()['sinks']['store']['dropped'] with their steps in ['lost_steps']; the 20 newest "
        "held and every later step written once the disk had space",
    )
