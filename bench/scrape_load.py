"""A 10,000-rank scrape load on loopback: what one Prometheus pays per 1,000 ranks.

One server process answers every simulated rank (``/metrics/<rank>`` on a few ports of 127.0.0.1,
asyncio, keep-alive) with the exposition the Prometheus sink renders for a demo-shaped rank
(bench/series.py's RankExporter: phases forward, backward, optimizer and the data wait, one
all_reduce in the world group, a logged loss, tokens, samples, host readings; 183 series at
``metrics_level`` full, 88 at job), its own rank, local rank and node in the labels (8 ranks a node)
and its counters advancing every scrape interval (the exporter fed 30 more steps per interval). The
bodies are sent uncompressed (a rank's exporter gzips when asked; loopback does not need it).

A real Prometheus (Debian's 2.42, on 127.0.0.1) scrapes them from a file_sd file as the shipped
prometheus.yml does (honor_labels; each target's ``__metrics_path__``), every ``--interval`` s (15). Per
rank count, two windows of ``--window`` s once every target has been scraped twice: scrapes only,
then, after a reload that loads the shipped recording and alert rules (evaluated every 15 s), scrapes
and rules. Read per window: the Prometheus process's CPU seconds (/proc), its resident memory, the
head series and the samples appended per second, the scrape durations (``scrape_duration_seconds``
of every target: mean, p99, max), targets not up, the scrapes each target got in the window (``up``'s
samples), the rule groups' evaluation time (``prometheus_rule_group_last_duration_seconds``, read every
few seconds), their missed iterations, and the slowest rules (``/api/v1/rules``' evaluationTime).

A count is "borne" when every target was up and scraped every interval (one scrape short at most, the
window's edges), and every rule group evaluated within its 15 s interval without missing one:
otherwise it is reported as missed, with the figures.

    python bench/scrape_load.py [--ranks 1000,10000] [--level full] [--interval 15] [--window 90]
                                [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

RULES = os.path.join(ROOT, "telemetry", "dashboards", "prometheus")
JOB = "scale"
PER_NODE = 8
PORTS = 8  # listening ports of the one server process (targets spread over them)
EPOCHS = 96  # distinct expositions, one per scrape interval (24 min at 15 s; the last one is held after)
RULE_INTERVAL_S = 15.0  # the shipped rule groups' evaluation interval
RECORDS = "training-telemetry.records"  # the recording rules' groups: training-telemetry.records.steps, ...
SECTION = "Prometheus scrape load at 1,000 and 10,000 ranks (bench/scrape_load.py)"


# ---- the server: many ranks' expositions from one process ------------------------------------------
def templates(level: str, interval: float) -> list[bytes]:
    """The rank's exposition at each scrape interval, with its rank, local rank and node as @R@, @L@,
    @N@ (filled in per target)."""
    from series import RankExporter

    exp = RankExporter(level, rank=1, job=JOB)
    node = exp.sink.labels["node"]
    out = []
    try:
        for _ in range(EPOCHS):
            exp.feed(max(1, int(interval / 0.5)))  # 0.5 s steps
            text = exp.render()
            text = re.sub(r'(?<![a-z_])rank="1"', 'rank="@R@"', text)
            text = text.replace('local_rank="0"', 'local_rank="@L@"').replace(f'node="{node}"', 'node="@N@"')
            out.append(text.encode())
    finally:
        exp.close()
    return out


def placement(rank: int) -> tuple[str, str]:
    return str(rank % PER_NODE), f"node{rank // PER_NODE:05d}"


def serve(ranks: int, level: str, interval: float, ports: list[int], targets_file: str) -> None:
    bodies = templates(level, interval)
    labels = [(str(r).encode(), *(p.encode() for p in placement(r))) for r in range(ranks)]
    t0 = time.monotonic()
    header = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: %d\r\n\r\n"
    missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # headers: none needed
                parts = line.split(b" ")
                path = parts[1] if len(parts) > 1 else b""
                rank = path.rsplit(b"/", 1)[-1]
                if not path.startswith(b"/metrics/") or not rank.isdigit() or int(rank) >= ranks:
                    writer.write(missing)
                else:
                    r, lr, node = labels[int(rank)]
                    epoch = min(int((time.monotonic() - t0) / interval), EPOCHS - 1)
                    body = bodies[epoch].replace(b"@R@", r).replace(b"@L@", lr).replace(b"@N@", node)
                    writer.write(header % len(body) + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        servers = [await asyncio.start_server(handle, "127.0.0.1", p, backlog=4096) for p in ports]
        entries = []
        for r in range(ranks):
            lr, node = placement(r)
            entries.append(
                {
                    "targets": [f"127.0.0.1:{ports[r % len(ports)]}"],
                    "labels": {
                        "job": JOB,
                        "rank": str(r),
                        "local_rank": lr,
                        "node": node,
                        "instance": f"{node}:{9464 + int(lr)}",
                        "__metrics_path__": f"/metrics/{r}",
                    },
                }
            )
        tmp = targets_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, targets_file)
        print("ready", flush=True)
        await asyncio.gather(*(s.serve_forever() for s in servers))

    asyncio.run(main())


# ---- the measurement ----------------------------------------------------------------------------
def get(url: str, timeout: float = 30.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def query(url: str, expr: str) -> list[dict]:
    doc = json.loads(get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    return doc["data"]["result"]


def scalar(url: str, expr: str) -> float | None:
    res = query(url, expr)
    return float(res[0]["value"][1]) if res else None


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) * 1024
    return float("nan")


def own_metrics(url: str) -> dict[str, float]:
    """Prometheus's own /metrics, as {sample with labels: value} for the few read here."""
    out = {}
    for line in get(f"{url}/metrics").decode().splitlines():
        if line.startswith(
            (
                "prometheus_rule_group_last_duration_seconds",
                "prometheus_rule_group_iterations_missed_total",
                "prometheus_tsdb_head_series ",
                "go_memstats_heap_inuse_bytes ",
                "prometheus_tsdb_head_samples_appended_total",
            )
        ):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def config(targets_file: str, interval: float, rules: bool) -> str:
    rule_files = [os.path.join(RULES, "recording.rules.yml"), os.path.join(RULES, "alerts.rules.yml")]
    doc = {
        "global": {
            "scrape_interval": f"{interval:g}s",
            "evaluation_interval": "15s",
            "scrape_timeout": f"{min(10.0, interval):g}s",
        },
        "scrape_configs": [
            {"job_name": "training", "honor_labels": True, "file_sd_configs": [{"files": [targets_file]}]}
        ],
    }
    if rules:
        doc["rule_files"] = rule_files
    return json.dumps(doc)  # JSON is YAML


