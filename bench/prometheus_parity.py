"""The live view from Prometheus against the run store (issue 28's "done when"): a live 4-rank demo
with a 2x backward straggler on rank 1, scraped every 2 s by a real Prometheus; every ``--every``
seconds `telemetry analyze --prometheus URL --job J --json` is run (a subprocess, as a script or CI
would) and the dashboard's page is drawn (Streamlit's AppTest on the app `telemetry dashboard
--prometheus` serves), both with the default windows (15 s). Reported: what each said when, the time
until each names rank 1 in ``backward`` at warning or above, and, once the demo is stopped, the goodput
split from Prometheus against the run store's (the whole job both ways). Then the parity test's three
faults (tests/integration/test_prometheus_parity.py: a straggler, a data stall, a slow link; 2 s windows,
1 s scrapes), each read both ways: the findings, the onsets in windows apart, the goodput points apart.

    python bench/prometheus_parity.py [--minutes 4] [--every 15] [--no-faults] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from results import update_section  # noqa: E402 - after the sys.path set-up above

from telemetry.analysis.detectors import WAITS  # noqa: E402 - after the sys.path set-up above
from tests.helpers.runs import stop_demo  # noqa: E402 - after the sys.path set-up above
from tests.helpers.servers import free_port_range, prometheus, training_scrape_config  # noqa: E402 - after the sys.path set-up above

JOB = "live-parity"
REST = ("communication", "straggler_wait", "checkpoint", "other")  # the store's parts that WAITS holds
NAMED = ("straggler", [1], "backward")


def cli(url: str) -> dict:
    """What `telemetry analyze --prometheus` says now: collecting, or the acted-on findings."""
    args = [sys.executable, "-m", "telemetry", "analyze", "--prometheus", url, "--job", JOB, "--json"]
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return {"error": p.stderr.strip()[-300:]}
    doc = json.loads(p.stdout)
    acted = [(f["kind"], f["ranks"], f["phase"]) for f in doc["findings"] if f["severity"] in ("warning", "critical")]
    return {"collecting": doc["summary"].get("collecting"), "findings": acted}


def page(url: str) -> dict:
    """What the dashboard's page says now: its info lines and the findings' titles."""
    from streamlit.testing.v1 import AppTest

    from telemetry.dashboards.serve import APP

    os.environ["TELEMETRY_DASHBOARD_PROMETHEUS"], os.environ["TELEMETRY_DASHBOARD_JOB"] = url, JOB
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    return {
        "exception": [e.value for e in at.exception],
        "info": [i.value for i in at.info],
        "titles": [e.label for e in at.expander],
    }


def names_it(said: dict) -> bool:
    return list(NAMED) in [list(f) for f in said.get("findings", [])]


def page_names_it(said: dict) -> bool:
    return any("straggler - rank 1 - phase backward" in t for t in said["titles"])


def faults() -> str:
    """The parity test's three faults, each read both ways, as a table."""
    from tests.helpers.prometheus_parity import both_ways, parity, scraped_demo
    from tests.integration.test_prometheus_parity import FAULTS, INJECTED, WINDOW_S

    rows = []
    for param in FAULTS:
        inject, steps, expected = param.values
        with tempfile.TemporaryDirectory() as d:
            with scraped_demo(pathlib.Path(d), inject, steps=steps) as (url, run_dir, end, _):
                store, prom, run = both_ways(url, run_dir, end, WINDOW_S)
            p = parity(store, prom)
        named = [f for f in p["store"] if f[0] in INJECTED], [f for f in p["prometheus"] if f[0] in INJECTED]
        onset = next((o for o in p["onsets"] if o["finding"] == expected), None)
        pts = p["goodput_points_apart"]
        a, b = p["goodput_store"], p["goodput_prometheus"]
        rest = 100 * (b.get(WAITS, 0.0) - sum(a.get(k, 0.0) for k in REST))
        rows.append(
            f"| `{inject}`, {steps} steps | {named[0]} | {named[1]} | "
            + (f"{onset['store_step']} / {onset['prometheus_step']} ({onset['windows_apart']})" if onset else "-")
            + f" | {pts.get('compute', 0):+.1f} | {pts.get('data_wait', 0):+.1f} | {pts.get('between_steps', 0):+.1f}"
            f" | {rest:+.1f} |"
        )
        print(rows[-1], flush=True)
    return (
        "The parity test's faults, each a real 4-rank demo scraped every 1 s, read with 2 s windows (acted-on findings "
        "of the kinds a fault gives; onset: the store's first step / Prometheus's (windows apart; the target is one); "
        "goodput: Prometheus minus store, points):\n\n"
        f"| fault | store | Prometheus | onset | compute | data wait | between steps | {WAITS} |\n"
        "|---|---|---|---|---:|---:|---:|---:|\n" + "\n".join(rows)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=4.0, help="how long the demo runs at most")
    ap.add_argument("--every", type=float, default=15.0, help="seconds between reads")
    ap.add_argument("--no-faults", action="store_true", help="the live demo only, not the three faults")
    ap.add_argument("--out", default=None, help="write the section of bench/RESULTS.md")
    args = ap.parse_args()
    from telemetry.analysis import analyze_run
    from telemetry.analysis.inputs.prometheus.live import open_live
    from telemetry.analysis.run import analyze_live

    timeline = []
    first = {"cli": None, "page": None}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        runs = tmp / "runs"
        run_dir = runs / JOB
        with prometheus(tmp, training_scrape_config(runs / "prometheus_targets", every="2s")) as prom:
            env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(free_port_range(4))}
            demo = subprocess.Popen(
                [sys.executable, "-m", "telemetry", "demo", "--ranks", "4", "--steps", "100000"]
                + ["--inject", "straggler:rank=1,phase=backward,factor=2", "--run-dir", str(run_dir), "--json"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            t0 = time.time()
            try:
                prom.wait_for(f'train_steps_total{{job="{JOB}"}}', lambda r: len(r) == 4, timeout=120)
                scraped = time.time() - t0
                k = 1
                while time.time() - t0 < args.minutes * 60:
                    time.sleep(max(0.0, t0 + k * args.every - time.time()))
                    k += 1
                    at = time.time() - t0
                    c, p = cli(prom.url), page(prom.url)
                    timeline.append((round(at), c, p))
                    print(f"{at:5.0f} s  cli: {c}\n         page: info {p['info']}, titles {p['titles']}", flush=True)
                    if first["cli"] is None and names_it(c):
                        first["cli"] = round(at)
                    if first["page"] is None and page_names_it(p):
                        first["page"] = round(at)
                    if first["cli"] is not None and first["page"] is not None:
                        break
            finally:
                stop_demo(demo, run_dir)
            end = time.time()
            store = analyze_run(str(run_dir))
            live = analyze_live(open_live(prom.url, JOB, now=end))
    a, b = store.summary.get("goodput") or {}, live.summary.get("goodput") or {}
    rows = [
        (k, f"{a.get(k, 0.0):.1%}", f"{b.get(k, 0.0):.1%}", f"{100 * (b.get(k, 0.0) - a.get(k, 0.0)):+.1f}")
        for k in ("compute", "data_wait", "between_steps")
    ]
    rest = sum(a.get(k, 0.0) for k in REST)
    rows.append(
        (
            f"{WAITS} (store: {' + '.join(REST)})",
            f"{rest:.1%}",
            f"{b.get(WAITS, 0.0):.1%}",
            f"{100 * (b.get(WAITS, 0.0) - rest):+.1f}",
        )
    )
    rows += [(f"store's {k}", f"{a.get(k, 0.0):.1%}", "-", "-") for k in REST]
    table = "\n".join(f"| {k} | {x} | {y} | {d} |" for k, x, y, d in rows)
    stragglers = [
        (f.kind, f.ranks, f.phase, f.severity, round(f.slowdown, 3)) for f in live.findings if f.kind == "straggler"
    ]
    stored = [
        (f.kind, f.ranks, f.phase, f.severity, round(f.slowdown, 3)) for f in store.findings if f.kind == "straggler"
    ]
    collecting = [
        f"{at} s: CLI {'collecting ' + str(c['collecting']['have']) + ' of 8' if c.get('collecting') else 'done collecting'}, "
        f"page {'collecting' if any('collecting' in i for i in p['info']) else 'findings'}"
        for at, c, p in timeline
        if at <= 130
    ]
    body = (
        f"`python bench/prometheus_parity.py --minutes {args.minutes:g} --every {args.every:g} --out bench/RESULTS.md`: "
        "a live 4-rank `telemetry demo` with `--inject straggler:rank=1,phase=backward,factor=2`, scraped every 2 s "
        "by a real Prometheus; every "
        f"{args.every:g} s `telemetry analyze --prometheus URL --job J --json` (a subprocess) and the dashboard's page "
        "(AppTest on the served app), default windows (15 s). 2 cores, the demo's 4 ranks on them. Target: rank 1 and "
        "`backward` within 3 minutes from both; collecting said in the first minute; goodput within 5 points.\n\n"
        f"- Ranks first scraped {scraped:.0f} s after the demo started. Rank 1 / backward named at warning or above: "
        f"CLI at {first['cli']} s, page at {first['page']} s after the start "
        f"({'met' if first['cli'] and first['page'] and max(first['cli'], first['page']) <= 180 else 'MISSED'}).\n"
        f"- What each said, to 130 s: {'; '.join(collecting)}.\n"
        f"- Straggler findings at the end, from Prometheus: {stragglers}; from the run store: {stored} "
        "(kind, ranks, phase, severity, slowdown: the window means do not hide the excess behind peers' hiccups, "
        "so the what-if reads higher).\n\n"
        "Goodput split of the whole job, both ways (shares of the job's time; points: Prometheus minus store):\n\n"
        "| part | run store | Prometheus | points |\n|---|---:|---:|---:|\n" + table + "\n\n"
        "From windows the collectives' own time, the waits for late ranks, step-time spikes and the rest are one "
        f"part, `{WAITS}`: how a step's waits split needs each step's spread over ranks, which a window's means do "
        "not carry (split the store's way, communication read 13 points high and other 18 low in the first run)."
    )
    if not args.no_faults:
        body += "\n\n" + faults()
    print(body)
    if args.out:
        update_section(args.out, "Prometheus and the run store (bench/prometheus_parity.py)", body)


if __name__ == "__main__":
    main()
