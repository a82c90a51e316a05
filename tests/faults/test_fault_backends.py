"""Backends that fail while the 2-rank gloo job trains: an OTLP collector that refuses, never answers
or answers late, a Pushgateway that is down, a Prometheus port already taken.

Each job stops at step HOLD (outside the timed steps) while the test reads both ranks' /metrics, so
that the losses are seen where an operator sees them, then finishes. rank-N.json holds stats() just
before shutdown ("stats") and shutdown()'s final counters ("final_stats"); the warning each rank
prints at shutdown must say the same losses.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time

import pytest

from telemetry.pipeline.sinks import SinkStartError
from tests.faults.gloo_job import NOT_SLOWED, GlooJob
from tests.helpers.otlp_receiver import Blackhole, Receiver
from tests.helpers.servers import free_port, free_port_range, http_get

pytestmark = pytest.mark.slow

HOLD = 100  # the step before which both ranks wait while the test scrapes them
SHUTDOWN_BOUND_S = 5.0  # shutdown_timeout_s's default
SLACK_S = 0.5  # a 2-core machine shared with other tests: shutdown's own bookkeeping after its deadline


def dropped_total(port: int, sink: str) -> float | None:
    """train_telemetry_dropped_total{sink=...} as the rank's /metrics serves it (None: no such sample)."""
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    for line in text.splitlines():
        if line.startswith("train_telemetry_dropped_total{") and f'sink="{sink}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def held_run(
    tmp_path, init: dict, sink: str, until=lambda values: all(v and v > 0 for v in values), timeout_s: float = 20.0
):
    """Run the job with `init`; at HOLD, scrape both ranks' train_telemetry_dropped_total{sink} until
    `until(values)` (or timeout_s), then let it finish. Returns (result, the values scraped)."""
    base = free_port_range(2)
    with GlooJob(tmp_path, init={"prometheus_port": base, **init}, hold_at=HOLD) as job:
        job.wait_held()
        deadline = time.monotonic() + timeout_s
        while True:
            values = [dropped_total(base + r, sink) for r in range(2)]
            if until(values) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        job.release()
        result = job.wait()
    assert result.ok, result.describe()
    return result, values


def not_delivered(result, rank: int) -> str:
    """The part of the rank's shutdown warning about what was not delivered ('' when none)."""
    m = re.search(rf"telemetry: rank {rank}: not delivered: (.*?) \(see telemetry.shutdown", result.stderr[rank])
    return m.group(1) if m else ""


def spans_lost_at_shutdown(result, rank: int) -> int:
    m = re.search(r"otlp: (\d+) span\(s\) dropped", not_delivered(result, rank))
    return int(m.group(1)) if m else 0


def training(result, healthy, bound_s: float = SHUTDOWN_BOUND_S) -> str:
    ratio = result.ratio(healthy)
    assert len(result.ranks) == 2 and all(len(r["times"]) == 200 for r in result.ranks.values())
    assert ratio < NOT_SLOWED, f"step time {ratio:.2f}x healthy"
    assert result.shutdown_s() < bound_s + SLACK_S, f"shutdown took {result.shutdown_s():.2f} s"
    return f"finished; step time {ratio:.2f}x healthy; shutdown {result.shutdown_s():.2f} s (bound {bound_s:g} s)"


def spans_per_step(rank: int) -> int:
    # rank_step + forward, backward, optimizer + 4 all_reduce (2 weights, 2 biases); rank 0 adds the root
    return 8 + (rank == 0)


