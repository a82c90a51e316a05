"""The dashboard's views, one function each: Streamlit elements over the tables of data.py, comm.py,
devices.py and io.py and the charts of charts.py. ``app.py`` picks the run and the view and calls one.

Every view takes the run (``RunView``) and the sidebar's choice (``Choice``: step range, ranks).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd
import streamlit as st

from telemetry.analysis.historydiff import explain, slower_and_faster
from telemetry.analysis.report import advice_line, collecting_line

from . import charts, comm, devices, io, kernels
from . import data as D
from . import history as H
from . import source as S
from .grid import rank_bands


@dataclass(frozen=True)
class Choice:
    steps: tuple[int, int]
    ranks: list[int]  # empty: all


KNOWN_FIELDS = {
    "kind",
    "ranks",
    "phase",
    "first_step",
    "last_step",
    "severity",
    "slowdown",
    "evidence",
    "causes",
    "trace_ids",
    "capture",
    "trace_diff",
}


def finding_title(f: dict[str, Any]) -> str:
    who = f"rank {', '.join(map(str, f['ranks']))}" if f.get("ranks") else "job-wide"
    steps = f"steps {f.get('first_step')}-{f.get('last_step')}" if f.get("first_step") is not None else "all steps"
    slowdown = f.get("slowdown")
    return (
        f"[{f.get('severity', '?')}] {f.get('kind', '?')} - {who}"
        + (f" - phase {f['phase']}" if f.get("phase") else "")
        + f" - {steps}"
        + (f" - what-if {slowdown:.1%}" if isinstance(slowdown, (int, float)) else "")
    )


def finding_list(
    cards: list[dict[str, Any]], compact: bool = False, collecting: dict | None = None, trace_url: str = ""
) -> None:
    """Every finding as an expander: the evidence, the causes, the traces of its worst steps (linked
    with ``trace_url``), and every other field as JSON (so a kind or a field this dashboard does not
    know is still shown). ``collecting``: a live job with too few windows yet (the summary's), said
    instead of "no finding"."""
    if collecting:
        st.info(f"Not enough data yet, {collecting_line(collecting)}.")
    if not cards:
        if not collecting:
            st.success("No finding: no straggler, stall, regression or hang detected.")
        return
    for f in cards:
        with st.expander(finding_title(f), expanded=not compact):
            st.write(f.get("evidence", ""))
            causes = f.get("causes") or []
            if causes:
                st.markdown("**Causes** (the culprit's device and host signals against its peers)")
                for c in causes:
                    st.markdown(f"- `{c.get('kind')}`: {c.get('evidence', '')}")
            traces = D.trace_links(f, trace_url)
            if traces and trace_url:
                st.markdown(
                    "**Traces of its worst steps**, worst first: "
                    + ", ".join(f"[{t[:12]}]({link})" for t, link in traces)
                )
            elif traces:
                st.markdown(
                    "**Traces of its worst steps**, worst first: "
                    + ", ".join(f"`{t}`" for t, _ in traces)
                    + " (to link them, set trace_ui_url or telemetry dashboard --trace-ui-url)"
                )
            cap = f.get("capture")
            if cap:
                roles = cap.get("roles") or {}
                who = " against ".join(f"rank {r} ({roles.get(str(r), '?')})" for r in cap.get("ranks", []))
                steps = cap.get("steps") or ["?", "?"]
                st.markdown(
                    f"**Profiler capture** `{cap.get('dir')}`: {who}, steps {steps[0]}-{steps[1]} "
                    "(open a rank's trace in https://ui.perfetto.dev); where the flagged rank spends more per "
                    "step than the peer, by self time:"
                )
                if f.get("trace_diff"):
                    st.dataframe(pd.DataFrame(f["trace_diff"]).head(10), hide_index=True, width="stretch")
                else:
                    st.caption(
                        "no diff: "
                        + (
                            f"traces missing for ranks {cap['missing']}"
                            if cap.get("missing")
                            else "no op costs it more"
                        )
                    )
            rest = {k: v for k, v in f.items() if k not in KNOWN_FIELDS}
            if rest:
                st.code(json.dumps(rest, indent=1, default=str), language="json")


def step_title(view: S.RunView) -> str:
    """The step axis's title: a live job from Prometheus has a point per window, at its last step."""
    return "step (the job's last at each window's end)" if view.run.kind == "prometheus" else "step"


def overview(view: S.RunView, choice: Choice, percentiles: Any) -> None:
    s = view.analysis.summary
    cols = st.columns(5)
    cols[0].metric("median step time", f"{s['step_time_s'] * 1e3:.1f} ms", help="data wait included")
    cols[1].metric(
        "tokens/s",
        f"{s['tokens_per_s']:,.0f}" if "tokens_per_s" in s else "-",
        help=None if "tokens_per_s" in s else "no step carried a token count",
    )
    cols[2].metric(
        "MFU",
        f"{s['mfu']:.1%}" if "mfu" in s else "-",
        help=None if "mfu" in s else "not configured: init(flops_per_token=...) and a known peak",
    )
    cols[3].metric("estimated slowdown", f"{s['slowdown']:.1%}", help="all findings together, over the run")
    up = s.get("uptime") or {}
    if "wall_s" in up:
        lost = (
            f"; {up['lost_s'] / 60:.1f} min lost in {up['restarts']} restart(s) or outage(s) (at steps "
            f"{', '.join(map(str, up['restarted_at_steps']))})"
            if up.get("restarts")
            else ""
        )
        cols[4].metric(
            "uptime",
            f"{up['wall_s'] / 60:.1f} min",
            help=f"first step start to last step end: {up['in_steps_s'] / 60:.1f} min in steps{lost}",
        )
    else:
        cols[4].metric("uptime", "-", help="the input has no step start times")
    if view.run.kind == "prometheus":
        st.caption(
            f"{s['ranks']} ranks, {s['steps']} windows of {view.run.meta['window_s']:g} s with steps (steps "
            f"{s['first_step']}-{s['last_step']}); each window is shown at the job's last completed step at its "
            "end, with the per-step means of the steps it holds"
        )
    else:
        st.caption(f"{s['ranks']} ranks, {s['steps']} steps ({s['first_step']}-{s['last_step']})")
    left, right = st.columns([2, 1])
    left.subheader("Step time over steps")
    left.caption(
        "median (p50) and 95th percentile over ranks; steps far above the rest are clipped; "
        f"beyond {D.MAX_LINE_POINTS} steps a point is a block of steps (median p50, highest p95)"
    )
    left.altair_chart(charts.step_percentiles(percentiles, step_title(view)), width="stretch")
    right.subheader("Where the time went")
    right.altair_chart(charts.goodput(D.goodput(s)), width="stretch")
    st.subheader(f"Findings ({len(view.analysis.findings)}), by cost")
    finding_list(D.finding_cards(view), compact=True, collecting=s.get("collecting"), trace_url=D.trace_ui_url(view))


def ranks(view: S.RunView, choice: Choice) -> None:
    m = view.matrix
    options = ["compute", "blocked", "data"] + [p for p in m.phase_compute if p != "data"]
    if m.comm is None:
        options.remove("blocked")
    what = st.selectbox(
        "series",
        options,
        help="compute: busy time; blocked: time in collectives; data: "
        "data-loader wait; a phase: its compute, blocked time removed",
    )
    try:
        cells = D.view_heatmap(view, what, choice.ranks or None, choice.steps)
    except S.ViewError as exc:
        st.warning(str(exc))
        return
    st.subheader(f"{what}, ms per step, rank x step")
    marked = D.marked_ranks(view)
    if "last_rank" in cells.columns:  # bands of ranks: their axis labels thin out; the named ranks said here
        bands, height = rank_bands(cells)
        named = [f"{r} ({k}: band {a}-{b})" for r, k in sorted(marked.items()) for a, b in bands if a <= r <= b]
        st.caption(
            f"{len(bands):,} bands of {height} "
            "consecutive ranks, each cell the band's highest (choose 256 ranks or fewer to see each)."
            + (f" Ranks a finding names: {', '.join(named[:10])}." if named else "")
        )
    st.altair_chart(charts.heatmap(cells, f"{what} (ms per step)", marked), width="stretch")
    st.subheader("Per rank (median after warm-up)")
    st.dataframe(D.rank_summary(view).round(2), hide_index=True, width="stretch")


def findings(view: S.RunView, choice: Choice) -> None:
    cards = D.finding_cards(view)
    finding_list(cards, collecting=view.analysis.summary.get("collecting"), trace_url=D.trace_ui_url(view))
    if cards:
        st.subheader("The evidence behind one finding")
        i = st.selectbox("finding", range(len(cards)), format_func=lambda k: finding_title(cards[k]), key="focus")
        f = D.focus(view, cards[i])
        st.caption(
            f"{f.label}: {f.note}; steps {f.steps[0]}-{f.steps[1]} (the finding's steps and a margin "
            "either side); its ranks against the others' median"
        )
        st.altair_chart(charts.lines(f.lines, f.label, "who", "ranks", step_title(view)), width="stretch")
        st.altair_chart(charts.heatmap(f.cells, f.label, D.marked_ranks(view), value="value"), width="stretch")
    if view.online:
        st.subheader("Online detection during the run")
        st.dataframe(view.online, width="stretch")


def collectives(view: S.RunView, choice: Choice) -> None:
    dims = comm.dimensions(view.run.table)
    if dims and dims != ["world"]:
        st.subheader("By parallel dimension")
        st.caption(
            "Time blocked in each process group's collectives, by the group's parallel dimension (its "
            "DeviceMesh dimension's name; world: every rank; g...: an unnamed group)"
        )
        per_rank_dim, series = comm.by_dimension(view.run.table, choice.steps, choice.ranks)
        st.altair_chart(
            charts.lines(series, "ms blocked per step (median over ranks)", "dimension", "dimension", step_title(view)),
            width="stretch",
        )
        st.dataframe(per_rank_dim.round(3), hide_index=True, width="stretch")
    withheld = S.records_withheld(view)
    df = comm.per_step(view.run, choice.steps, choice.ranks) if withheld is None else pd.DataFrame()
    if df.empty:
        m = view.matrix
        lacks = (
            "This input holds no per-collective records (a steps table carries only `comm_s`, the time in "
            "collectives per step): latency, bytes and bandwidth by op come from a run directory or "
            "Prometheus." + ("" if m.comm is not None else " It has no time in collectives either.")
        )
        st.info(withheld or lacks)
        if m.comm is not None:
            st.subheader("Time in collectives, ms per step, rank x step")
            st.altair_chart(
                charts.heatmap(
                    D.view_heatmap(view, "blocked", choice.ranks or None, choice.steps),
                    "time in collectives (ms per step)",
                    D.marked_ranks(view),
                ),
                width="stretch",
            )
        return
    ops = sorted(df["op"].unique())
    cols = st.columns(4)
    cols[0].metric("ops", len(ops), help=", ".join(ops))
    cols[1].metric("calls per step (median)", f"{df.groupby(['rank', 'step'])['calls'].sum().median():.0f}")
    cols[2].metric("latency per call (median)", f"{df['latency_ms'].median():.2f} ms")
    bw = df["busbw_gbps"].median()
    cols[3].metric("bus bandwidth (median)", f"{bw:.2f} GB/s" if bw == bw else "-")
    series = comm.over_steps(df)
    left, right = st.columns(2)
    left.subheader("Latency per call over steps")
    left.altair_chart(
        charts.lines(series[series["measure"] == "latency_ms"], "ms per call (median over ranks)", "op", "op"),
        width="stretch",
    )
    right.subheader("Bus bandwidth over steps")
    right.altair_chart(
        charts.lines(series[series["measure"] == "busbw_gbps"], "GB/s (median over ranks)", "op", "op"), width="stretch"
    )
    sizes = comm.by_size(view.run, choice.steps, choice.ranks)
    if not sizes.empty:
        left, right = st.columns(2)
        left.subheader("Latency by message size")
        left.altair_chart(charts.by_size(sizes, "latency ms", "ms per call (median)"), width="stretch")
        right.subheader("Bus bandwidth by message size")
        right.altair_chart(charts.by_size(sizes, "busbw GB/s", "GB/s (median)"), width="stretch")
    else:
        st.caption("No per-call spans in these records (spans are what give message sizes).")
    st.subheader("Per rank and op")
    table = comm.per_rank(df)
    op = st.selectbox("op", ops, key="comm_op")
    st.altair_chart(
        charts.rank_bars(
            table[table["op"] == op], "blocked ms/step", f"{op}: ms blocked per step (median)", D.marked_ranks(view)
        ),
        width="stretch",
    )
    st.dataframe(table.round(3), hide_index=True, width="stretch")


def input_and_devices(view: S.RunView, choice: Choice) -> None:
    m = view.matrix
    marked = D.marked_ranks(view)
    st.subheader("Data-loader wait")
    wait = devices.data_wait(m, choice.steps)
    if choice.ranks:
        wait = wait[wait["rank"].isin(choice.ranks)]
    left, right = st.columns([1, 1])
    left.altair_chart(
        charts.rank_bars(wait, "median ms", "data-loader wait (ms per step, median)", marked), width="stretch"
    )
    right.dataframe(wait.round(3), hide_index=True, width="stretch")
    names = devices.signals(m)
    if not names:
        st.info(
            "No device or host signal was sampled with these steps (a steps table without `dev.` columns, "
            "or the sampler was off)."
        )
        return
    if devices.has_gpu(m):
        st.subheader("Devices")
    else:
        st.subheader("Host (no GPU)")
        st.info("No GPU was sampled on this run (no NVML device): the process's CPU share and memory are shown.")
    signal = st.selectbox("signal", names, format_func=devices.label, key="signal")
    cells = D.rank_step_cells(view, lambda x: devices.grid(x, signal), choice.ranks or None, choice.steps)
    st.altair_chart(charts.heatmap(cells, devices.label(signal), marked, value="value"), width="stretch")
    st.caption("Each step carries the latest reading at its end (sampled every `device_interval_s`).")
    summary = devices.summary(m, choice.steps)
    if choice.ranks:
        summary = summary[summary["rank"].isin(choice.ranks)]
    st.dataframe(summary.round(2), hide_index=True, width="stretch")
    throttle = devices.throttle_reasons(m, choice.steps)
    if len(throttle):
        st.subheader("Clock throttle reasons")
        st.dataframe(throttle, hide_index=True, width="stretch")


def io_view(view: S.RunView, choice: Choice) -> None:
    """Checkpoints save by save, the input per rank, and the network per node (telemetry/dashboards/io.py):
    each part where the run has its columns, else a line saying what it lacks and how to get it."""
    m = view.matrix
    marked = D.marked_ranks(view)
    st.subheader("Checkpoints")
    if not io.has_checkpoints(m):
        st.info(
            "No checkpoint was timed in this run: wrap a save in `telemetry.checkpoint(...)`, or save with "
            "`torch.distributed.checkpoint` (save, async_save and load are timed by themselves)."
        )
    else:
        _checkpoints(view, choice, marked)
    st.subheader("Input")
    if not io.has_input(m):
        st.info(
            "No input reading in this run: readiness needs a loader wrapped with `telemetry.watch(loader)`; "
            "bytes read need the device sampler on Linux (`/proc/<pid>/io`); worker fetch time needs "
            "`telemetry.watch_dataset(dataset)`."
        )
    else:
        table = io.input_per_rank(m, choice.steps, choice.ranks)
        st.caption(
            "Per rank over the chosen steps: % ready, the share of steps with a watched batch whose batch was "
            "already waiting; read MB/s, bytes read from storage by the rank and its workers (page-cache hits "
            "are not reads) per second of step time, data wait included; MB/s fetching, those bytes per second "
            "of the workers' fetch time (else of data wait); % workers busy, fetch time over the time x the "
            "workers (near 100%: more workers or cheaper items would help)."
        )
        if "% ready" in table:
            left, right = st.columns([1, 1])
            left.altair_chart(
                charts.rank_bars(table, "% ready", "% of steps whose batch was waiting", marked), width="stretch"
            )
            right.dataframe(table.round(3), hide_index=True, width="stretch")
        else:
            st.dataframe(table.round(3), hide_index=True, width="stretch")
    st.subheader("Network")
    if not io.network_signals(m):
        st.info(
            "No network reading in this run: NIC counters are read on nodes with RDMA devices "
            "(`/sys/class/infiniband`), NVLink error counters from NVML on GPUs with NVLink."
        )
        return
    table, errors, by_node = io.network(m, choice.steps, choice.ranks)
    st.caption(
        ("Per node" if by_node else "Per rank (the table names no nodes: ranks on one node show the same NIC counters)")
        + " over the chosen steps: NIC GB/s, the node's RDMA ports' growth over the time in steps (node totals: "
        "every rank of a node reads the same counters, other jobs on the node count too); errors, each counter's "
        "growth (NIC: the node's; NVLink: "
        + ("summed over the node's GPUs" if by_node else "the rank's GPU")
        + "), highlighted when it grew."
    )
    styled = table.style.format(precision=3)
    if errors:
        styled = styled.map(
            lambda v: "background-color: #f8d7da; color: #721c24" if isinstance(v, (int, float)) and v > 0 else "",
            subset=errors,
        )
    st.dataframe(styled, hide_index=True, width="stretch")


def _checkpoints(view: S.RunView, choice: Choice, marked: dict[int, str]) -> None:
    advice = advice_line(view.analysis.summary.get("checkpoint_advice"))
    if advice:
        st.markdown(advice.strip())
    saves = io.checkpoint_saves(view.matrix, choice.steps, choice.ranks)
    if saves.empty:
        st.info("No checkpoint in the chosen steps and ranks.")
        return
    lines, per_rank = io.checkpoint_lines(saves, marked)
    froms = set(saves["bandwidth from"]) - {""}
    st.caption(
        "Bandwidth: each checkpoint's bytes over the rank's own storage seconds (every rank of a DCP save waits "
        "for the slowest at its end, so the time blocked does not tell a slow rank apart); where the storage "
        "time is not known (`telemetry.checkpoint`, a storage layer that cannot be counted), over the time "
        "blocked plus the async upload. Here: "
        + (", ".join(sorted(froms)) if froms else "no checkpoint with bytes")
        + ("" if per_rank else "; the median over ranks and the lowest rank at each step (choose ranks to see each)")
        + "."
    )
    if len(lines):
        st.altair_chart(charts.lines(lines, "MB/s per checkpoint", "rank", "rank", step_title(view)), width="stretch")
    st.dataframe(io.checkpoint_per_rank(saves).round(3), hide_index=True, width="stretch")
    with st.expander(f"Every checkpoint ({len(saves)})"):
        st.dataframe(saves.drop(columns="saves").round(3), hide_index=True, width="stretch")


def compare(view: S.RunView, choice: Choice, base: S.RunView | None, base_name: str) -> None:
    if base is None:
        st.info(
            "Nothing to compare with: start `telemetry dashboard NEW --base BASE`, or start it with no run "
            "to choose both runs among the run directories under runs/."
        )
        return
    doc = D.compare(base, view)
    s = doc["summary"]
    cols = st.columns(2)
    for col, name, v, steps in (
        (cols[0], f"base: {base_name}", base, s["base_steps"]),
        (cols[1], "new: this run", view, s["new_steps"]),
    ):
        col.markdown(f"**{name}**")
        sub = col.columns(3)
        sub[0].metric("median step time", f"{v.analysis.summary['step_time_s'] * 1e3:.1f} ms")
        tps = v.analysis.summary.get("tokens_per_s")
        sub[1].metric("tokens/s", f"{tps:,.0f}" if tps else "-")
        sub[2].metric("findings", len(v.analysis.findings))
        col.caption(f"{v.analysis.summary['ranks']} ranks, {steps} steps")
    change = s.get("step_change")
    st.metric(
        "step time change (new against base)",
        f"{change:+.1%}" if change is not None else "-",
        delta=f"{(s['new_step_s'] - s['base_step_s']) * 1e3:+.2f} ms",
        delta_color="inverse",
    )
    table = D.compare_series(doc)
    st.subheader("Per series (ms per step, median over ranks and steps)")
    st.altair_chart(charts.compare_bars(table), width="stretch")
    st.dataframe(
        table.style.format({"base ms": "{:.2f}", "new ms": "{:.2f}", "change": "{:+.1%}", "p": "{:.1e}"}),
        hide_index=True,
        width="stretch",
    )
    st.caption(
        f"A change is significant from {s['min_effect']:.0%} with a Mann-Whitney p under its bound "
        f"(blocks of steps compared, as `telemetry diff` does)."
    )
    for name, why in s["undecided"].items():
        st.warning(f"undecided: {name}: {why}")
    st.subheader(f"Changes ({len(doc['findings'])})")
    finding_list(doc["findings"], compact=True)


def kernels_view(view: S.RunView, choice: Choice) -> None:
    srcs = kernels.sources(view.run)
    if not srcs:
        st.info(
            "No profiler traces in this run. A capture is taken when online detection raises a straggler, "
            "slow_comm or data_stall finding at warning or above (`capture` setting, on by default), or on "
            "demand: `telemetry capture RUN_DIR --ranks 1,3`. A directory of PyTorch profiler traces opens "
            "here too: `telemetry dashboard TRACE_DIR`."
        )
        return
    i = st.selectbox("traces", range(len(srcs)), format_func=lambda k: srcs[k].label, key="kernels_source")
    src = srcs[i]
    bd, problems = _source_breakdown(src)
    for p in problems:
        st.warning(p)
    st.caption(
        "Per rank, over the traced steps (the last profiler step left out, as HTA does): compute, "
        "communication and memory are the union of those kernels (of CPU operators on a CPU trace); idle is "
        "what none covers; comm hidden: the share of communication that compute overlaps. To see a trace: "
        f"open its file in {kernels.PERFETTO} (Open trace file): "
        + ", ".join(
            f"`{os.path.relpath(p, view.run.source) if os.path.isdir(view.run.source) else p}`"
            for p in src.files.values()
        )
    )
    st.dataframe(kernels.temporal_table(bd, src.roles).round(2), hide_index=True, width="stretch")
    diff, title, compared = kernels.diff_of(D.finding_cards(view), src.key) if src.key else ([], "", "")
    if diff:
        st.subheader(title)
        st.caption(compared)
        st.dataframe(pd.DataFrame(diff).head(15), hide_index=True, width="stretch")
    idle = kernels.idle_table(bd)
    if not idle.empty:
        st.subheader("Why the GPU idles")
        st.caption(
            "host wait: the kernel's launch began after the previous kernel ended (the host was late); kernel "
            "wait: gaps under 30 µs between back-to-back kernels; other: waiting on another stream, an event or a peer"
        )
        st.dataframe(idle.round(3), hide_index=True, width="stretch")
    launches = kernels.launch_table(bd)
    if not launches.empty:
        st.subheader("Launches")
        st.dataframe(launches, hide_index=True, width="stretch")
    coll = kernels.collectives_table(bd)
    if not coll.empty:
        st.subheader("Collectives")
        note = (bd.get("waits") or {}).get("note")
        st.caption(
            "waiting: until the latest of these ranks arrived; transfer: after it" + (f" ({note})" if note else "")
        )
        st.dataframe(coll.round(3), hide_index=True, width="stretch")
    ranks = [int(r) for r in bd.get("ranks", {})]
    if ranks:
        st.subheader("Top kernels and ops of one rank")
        r = st.selectbox("rank", ranks, key="kernels_rank")
        for what in ("kernels", "ops"):
            df = kernels.top_table(bd, r, what)
            if not df.empty:
                st.markdown(f"**{what}**")
                st.dataframe(df, hide_index=True, width="stretch")


@st.cache_data(show_spinner="breaking the traces down", max_entries=16)
def _source_breakdown(src: "kernels.Source") -> tuple[dict[str, Any], list[str]]:
    return kernels.source_breakdown(src)


HISTORY_PAIR = "history_pair"  # session state: (before, after) run directories the Compare view shows


def _compare_pair(pair: tuple[str, str]) -> None:
    """A button's callback (before the page runs again): the Compare view, on the runs either side."""
    st.session_state[HISTORY_PAIR] = pair
    st.session_state["view"] = "compare"


@st.cache_data(show_spinner="comparing the runs either side", max_entries=16)
def _either_side(before: str, after: str, slower_after: bool, min_effect: float, keys: tuple) -> dict[str, Any]:
    return explain(before, after, slower_after, min_effect)  # keys: the runs' content, so a grown run is read again


def _either_side_view(pair: tuple[str, str], c: dict[str, Any], min_change: float) -> None:
    """The two runs either side of the change: their steps compared, and their captures of one rank."""
    keys = tuple(H.content_key(p) for p in pair)
    e = _either_side(pair[0], pair[1], bool(c["regression"]), min_change, keys)
    for f in (e.get("steps") or {}).get("findings", []):
        st.markdown(f"- {c['runs'][0]} -> {c['runs'][1]}, {f['kind']}: {f['evidence']}")
    cap = e.get("captures")
    if cap:
        slow, fast = slower_and_faster(cap)
        st.markdown(
            f"**Captures compared**: rank {slow['rank']} in the slower run ({os.path.basename(slow['run'])}, steps "
            f"{slow['steps'][0]}-{slow['steps'][1]}) against the faster ({os.path.basename(fast['run'])}, steps "
            f"{fast['steps'][0]}-{fast['steps'][1]}): what takes more time per step"
        )
        table = H.trace_table(e)
        if len(table):
            st.dataframe(
                table.style.format({k: "{:.3f}" for k in table.columns if "ms/step" in k} | {"calls/step": "{:.1f}"}),
                hide_index=True,
                width="stretch",
            )
        else:
            st.caption("Nothing in the slower run's capture takes longer per step.")
    for n in e.get("notes", []):
        st.caption(n)


def history_view(view: S.RunView, choice: Choice, hist: "H.History | None") -> None:
    """Many runs of the job in time order (``--history``): one series over the runs with the change
    points marked, the changes, and what moved across the one chosen (telemetry/dashboards/history.py)."""
    if hist is None:
        st.info(
            "No history: start `telemetry dashboard RUN --history DIR` (a folder of runs of the job, or run "
            "directories) to see them in time order and the runs after which something changed."
        )
        return
    for s in hist.skipped:
        st.warning(f"skipped {s}")
    runs = hist.doc["runs"]
    if not runs:
        st.info("No run directory in the history source (a run directory holds meta.json or ranks/).")
        return
    df = H.trend(hist)
    changes = hist.doc["changes"]
    st.caption(
        f"{len(runs)} runs, {len(hist.doc['groups'])} group(s) of like runs (changes are searched within a group), "
        f"{len(changes)} change(s); as `telemetry history` finds them"
    )
    left, right = st.columns([1, 1])
    metric = left.selectbox("series", H.metrics(hist), key="history_metric")
    has_start = df["start"].notna().any()
    x = right.radio(
        "x axis",
        ["n", "start"] if has_start else ["n"],
        format_func={"n": "run number", "start": "start time"}.get,
        horizontal=True,
        key="history_x",
    )
    st.altair_chart(H.chart(df, metric, changes, x), width="stretch")
    st.caption(
        "A point per run (hover: its name, commit and tags); a dashed rule at the first run after each change, "
        "red for a change of this series, grey for another's."
    )
    for n in hist.doc["notes"]:
        st.caption(f"note: {n}")
    st.subheader(f"Changes ({len(changes)})")
    if not changes:
        st.success("No change across these runs.")
        return
    st.dataframe(
        H.changes_table(hist).style.format({"change": "{:+.1%}", "p": "{:.4f}", "before": "{:.6g}", "after": "{:.6g}"}),
        hide_index=True,
        width="stretch",
    )
    i = st.selectbox(
        "change",
        range(len(changes)),
        index=H.first_shown(changes),
        format_func=lambda k: H.change_label(changes[k]),
        key="history_change",
    )
    c = changes[i]
    d = c.get("diff") or {}
    st.markdown(
        f"**What moved** from runs {', '.join(d.get('before_runs', []))} to runs {', '.join(d.get('after_runs', []))} "
        "(each series' median over the runs; compute phases with their run's speed taken out)"
    )
    st.dataframe(
        H.diff_table(c).style.format({"before": "{:.6g}", "after": "{:.6g}", "change": "{:+.1%}"}),
        hide_index=True,
        width="stretch",
    )
    pair = H.pair(hist, c)
    if pair:
        _either_side_view(pair, c, hist.doc["params"]["min_change"])
    if d.get("command"):
        st.markdown(f"Steps, ops and collectives of the runs either side: `{d['command']}`")
    if pair:
        st.button(
            f"Compare {c['runs'][1]} against {c['runs'][0]}",
            on_click=_compare_pair,
            args=(pair,),
            help="opens the Compare view on these two runs (the sidebar's button goes back to the run given)",
        )
    st.markdown(f"Or from a shell: `{H.compare_command(hist, c)}`")


VIEWS: dict[str, tuple[str, Callable[..., None]]] = {
    "overview": ("Overview", overview),
    "ranks": ("Ranks", ranks),
    "findings": ("Findings", findings),
    "collectives": ("Collectives", collectives),
    "kernels": ("Kernels", kernels_view),
    "devices": ("Input and devices", input_and_devices),
    "io": ("I/O", io_view),
    "compare": ("Compare", compare),
    "history": ("History", history_view),
}


def clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"
