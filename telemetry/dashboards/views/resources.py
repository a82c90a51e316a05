"""The views of what the ranks waited on and ran with: Collectives (by parallel dimension, by op and
message size, per rank), Input and devices (data-loader wait, device and host signals) and I/O
(checkpoints save by save, the input per rank, the network per node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pandas as pd
import streamlit as st

from telemetry.analysis.report import advice_line

from .. import charts, comm, devices, io
from .. import data as D
from .. import source as S
from .common import Choice, step_title

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler


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
    cols[1].metric(
        "calls per step (median)", f"{cast(pd.Series, df.groupby(['rank', 'step'])['calls'].sum()).median():.0f}"
    )
    cols[2].metric("latency per call (median)", f"{df['latency_ms'].median():.2f} ms")
    bw = df["busbw_gbps"].median()
    cols[3].metric("bus bandwidth (median)", f"{bw:.2f} GB/s" if bw == bw else "-")
    series = comm.over_steps(df)
    left, right = st.columns(2)
    left.subheader("Latency per call over steps")
    left.altair_chart(
        charts.lines(
            cast(pd.DataFrame, series[series["measure"] == "latency_ms"]), "ms per call (median over ranks)", "op", "op"
        ),
        width="stretch",
    )
    right.subheader("Bus bandwidth over steps")
    right.altair_chart(
        charts.lines(
            cast(pd.DataFrame, series[series["measure"] == "busbw_gbps"]), "GB/s (median over ranks)", "op", "op"
        ),
        width="stretch",
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
            cast(pd.DataFrame, table[table["op"] == op]),
            "blocked ms/step",
            f"{op}: ms blocked per step (median)",
            D.marked_ranks(view),
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
        wait = cast(pd.DataFrame, wait[wait["rank"].isin(choice.ranks)])
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
    signal = cast(str, st.selectbox("signal", names, format_func=devices.label, key="signal"))  # there are some
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
    styled = cast("Styler", table.style.format(precision=3))  # format returns the Styler itself
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