@pytest.mark.parametrize("kind", ["refused", "blackholed"])
def test_a_dead_otlp_collector_costs_only_its_spans(tmp_path, healthy_job, fault_table, kind):
    hole = Blackhole() if kind == "blackholed" else None
    url = hole.url if hole else f"http://127.0.0.1:{free_port()}"  # nobody listens there
    if hole:
        hole.__enter__()
    try:
        result, scraped = held_run(
            tmp_path, {"sinks": ["store", "prometheus", "otlp"], "otlp_endpoint": url, "otlp_timeout_s": 1.0}, "otlp"
        )
    finally:
        if hole:
            hole.__exit__(None, None, None)
    trained = training(result, healthy_job)
    rows = []
    for rank, r in sorted(result.ranks.items()):
        live, otlp = r["stats"]["sinks"]["otlp"], r["final_stats"]["sinks"]["otlp"]
        assert r["final_stats"]["sinks"]["store"]["dropped"] == 0  # the other sinks carried on
        assert live["spans_dropped"]["export_failed"] > 0 and live["last_error"]  # failing while it trained
        assert 0 < scraped[rank] <= live["dropped"]  # and exported as it happened
        # every span of every step was built, none delivered, each dropped for a stated reason
        assert otlp["spans_accepted"] == otlp["dropped"] == 200 * spans_per_step(rank)
        assert otlp["spans_delivered"] == 0 and otlp["spans_pending"] == 0
        assert spans_lost_at_shutdown(result, rank) == otlp["dropped"], not_delivered(result, rank)
        why = otlp["spans_dropped"]
        rows.append(
            f"rank {rank}: {otlp['dropped']} ({why['export_failed']} export failed, "
            f"{why['closed_before_delivery']} still queued at shutdown; {int(scraped[rank])} already in "
            f'train_telemetry_dropped_total{{sink="otlp"}} at step {HOLD})'
        )
    from telemetry.analysis.inputs.load import open_input

    steps = open_input(result.run_dir).table
    assert steps.groupby("rank")["step"].nunique().tolist() == [200, 200]  # the store has every step
    fault_table.add(
        "backends",
        f"OTLP collector {kind} ("
        + ("nobody listens on the port" if hole is None else "accepts connections, never answers")
        + "; otlp_timeout_s 1)",
        trained,
        "every span of steps 0-199, none delivered, all counted in stats()['sinks']['otlp'] and the shutdown "
        "warning: " + "; ".join(rows) + "; the store and /metrics have every step",
    )


def test_a_slow_otlp_collector_slows_nothing(tmp_path, healthy_job, fault_table):
    with Receiver(delay_s=2.0) as rcv:  # each export answered after 2 s
        result, scraped = held_run(
            tmp_path,
            {"sinks": ["store", "prometheus", "otlp"], "otlp_endpoint": rcv.url},
            "otlp",
            until=lambda values: len(rcv.spans) > 0,
        )
        time.sleep(2.5)  # an export still in flight when shutdown gave up is answered and counted here
        received = {r: sum(1 for s in rcv.spans if s["resource"]["training.rank"] == r) for r in (0, 1)}
        requests = rcv.requests
    trained = training(result, healthy_job)
    assert scraped == [0.0, 0.0]  # nothing lost while it is merely slow
    parts = []
    for rank, r in sorted(result.ranks.items()):
        otlp = r["final_stats"]["sinks"]["otlp"]
        total = 200 * spans_per_step(rank)
        late = otlp["spans_dropped"]["closed_before_delivery"]
        assert otlp["spans_accepted"] == total and otlp["spans_pending"] == 0
        assert otlp["spans_delivered"] + late == total and otlp["dropped"] == late  # nothing else lost
        assert spans_lost_at_shutdown(result, rank) == late, not_delivered(result, rank)
        # what the collector got: every span counted delivered, and perhaps the batch in flight when
        # shutdown's deadline came (counted as undelivered: its answer had not come)
        assert otlp["spans_delivered"] <= received[rank] <= total
        parts.append(
            f"rank {rank}: {otlp['spans_delivered']} of {total} spans delivered"
            + (
                f", {late} still in flight or queued at shutdown's deadline, counted as dropped "
                f"(closed_before_delivery; the collector got {received[rank] - otlp['spans_delivered']} "
                "of them after the deadline)"
                if late
                else ""
            )
        )
    fault_table.add(
        "backends",
        f"OTLP collector slow (answers each export after 2 s; {requests} exports)",
        trained,
        "; ".join(parts) + "; nothing while training ran",
    )


