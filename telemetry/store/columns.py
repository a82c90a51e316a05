"""Step records as columns: the run store's format on disk (format 2).

A batch of :class:`~telemetry.pipeline.records.StepRecord` becomes two Arrow record batches: the
**steps** (:func:`steps_batch`, one row per record, named as the steps table names its columns, plus
what only the store keeps) and the **spans** (:func:`spans_batch`, one row per span, what trace
exporters need, never read for the steps table); each function's docstring lists its columns.
:func:`records_from_columns` turns both back into the store's record dicts (the JSON-lines format's
shape), for the readers that want spans (trace export, the dashboard's collectives view).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pyarrow as pa

from ..pipeline.records import INPUT_IO_KEYS, IO_KEYS

OP_FIELDS = ("count", "duration_s", "blocked_s", "bytes", "bus_bytes")
SPAN_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("kind", pa.string()),
        ("name", pa.string()),
        ("offset_s", pa.float32()),
        ("duration_s", pa.float32()),
        ("ok", pa.bool_()),
        ("nbytes", pa.int64()),
        ("group", pa.string()),
        ("gid", pa.string()),  # a collective's group instance (its ranks: RUN/ranks/rank-N.groups.json); null: unknown
        ("seq", pa.int64()),  # its call number in that instance, the same on each of its ranks; null: unknown
    ]
)


def steps_batch(records: Sequence[Any]) -> pa.RecordBatch:
    """Step records -> one record batch, columns in a stable order (sorted within each family).
    One pass per column (list comprehensions): the cost per record falls with the batch's size.

    Columns (phases in the order a step first ran them): ``rank``, ``step``, ``start_s``,
    ``duration_s``, ``ok``, ``tokens``, ``samples``, ``comm_s``, ``comm_bytes``, ``<phase>_s``,
    ``comm.<phase>_s``, ``comm_group.<group>_s`` and ``_bytes`` (per process group's label: its
    parallel dimension), ``log.<name>``, ``dev.<name>``, ``io.<name>`` (checkpoints: seconds blocked
    and of async upload, bytes, the rank's own storage seconds), ``mfu``, ``host.duration_s``; and
    what only the store keeps: ``spans_dropped`` and each collective op's per-step statistics
    (``op.<name>.count``, ``.duration_s``, ``.blocked_s``, ``.bytes``, ``.bus_bytes``). A phase that
    did not run in a step took no time in it (0); a missing reading is null. NaN and infinities
    logged by the user are kept as they are (Arrow has them)."""
    rs = records
    names = [
        "rank",
        "step",
        "start_s",
        "duration_s",
        "ok",
        "tokens",
        "samples",
        "comm_s",
        "comm_bytes",
        "spans_dropped",
    ]
    arrays = [
        pa.array([r.rank for r in rs], pa.int64()),
        pa.array([r.step for r in rs], pa.int64()),
        pa.array([r.start_s for r in rs], pa.float64()),
        pa.array([r.duration_s for r in rs], pa.float64()),
        pa.array([r.ok for r in rs], pa.bool_()),
        pa.array([r.tokens for r in rs], pa.int64()),
        pa.array([r.samples for r in rs], pa.int64()),
        pa.array([r.comm_s for r in rs], pa.float64()),
        pa.array([sum(st.bytes for st in r.ops.values()) for r in rs], pa.int64()),
        pa.array([r.spans_dropped for r in rs], pa.int64()),
    ]
    extra: dict[str, pa.Array] = {}
    for p in _keys(r.phases for r in rs):  # a phase that did not run in a step took no time in it
        extra[f"{p}_s"] = pa.array([r.phases.get(p, 0.0) for r in rs], pa.float64())
    for p in _keys(r.phase_comm for r in rs):
        extra[f"comm.{p}_s"] = pa.array([r.phase_comm.get(p, 0.0) for r in rs], pa.float64())
    for k in _keys(r.scalars for r in rs):
        extra[f"log.{k}"] = pa.array([r.scalars.get(k) for r in rs], pa.float64())
    for k in _keys(r.device for r in rs if r.device):
        extra[f"dev.{k}"] = pa.array([r.device.get(k) if r.device else None for r in rs], pa.float64())
    if any(r.io and IO_KEYS[0] in r.io for r in rs):  # a step without a checkpoint: 0 in each
        for k in IO_KEYS:
            extra[f"io.{k}"] = pa.array([r.io.get(k, 0.0) if r.io else 0.0 for r in rs], pa.float64())
    for k in INPUT_IO_KEYS:  # null where unknown: before the first storage reading; a step with no batch
        if any(r.io and k in r.io for r in rs):
            extra[f"io.{k}"] = pa.array([r.io.get(k) if r.io else None for r in rs], pa.float64())
    if any(r.mfu is not None for r in rs):
        extra["mfu"] = pa.array([r.mfu for r in rs], pa.float64())
    if any(r.host_duration_s is not None for r in rs):
        extra["host.duration_s"] = pa.array([r.host_duration_s for r in rs], pa.float64())
    for g in _keys(r.comm_groups for r in rs if r.comm_groups):
        cells = [r.comm_groups.get(g) if r.comm_groups else None for r in rs]
        extra[f"comm_group.{g}_s"] = pa.array([None if c is None else c[0] for c in cells], pa.float64())
        extra[f"comm_group.{g}_bytes"] = pa.array([None if c is None else c[1] for c in cells], pa.int64())
    for op in _keys(r.ops for r in rs):
        stats = [r.ops.get(op) for r in rs]
        for i, f in enumerate(OP_FIELDS):
            extra[f"op.{op}.{f}"] = pa.array(
                [None if st is None else st[i] for st in stats], pa.int64() if f in ("count", "bytes") else pa.float64()
            )
    for name in sorted(extra, key=_family):  # stable: phases in the order a step first ran them
        names.append(name)
        arrays.append(extra[name])
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _keys(dicts: Iterable[dict]) -> list[str]:
    """The keys of some dicts, in first-seen order (usually every record has the same)."""
    seen: dict[str, None] = {}
    last = None
    for d in dicts:
        if d is not last and d.keys() != seen.keys():
            seen.update(dict.fromkeys(d))
        last = d
    return list(seen)


_NOT_PHASES = ("start_s", "duration_s", "comm_s")  # step columns whose names end in _s too


def _is_phase(name: str) -> bool:
    return name.endswith("_s") and ("." not in name or name.startswith("comm."))


def _family(name: str) -> int:
    order = ("comm.", "comm_group.", "log.", "dev.", "io.", "mfu", "host.", "op.")
    return next((i + 1 for i, p in enumerate(order) if name.startswith(p)), 0)


def spans_batch(records: Sequence[Any]) -> pa.RecordBatch:
    """Step records' spans -> one record batch, a row per span: ``step``, ``kind``, ``name``,
    ``offset_s`` and ``duration_s`` (float32, from the step's start: they compress to a few bytes
    where absolute epoch times would not), ``ok``, ``nbytes``, ``group`` (a collective's process group
    label; null otherwise, and absent from segments written before it), ``gid`` and ``seq`` (a
    collective's group instance and its call number there; null when unknown, absent from segments
    written before them)."""
    step, kind, name, off, dur, ok, nb, grp, gid, seq = [], [], [], [], [], [], [], [], [], []
    for r in records:
        for s in r.spans:
            step.append(r.step)
            kind.append(s.kind)
            name.append(s.name)
            off.append(s.start_s - r.start_s)
            dur.append(s.end_s - s.start_s)
            ok.append(s.ok)
            nb.append(s.nbytes)
            grp.append(s.group or None)
            gid.append(s.gid or None)
            seq.append(s.seq if s.gid else None)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(step, pa.int64()),
            pa.array(kind, pa.string()),
            pa.array(name, pa.string()),
            pa.array(off, pa.float32()),
            pa.array(dur, pa.float32()),
            pa.array(ok, pa.bool_()),
            pa.array(nb, pa.int64()),
            pa.array(grp, pa.string()),
            pa.array(gid, pa.string()),
            pa.array(seq, pa.int64()),
        ],
        schema=SPAN_SCHEMA,
    )


def records_from_columns(steps: pa.Table, spans: pa.Table | None) -> list[dict[str, Any]]:
    """Columns -> the store's record dicts (as the JSON-lines format holds them), spans included."""
    cols = {name: steps.column(name).to_pylist() for name in steps.column_names}
    n = steps.num_rows
    by_step: dict[int, list] = {}
    if spans is not None and spans.num_rows:
        sp = {name: spans.column(name).to_pylist() for name in spans.column_names}
        for j in range(spans.num_rows):
            by_step.setdefault(sp["step"][j], []).append(j)
    else:
        sp = {}
    phases = [c for c in cols if _is_phase(c) and not c.startswith("comm.") and c not in _NOT_PHASES]
    pcomm = [c for c in cols if c.startswith("comm.") and c.endswith("_s")]
    logs = [c for c in cols if c.startswith("log.")]
    devs = [c for c in cols if c.startswith("dev.")]
    ios = [c for c in cols if c.startswith("io.")]
    ops = sorted({c.split(".")[1] for c in cols if c.startswith("op.")})
    cgroups = [c[11:-2] for c in cols if c.startswith("comm_group.") and c.endswith("_s")]
    for name, default in (("ok", True), ("comm_s", 0.0), ("tokens", None), ("samples", None)):
        if name not in cols:  # a segment written by something else (a simulation): what it lacks
            cols[name] = [default] * n
    out = []
    for i in range(n):
        start = cols["start_s"][i]
        rec: dict[str, Any] = {
            "rank": cols["rank"][i],
            "step": cols["step"][i],
            "start_s": start,
            "duration_s": cols["duration_s"][i],
            "ok": cols["ok"][i],
            "comm_s": cols["comm_s"][i],
            "tokens": cols["tokens"][i],
            "samples": cols["samples"][i],
            "phases": {c[:-2]: cols[c][i] for c in phases if cols[c][i]},
            "phase_comm": {c[5:-2]: cols[c][i] for c in pcomm if cols[c][i]},
            "scalars": {c[4:]: cols[c][i] for c in logs if cols[c][i] is not None},
            "ops": {
                op: [cols[f"op.{op}.{f}"][i] for f in OP_FIELDS]
                for op in ops
                if cols.get(f"op.{op}.count", [None] * n)[i] is not None
            },
            "spans": [
                [
                    sp["kind"][j],
                    sp["name"][j],
                    start + sp["offset_s"][j],
                    start + sp["offset_s"][j] + sp["duration_s"][j],
                    sp["ok"][j],
                    sp["nbytes"][j],
                    *([sp["group"][j]] if sp.get("group") and sp["group"][j] else []),
                    *([sp["gid"][j], sp["seq"][j]] if sp.get("gid") and sp["gid"][j] and sp["group"][j] else []),
                ]
                for j in by_step.get(cols["step"][i], ())
            ],
        }
        device = {c[4:]: cols[c][i] for c in devs if cols[c][i] is not None}
        if device:
            rec["device"] = device
        cg = {
            g: [cols[f"comm_group.{g}_s"][i], cols.get(f"comm_group.{g}_bytes", [0] * n)[i] or 0]
            for g in cgroups
            if cols[f"comm_group.{g}_s"][i] is not None
        }
        if cg:
            rec["comm_groups"] = cg
        io = {c[3:]: cols[c][i] for c in ios if cols[c][i] is not None}
        if io:
            rec["io"] = io
        for key, col in (("mfu", "mfu"), ("host_duration_s", "host.duration_s")):
            if col in cols and cols[col][i] is not None:
                rec[key] = cols[col][i]
        if cols.get("spans_dropped", [0] * n)[i]:
            rec["spans_dropped"] = cols["spans_dropped"][i]
        out.append(rec)
    return out