def wait_until(what: str, check, timeout: float):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as exc:
            last = exc
        if last is True or (last and not isinstance(last, Exception)):
            return last
        time.sleep(1.0)
    raise RuntimeError(f"timed out waiting for {what} (last: {last!r})")


def window(url: str, pid: int, seconds: float, interval: float) -> dict:
    """One measurement window: the process's CPU and memory, and what Prometheus says of its scrapes
    and rule groups over it."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    m0 = own_metrics(url)
    rule_max: dict[str, float] = {}
    rule_sum: dict[str, list[float]] = {}
    load0 = os.getloadavg()[0]
    while time.monotonic() - t0 < seconds:
        time.sleep(min(5.0, max(0.0, seconds - (time.monotonic() - t0))))
        for k, v in own_metrics(url).items():
            if k.startswith("prometheus_rule_group_last_duration_seconds"):
                group = re.search(r'rule_group="[^"]*;([^"]+)"', k).group(1)
                rule_max[group] = max(rule_max.get(group, 0.0), v)
                rule_sum.setdefault(group, []).append(v)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    m1 = own_metrics(url)
    w = f"{int(seconds)}s"
    sel = f'job="{JOB}"'
    missed = sum(
        v - m0.get(k, 0.0) for k, v in m1.items() if k.startswith("prometheus_rule_group_iterations_missed_total")
    )
    rules = json.loads(get(f"{url}/api/v1/rules"))["data"]["groups"]
    per_rule = sorted(((r.get("evaluationTime", 0.0), r["name"]) for g in rules for r in g["rules"]), reverse=True)
    return {
        "cpu_cores": (c1 - c0) / (t1 - t0),
        "rss": rss_bytes(pid),
        "heap": m1.get("go_memstats_heap_inuse_bytes", float("nan")),
        "series": m1.get("prometheus_tsdb_head_series", float("nan")),
        "samples_per_s": sum(
            v - m0.get(k, 0.0) for k, v in m1.items() if k.startswith("prometheus_tsdb_head_samples_appended_total")
        )
        / (t1 - t0),
        "scrape_mean": scalar(url, f"avg(avg_over_time(scrape_duration_seconds{{{sel}}}[{w}]))"),
        "scrape_p99": scalar(url, f"quantile(0.99, max_over_time(scrape_duration_seconds{{{sel}}}[{w}]))"),
        "scrape_max": scalar(url, f"max(max_over_time(scrape_duration_seconds{{{sel}}}[{w}]))"),
        "down": scalar(url, f"count(min_over_time(up{{{sel}}}[{w}]) == 0)") or 0.0,
        "up": scalar(url, f"count(up{{{sel}}} == 1)") or 0.0,
        # scrapes of each target within the window (window / interval when every one was kept)
        "scrapes_min": scalar(url, f"min(count_over_time(up{{{sel}}}[{w}]))") or 0.0,
        "scrapes_mean": scalar(url, f"avg(count_over_time(up{{{sel}}}[{w}]))") or 0.0,
        "slowest_rules": per_rule,
        "rules_max": rule_max,
        "rules_mean": {g: sum(v) / len(v) for g, v in rule_sum.items()},
        "rules_missed": missed,
        "load": (load0 + os.getloadavg()[0]) / 2,
    }


@contextlib.contextmanager
def group(cmd: list[str], **kw):
    """A process in a group of its own, stopped with its group at the end."""
    proc = subprocess.Popen(cmd, start_new_session=True, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run(ranks: int, level: str, interval: float, seconds: float) -> dict:
    from tests.helpers.servers import free_port, free_port_range

    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed (Debian package prometheus)")
    base = free_port_range(PORTS)
    ports = [base + i for i in range(PORTS)]
    with tempfile.TemporaryDirectory() as tmp:
        targets = os.path.join(tmp, "targets.json")
        serve_cmd = [sys.executable, __file__, "--serve", str(ranks), "--level", level, "--interval", str(interval)]
        serve_cmd += ["--ports", ",".join(map(str, ports)), "--targets", targets]
        with group(serve_cmd, stdout=subprocess.PIPE, text=True) as server:
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError("the rank server did not start")
            cfg = os.path.join(tmp, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write(config(targets, interval, rules=False))
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [
                binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ]
            with open(os.path.join(tmp, "prometheus.log"), "w") as log, group(cmd, stdout=log, stderr=log) as prom:
                t_start = time.monotonic()
                try:
                    wait_until("Prometheus to be ready", lambda: prom.poll() is None and get(f"{url}/-/ready", 2), 60)
                except RuntimeError:
                    with open(os.path.join(tmp, "prometheus.log")) as f:
                        print(f.read()[-3000:], file=sys.stderr)
                    raise
                # every target scraped, then two more intervals: each series created, the head settled
                wait_until(
                    f"all {ranks} targets up",
                    lambda: (scalar(url, f'count(up{{job="{JOB}"}} == 1)') or 0) >= ranks,
                    max(120, 6 * interval + ranks / 50),
                )
                up_after = time.monotonic() - t_start
                time.sleep(2 * interval)
                scrapes = window(url, prom.pid, seconds, interval)
                with open(cfg, "w") as f:
                    f.write(config(targets, interval, rules=True))
                urllib.request.urlopen(urllib.request.Request(f"{url}/-/reload", method="POST"), timeout=60).read()
                wait_until(
                    "the recording rules' first evaluation over every rank",
                    lambda: (scalar(url, f'job:train_ranks:count{{job="{JOB}"}}') or 0) >= ranks,
                    6 * interval,
                )
                rules = window(url, prom.pid, seconds, interval)
                recorded = {
                    "job_rank": scalar(url, f'count(job_rank:train_step_duration_seconds:mean_rate1m{{job="{JOB}"}})'),
                    "job_node": scalar(url, f'count(job_node:train_ranks:count{{job="{JOB}"}})'),
                }
    return {
        "ranks": ranks,
        "level": level,
        "interval": interval,
        "window": seconds,
        "up_after_s": up_after,
        "scrapes": scrapes,
        "rules": rules,
        "recorded": recorded,
    }


def borne(r: dict) -> tuple[bool, str]:
    """Whether Prometheus kept up, and if not, why."""
    why = []
    for name in ("scrapes", "rules"):
        w = r[name]
        if w["down"] or w["up"] < r["ranks"]:
            why.append(f"{name}: {int(w['down'])} targets down, {int(w['up'])} of {r['ranks']} up")
        if w["scrapes_min"] < r["window"] / r["interval"] - 1:
            why.append(f"{name}: a target scraped {int(w['scrapes_min'])} times in {r['window']:g} s")
    if r["rules"]["rules_missed"]:
        why.append(f"{int(r['rules']['rules_missed'])} rule evaluations missed")
    slow = {g: v for g, v in r["rules"]["rules_max"].items() if v >= RULE_INTERVAL_S}
    for g, v in sorted(slow.items()):
        why.append(f"group {g.rsplit('.', 1)[-1]} took up to {v:.1f} s of its {RULE_INTERVAL_S:g} s interval")
    return not why, "; ".join(why)


def table(results: list[dict]) -> list[str]:
    rows = [
        "| ranks | metrics_level | head series | samples/s | Prometheus CPU, scrapes only (cores) | with the rules "
        "(cores) | per 1,000 ranks, with the rules (cores) | resident memory (GiB) | per 1,000 ranks (GiB) | "
        "scrape duration mean / p99 / max (ms) | slowest records group's evaluation, mean / max (s) | alert groups, "
        "max (s) | borne |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s, w = r["scrapes"], r["rules"]
        k = r["ranks"] / 1000
        # the recording rules are in groups of their own (training-telemetry.records.*), evaluated side by
        # side: the slowest one's mean and maximum
        recs = [g for g in w["rules_max"] if g.startswith(RECORDS)]
        rec_mean = max((w["rules_mean"][g] for g in recs), default=float("nan"))
        rec_max = max((w["rules_max"][g] for g in recs), default=float("nan"))
        alerts = max((v for g, v in w["rules_max"].items() if g not in recs), default=float("nan"))
        ok, why = borne(r)
        rows.append(
            f"| {r['ranks']:,} | {r['level']} | {w['series']:,.0f} | {w['samples_per_s']:,.0f} | "
            f"{s['cpu_cores']:.2f} | {w['cpu_cores']:.2f} | {w['cpu_cores'] / k:.3f} | {w['rss'] / 2**30:.2f} | "
            f"{w['rss'] / 2**30 / k:.3f} | {w['scrape_mean'] * 1e3:.1f} / {w['scrape_p99'] * 1e3:.1f} / "
            f"{w['scrape_max'] * 1e3:.0f} | {rec_mean:.2f} / {rec_max:.2f} | {alerts:.3f} | {'yes' if ok else 'missed: ' + why} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="1000,10000", help="rank counts to run, comma-separated")
    ap.add_argument("--level", default="full", help="metrics_level of the ranks' expositions (full, phase, job)")
    ap.add_argument("--levels", help="metrics_level per rank count, comma-separated (else --level for all)")
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--window", type=float, default=90.0, help="seconds of each measurement window")
    ap.add_argument("--out")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--targets", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.level, args.interval, [int(p) for p in args.ports.split(",")], args.targets)
        return
    counts = [int(n) for n in args.ranks.split(",")]
    levels = args.levels.split(",") if args.levels else [args.level] * len(counts)
    results = []
    for n, level in zip(counts, levels):
        t0 = time.monotonic()
        r = run(n, level, args.interval, args.window)
        r["wall_s"] = time.monotonic() - t0
        results.append(r)
        print(json.dumps(r, default=str), flush=True)
    command = f"python bench/scrape_load.py --ranks {args.ranks} --interval {args.interval:g} --window {args.window:g}"
    command += f" --levels {args.levels}" if args.levels else f" --level {args.level}"
    loads = ", ".join(f"{r['rules']['load']:.1f}" for r in results)
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} ({os.cpu_count()} cores, Prometheus "
            f"{_version()}), `{command}`: one server process answering every simulated rank's /metrics on "
            "127.0.0.1 with the exposition the Prometheus sink renders for a demo-shaped rank (counters advancing "
            f"every interval, 8 ranks a node), scraped every {args.interval:g} s from file_sd; per rank count, "
            f"{args.window:g} s of scrapes only, then {args.window:g} s with the shipped recording and alert rules "
            "(every 15 s). CPU is the Prometheus process's (from /proc), memory its resident set at the window's "
            "end, the rest Prometheus's own metrics. The load average over the windows (other work shared the "
            f"machine): {loads}.",
            "",
            *table(results),
            "",
            "Per rank count, all targets were up "
            + ", ".join(f"{r['up_after_s']:.0f} s after start ({r['ranks']:,})" for r in results)
            + "; the recording rules held a series per rank ("
            + ", ".join(f"{r['recorded']['job_rank']:,.0f}" for r in results)
            + ") and per node ("
            + ", ".join(f"{r['recorded']['job_node']:,.0f}" for r in results)
            + ").",
            "",
            f"Slowest rules at {results[-1]['ranks']:,} ranks ({results[-1]['level']}), seconds of one evaluation: "
            + ", ".join(f"`{name}` {sec:.2f}" for sec, name in results[-1]["rules"]["slowest_rules"][:6])
            + ".",
        ]
    )
    print(body)
    if args.out:
        from results import update_section

        update_section(args.out, SECTION, body)
    if not all(borne(r)[0] for r in results):
        sys.exit(1)


def _version() -> str:
    try:
        out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout + out.stderr).split()[2]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    main()