def test_a_dead_pushgateway_costs_only_its_pushes(tmp_path, healthy_job, fault_table):
    dead = f"http://127.0.0.1:{free_port()}"
    result, scraped = held_run(tmp_path, {"pushgateway_url": dead, "push_interval_s": 0.5}, "pushgateway")
    trained = training(result, healthy_job)
    failed, seen = [], []
    for rank, r in sorted(result.ranks.items()):
        live, prom = r["stats"]["sinks"]["prometheus"], r["final_stats"]["sinks"]["prometheus"]
        assert live["push_failures"] >= scraped[rank] > 0  # counted and exported as it happened
        assert prom["pushes"] == 0 and prom["push_failures"] > live["push_failures"]  # the final push failed too
        assert prom["dropped"] == 0 and r["final_stats"]["sinks"]["store"]["dropped"] == 0
        assert result.stderr[rank].count(f"push to {dead} failed") == 1  # logged once, then counted
        failed.append(str(prom["push_failures"]))
        seen.append(str(int(scraped[rank])))
    fault_table.add(
        "backends",
        "Pushgateway down (nobody listens on its port; push_interval_s 0.5, its minimum)",
        trained,
        f"every push, the final one at shutdown included: {' + '.join(failed)} (ranks 0 + 1), "
        f"counted in stats()['sinks']['prometheus']['push_failures'] and train_telemetry_dropped_total"
        f'{{sink="pushgateway"}} ({" + ".join(seen)} by step {HOLD}); logged once per rank; '
        "/metrics and the store have every step",
    )


def test_a_taken_prometheus_port(tmp_path, healthy_job, fault_table):
    """A previous job still holds both ranks' ports: each rank serves on its next own port (port + 2,
    the node's local ranks being 2), once warned, and the run's file_sd targets list what is served.
    With strict=True both ranks' init fails instead, saying which port and what to do."""
    base = free_port_range(4)
    blockers = []
    try:
        for r in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", base + r))
            s.listen()
            blockers.append(s)
        with GlooJob(tmp_path / "fallback", init={"prometheus_port": base}, hold_at=HOLD) as job:
            job.wait_held()
            deadline = time.monotonic() + 10  # the held steps reach /metrics within a pipeline tick or two
            while True:
                pages = {r: http_get(f"http://127.0.0.1:{base + 2 + r}/metrics").decode() for r in range(2)}
                if all(f"}} {HOLD}.0\n" in p for p in pages.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            job.release()
            result = job.wait()
        assert result.ok, result.describe()
        with GlooJob(tmp_path / "strict", init={"prometheus_port": base, "strict": True}) as job:
            strict = job.wait(timeout=60)
    finally:
        for s in blockers:
            s.close()
    trained = training(result, healthy_job)
    for r in range(2):
        assert result.ranks[r]["stats"]["sinks"]["prometheus"]["port"] == base + 2 + r
        [line] = [ln for ln in pages[r].splitlines() if ln.startswith("train_steps_total{")]
        assert 'job="faults"' in line and f'rank="{r}"' in line and line.endswith(f" {HOLD}.0")
        [entry] = json.load(open(os.path.join(result.run_dir, "prometheus", f"rank-{r:05d}.json")))
        assert entry["targets"] == [f"127.0.0.1:{base + 2 + r}"]  # file_sd lists the port served
        assert result.stderr[r].count(f"port {base + r} is in use; serving /metrics on 127.0.0.1:{base + 2 + r}") == 1
    merged = json.load(open(os.path.join(result.run_dir, "prometheus_targets.json")))
    assert sorted(t for g in merged for t in g["targets"]) == [f"127.0.0.1:{base + 2}", f"127.0.0.1:{base + 3}"]
    # strict: init raises SinkStartError naming the port; the process exits before training
    assert strict.returncodes == [1, 1] and not strict.ranks
    for r in range(2):
        assert f"{SinkStartError.__name__}: prometheus_port: 127.0.0.1:{base + r} is in use" in strict.stderr[r]
    fault_table.add(
        "backends",
        "Prometheus port taken (a socket held on both ranks' ports)",
        f"{trained}; each rank served on port + 2 with one warning, and prometheus_targets.json "
        "lists the ports served; with strict=True init raised SinkStartError ('prometheus_port: "
        "127.0.0.1:PORT is in use ...') on both ranks before the first step",
        "nothing",
    )
