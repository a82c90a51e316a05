"""Bad input: settings, files and values a user (or a crash) hands telemetry.

What the user is promised: a bad setting is refused by ``init`` with a ValueError/TypeError that
names the setting (or its environment variable) and never fails later in a thread; a damaged or
odd steps table or run store is read with a clear error naming the file, or with the bad rows
skipped and counted in the warnings, and never yields a finding the data does not hold; NaN and
infinities given to ``telemetry.log`` are counted, said once and exported as what they are; label
values of any text come out of /metrics escaped so that Prometheus reads them back unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import telemetry
from telemetry.config import Config, ConfigError
from tests.helpers.servers import free_port_range

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

FIELDS = [f.name for f in dataclasses.fields(Config)]
FAST = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture(autouse=True)
def _no_session_left():
    yield
    telemetry.shutdown(timeout_s=2.0)


# ---- settings ---------------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "train\n",
        "a\x00b",
        "ü",
        "名前",
        " 5 ",
        "1e400",
        "nan",
        "-inf",
        "-0",
        "0x10",
        "1_000",
        "true",
        "store,,prometheus",
        "http://",
        "http://a b",
        "'\"\\",
        "\udc80",
        "x" * 300,
        "../..",
        "-1",
    ]
)
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=6),
    ODD_TEXT,
    st.lists(st.one_of(st.text(max_size=5), st.integers(), st.floats(), ODD_TEXT), max_size=3),
    st.tuples(st.integers()),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.complex_numbers(),
    st.just(object()),
    st.just(np.float32(0.5)),
    st.just(np.int64(2048)),
    st.just(["store", ["prometheus"]]),
    st.just(float("nan")),
)


def _names_it(exc: BaseException, *names: str) -> bool:
    return any(n in str(exc) for n in names)


@settings(FAST, max_examples=1500)
@given(name=st.sampled_from(FIELDS), value=ANY_VALUE)
def test_any_init_argument_is_accepted_or_refused_naming_the_setting(name, value):
    try:
        Config.resolve({name: value}, environ={})
    except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
        assert _names_it(exc, name), f"{name}={value!r}: the error does not name the setting: {exc}"
    # any other exception type fails the test as it propagates


@settings(FAST, max_examples=800)
@given(name=st.sampled_from(FIELDS), text=st.one_of(st.text(max_size=20), ODD_TEXT))
def test_any_environment_variable_is_accepted_or_refused_naming_it(name, text):
    key = f"TELEMETRY_{name.upper()}"
    try:
        Config.resolve({}, environ={key: text})
    except (ValueError, TypeError) as exc:
        assert _names_it(exc, key), f"{key}={text!r}: the error does not name the variable: {exc}"


@pytest.mark.parametrize("job", ["train\n", "my job", "a/b", "", "x" * 129, "ü", 'a"b', "a{b}", 7, None])
def test_invalid_job_names_are_refused_at_init_naming_job(job, tmp_path, monkeypatch):
    if job is None:  # None means "the default" for every setting: init runs, under the default job name
        session = telemetry.init(job=None, run_dir=str(tmp_path / "default"), sinks=["store"], announce=False)
        assert session.config.job == Config.job
        telemetry.shutdown()
        monkeypatch.setenv("TELEMETRY_JOB", "from-env")  # ... and it never hides the environment's job
        session = telemetry.init(job=None, run_dir=str(tmp_path / "env"), sinks=["store"], announce=False)
        assert session.config.job == "from-env"
        return
    with pytest.raises(ConfigError, match=r"^job="):
        telemetry.init(job=job, run_dir=str(tmp_path), sinks=["store"], announce=False)
    assert telemetry.session() is None


# Values that may be accepted: where they are, init must work, and so must the steps after it.
MAYBE_GOOD = {
    "job": st.one_of(st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True), ODD_TEXT),
    "flush_interval_s": st.one_of(st.floats(0.005, 0.2), st.just(np.float32(0.05)), st.integers(0, 1)),
    "buffer_events": st.one_of(st.integers(1000, 5000), st.just(np.int64(4096))),
    "shutdown_timeout_s": st.floats(0.05, 3.0),
    "start_step": st.one_of(st.integers(-1, 10**6), st.just((1 << 62) - 5), st.just(1 << 62)),
    "device_interval_s": st.sampled_from([0, 0.01, 0.05, 0.1, 1]),
    "gpu": st.booleans(),
    "strict": st.booleans(),
    "collectives": st.booleans(),
    "flops_per_token": st.one_of(st.floats(0, 1e12), st.just(1e19)),
    "peak_flops": st.floats(0, 1e15),
    "mfu_dtype": st.sampled_from(["bf16", "fp8", "int4"]),
    "device_timing": st.sampled_from(["auto", "wall", "cuda"]),
    "step_buckets_s": st.lists(st.floats(1e-6, 100), min_size=1, max_size=5),
    "max_label_values": st.integers(0, 40),
    "busy_bound": st.floats(0, 1.5),
}


@settings(FAST, max_examples=40)
@given(
    st.fixed_dictionaries({}, optional=MAYBE_GOOD), st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s)
)
def test_accepted_settings_run_a_job_with_no_pipeline_or_sink_error(kwargs, dir_name):
    root = tempfile.mkdtemp(prefix="badinput-cfg-")
    try:
        run_dir = os.path.join(root, dir_name.replace("/", "_"))
        try:
            session = telemetry.init(
                run_dir=run_dir, sinks=["store"], announce=False, handle_sigterm=False, online=False, **kwargs
            )
        except (ValueError, TypeError) as exc:
            assert _names_it(exc, *kwargs, "run_dir", "device_timing"), exc
            event("refused at init")
            return
        event("accepted: ran 3 steps")
        first = session.config.start_step
        for i in range(3):
            with telemetry.step(samples=2):
                with telemetry.phase("forward"):
                    pass
                telemetry.log(loss=1.0 / (i + 1))
        stats = telemetry.shutdown()
        assert stats["pipeline_errors"] == 0, stats
        store = stats["sinks"]["store"]
        assert store["failures"] == 0 and store["dropped"] == 0 and store["written"] == 3, (kwargs, stats)
        from telemetry.analysis.inputs.load import open_input

        table = open_input(run_dir).table
        assert table["step"].tolist() == [first, first + 1, first + 2], (kwargs, table)
    finally:
        telemetry.shutdown(timeout_s=2.0)
        shutil.rmtree(root, ignore_errors=True)


# Each of these escaped init as another exception, was accepted and failed later, or named nothing
# before config.py was fixed (found by the properties above).
FOUND_BAD = [
    ({"flush_interval_s": 10**400}, "flush_interval_s"),
    ({"start_step": 10**5000}, "start_step"),
    ({"step_buckets_s": [0.1, 10**400]}, "step_buckets_s"),
    ({"sinks": 5}, "sinks"),
    ({"device_interval_s": "1"}, "device_interval_s"),
    ({"device_interval_s": True}, "device_interval_s"),
    ({"job": "train\n"}, "job"),
    ({"run_dir": "runs/a\x00b"}, "run_dir"),
    ({"run_dir": "r/" + "x" * 300}, "run_dir"),
    ({"prometheus_certfile": ["cert.pem"], "prometheus_keyfile": ["key.pem"]}, "prometheus_certfile"),
    ({"prometheus_certfile": 1, "prometheus_keyfile": 1}, "prometheus_certfile"),
    ({"prometheus_host": "a b\n"}, "prometheus_host"),
    ({"pushgateway_url": "http://a b"}, "pushgateway_url"),
    ({"otlp_endpoint": "http://collector:99999"}, "otlp_endpoint"),
]
FOUND_BAD_ENV = [
    ({"TELEMETRY_FLUSH_INTERVAL_S": "nan"}, "TELEMETRY_FLUSH_INTERVAL_S"),
    ({"TELEMETRY_SINKS": "store,kafka"}, "TELEMETRY_SINKS"),
    ({"TELEMETRY_JOB": "a b"}, "TELEMETRY_JOB"),
]


def test_bad_settings_fail_init_naming_them_and_start_nothing(tmp_path, monkeypatch, fault_table):
    import threading

    threads = threading.active_count()
    refused = 0
    for kwargs, name in FOUND_BAD:
        kwargs = {"run_dir": str(tmp_path / "run"), **kwargs}
        with pytest.raises((ValueError, TypeError), match=name):
            telemetry.init(sinks=["store"], announce=False, **kwargs)
        refused += 1
    for env, name in FOUND_BAD_ENV:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            with pytest.raises(ConfigError, match=name):
                telemetry.init(run_dir=str(tmp_path / "run"), announce=False)
        refused += 1
    # accepted now, as what they mean: NumPy numbers (stored as plain Python numbers)
    cfg = Config.resolve({"flush_interval_s": np.float32(0.25), "buffer_events": np.int64(4096)}, environ={})
    assert (cfg.flush_interval_s, cfg.buffer_events) == (0.25, 4096)
    assert type(cfg.flush_interval_s) is float and type(cfg.buffer_events) is int
    assert telemetry.session() is None and threading.active_count() == threads
    assert not os.path.exists(tmp_path / "run")
    fault_table.add(
        "bad input",
        "init settings and TELEMETRY_* variables of every kind (hypothesis: wrong types, "
        "out of range, NaN/inf, huge ints, odd and unicode strings, lists for strings)",
        f"init refuses each with a ValueError/TypeError naming the setting or variable ({refused} that "
        "escaped as other errors, failed later or named nothing before, e.g. flush_interval_s=10**400: "
        "OverflowError; job='train\\n' accepted); no thread, no file; accepted settings ran steps and "
        "shutdown with 0 pipeline errors and 0 sink failures",
        "nothing (a refused setting starts nothing)",
    )


# ---- run stores and steps tables ---------------------------------------------------------------

RANKS, STEPS, SEG_STEPS = 4, 400, 100


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """A clean 4-rank run (simulated, identical ranks: nothing to find), 4 segments per rank."""
    from telemetry.demo.simrun import write_simulated_run
    from telemetry.demo.simulate import Scenario

    out = str(tmp_path_factory.mktemp("sim") / "run")
    write_simulated_run(
        Scenario(name="clean", ranks=RANKS, steps=STEPS, seed=3, static=0.0), out, chunk_steps=SEG_STEPS
    )
    run, result = _analyze(out)
    assert len(run.table) == RANKS * STEPS and not run.warnings
    assert _found(result) == set(), "the clean run itself must have nothing to find"
    return out


def _analyze(path):
    from telemetry.analysis import analyze_run

    result = analyze_run(path)
    return result.input, result


def _found(result) -> set:
    return {(f.kind, tuple(f.ranks), f.phase) for f in result.findings}


def _cli_json(path, capsys):
    """`telemetry analyze PATH --json` through the CLI's own main: (exit code, JSON or None, stderr)."""
    from telemetry.cli import main

    capsys.readouterr()
    code = main(["analyze", str(path), "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def _copy(src, tmp_path, name="run"):
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def _seg(run_dir, rank, seq):
    from telemetry.store import layout

    return layout.segment_path(run_dir, rank, seq)


def _rows_per_rank(run) -> list[int]:
    return run.table.groupby("rank").size().reindex(range(RANKS), fill_value=0).tolist()


def _segment_to_tail(run_dir, rank, seq, edit=None):
    """Replace a sealed segment by the tail the rank would have left had it died before sealing it
    (the library's own TailEncoder); ``edit(lines) -> lines`` damages it first."""
    import pyarrow.parquet as pq

    from telemetry.pipeline.records import StepRecord
    from telemetry.store import layout
    from telemetry.store.columns import records_from_columns
    from telemetry.store.tails import TailEncoder

    seg = _seg(run_dir, rank, seq)
    enc = TailEncoder()
    lines = [json.dumps({"format": 2, "fields": list(StepRecord._fields), "session": "test"}) + "\n"]
    for d in records_from_columns(pq.read_table(seg), None):
        rec = StepRecord(
            d["rank"],
            d["step"],
            d["start_s"],
            d["duration_s"],
            d["ok"],
            d["phases"],
            d["phase_comm"],
            d["comm_s"],
            {},
            d["tokens"],
            d["samples"],
            d["scalars"],
            (),
            0,
            d.get("device"),
            d.get("mfu"),
            d.get("host_duration_s"),
        )
        lines += enc.lines(rec).splitlines(keepends=True)
    if edit is not None:
        lines = edit(lines)
    os.remove(seg)
    with open(layout.tail_path(run_dir, rank, seq), "w") as f:
        f.write("".join(lines))


def _packed(values) -> str:
    import base64
    from array import array

    return base64.b64encode(array("d", values).tobytes()).decode("ascii")


def _nan_duration(lines):
    """Two records' packed numbers with duration_s NaN and -1 (valid lines: the decoder keeps them)."""
    import base64
    from array import array

    out = list(lines)
    for i, value in ((5, float("nan")), (9, -1.0)):
        rec = json.loads(out[i])
        v = array("d")
        v.frombytes(base64.b64decode(rec[-1]))
        v[1] = value
        rec[-1] = _packed(v)
        out[i] = json.dumps(rec) + "\n"
    return out


def _truncate_middle(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def _garbage(path):
    with open(path, "wb") as f:
        f.write(bytes((i * 73 + 11) % 256 for i in range(5000)))


def _wrong_types(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    i = t.schema.get_field_index("duration_s")
    pq.write_table(t.set_column(i, "duration_s", pa.array([f"{x:.3f}s" for x in t.column(i).to_pylist()])), path)


def _drop_duration(path):
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(path).drop(["duration_s"]), path)


def _nan_and_negative(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    i = t.schema.get_field_index("duration_s")
    v = t.column(i).to_numpy().copy()
    v[::10], v[5::10] = np.nan, -1.0
    pq.write_table(t.set_column(i, "duration_s", pa.array(v)), path)


# (what is done to rank 2's segment 3 (steps 200-299), rows rank 2 keeps, what the warning says)
SEGMENT_DAMAGE = {
    "truncated in the middle": (_truncate_middle, 300, "rank-00002.seg-000003.parquet: unreadable"),
    "garbage bytes": (_garbage, 300, "rank-00002.seg-000003.parquet: unreadable"),
    "empty file": (lambda p: open(p, "wb").close(), 300, "rank-00002.seg-000003.parquet: unreadable"),
    "duration_s as text": (_wrong_types, 300, "rank-00002.seg-000003.parquet: column duration_s is string"),
    "no duration_s column": (_drop_duration, 300, "rank-00002.seg-000003.parquet: no duration_s column"),
    "NaN and negative durations": (
        _nan_and_negative,
        380,
        "20 row(s) with missing, non-finite or negative rank/step/start_s/duration_s skipped (rank 2, steps 200-295)",
    ),
    "copied as a later segment (duplicates)": (
        lambda p: shutil.copy(p, p.replace("seg-000003", "seg-000009")),
        400,
        "100 duplicate (rank, step) row(s)",
    ),
}


@pytest.mark.parametrize("damage", list(SEGMENT_DAMAGE))
def test_a_damaged_segment_is_said_and_skipped_never_a_finding(damage, sim_run, tmp_path, capsys, fault_table):
    corrupt, rank2_rows, said = SEGMENT_DAMAGE[damage]
    run_dir = _copy(sim_run, tmp_path)
    corrupt(_seg(run_dir, 2, 3))
    run, result = _analyze(run_dir)
    assert _rows_per_rank(run) == [STEPS, STEPS, rank2_rows, STEPS]
    assert any(said in w for w in run.warnings), run.warnings
    assert _found(result) == set(), f"{damage}: findings invented: {[f.evidence for f in result.findings]}"
    code, doc, err = _cli_json(run_dir, capsys)
    assert code == 0 and doc["findings"] == [] and any(said in w for w in doc["summary"]["warnings"]), (code, err)
    assert doc["summary"]["steps"] == STEPS
    fault_table.add(
        "bad input",
        f"run store: rank 2's Parquet segment (steps 200-299): {damage}",
        f"analyze: exit {code}, {len(doc['findings'])} findings (clean run: 0); --json warnings say: "
        f'"{next(w for w in doc["summary"]["warnings"] if said in w)[:110]}"',
        "nothing"
        if rank2_rows == STEPS
        else f"{STEPS - rank2_rows} of rank 2's rows, skipped and said (the rest of the run is analyzed)",
    )


def test_a_flipped_byte_in_a_segment_is_said_never_a_wrong_number(sim_run, tmp_path, fault_table):
    """Bytes flipped inside a sealed segment's data (a bad disk, a bad copy): each damaged segment is
    unreadable and named (its pages carry a checksum), or reads back exactly as written."""
    import pyarrow.parquet as pq

    from telemetry.pipeline.records import StepRecord
    from telemetry.store.columns import records_from_columns
    from telemetry.store.seal import write_segment

    run_dir = _copy(sim_run, tmp_path)
    # A segment exactly as a rank's own store sink seals it (write_segment), from rank 2's records.

    seg = _seg(run_dir, 2, 3)
    recs = [
        StepRecord(
            d["rank"],
            d["step"],
            d["start_s"],
            d["duration_s"],
            d["ok"],
            d["phases"],
            d["phase_comm"],
            d["comm_s"],
            {},
            d["tokens"],
            d["samples"],
            d["scalars"],
            (),
            0,
            d.get("device"),
        )
        for d in records_from_columns(pq.read_table(seg), None)
    ]
    write_segment(run_dir, 2, 3, recs)
    clean = _analyze(run_dir)[0].table
    original = open(seg, "rb").read()
    meta_at = len(original) - 8 - int.from_bytes(original[-8:-4], "little")  # the footer: names, not numbers
    silent_wrong = said = exact = 0
    for k, offset in enumerate(range(4, meta_at - 8, max(1, (meta_at - 12) // 40))):
        data = bytearray(original)
        for i in range(offset, offset + 8):
            data[i] ^= 0x5A
        with open(seg, "wb") as f:
            f.write(bytes(data))
        os.utime(seg, (1, 1 + k))
        run, result = _analyze(run_dir)
        assert _found(result) == set(), f"offset {offset}: {[f.evidence for f in result.findings]}"
        if any("rank-00002.seg-000003.parquet: unreadable" in w for w in run.warnings):
            said += 1
        elif run.table.shape == clean.shape and np.allclose(
            run.table.drop(columns="node").to_numpy(float), clean.drop(columns="node").to_numpy(float), equal_nan=True
        ):
            exact += 1
        else:
            silent_wrong += 1
    assert silent_wrong == 0, (
        f"{silent_wrong} of {said + exact + silent_wrong} damaged copies read back wrong numbers silently"
    )
    fault_table.add(
        "bad input",
        f"run store: 8 bytes flipped inside a segment's data pages, at {said + exact} offsets",
        f"analyze: {said} unreadable segment named and skipped, {exact} read back exact; 0 wrong numbers, 0 findings",
        "the damaged segment's 100 rows where it was unreadable (said)",
    )


TAIL_DAMAGE = {
    # name: (edit of the tail's lines, rows rank 2 keeps of segment 4's 100, what the warning says)
    "torn last line": (lambda ls: ls[:-1] + [ls[-1][: len(ls[-1]) // 2]], 99, "torn last record"),
    "invalid base64 in a packed line": (
        lambda ls: ls[:4] + [ls[4].replace('"', '"!!', 1)[:-3] + '@@"]\n'] + ls[5:],
        99,
        "1 invalid line(s) skipped",
    ),
    "garbage line": (lambda ls: ls[:6] + ["\x00\xff garbage {[\n"] + ls[6:], 100, "1 invalid line(s) skipped"),
    "shape line lost": (lambda ls: [ls[0]] + ls[2:], 0, "100 invalid line(s) skipped"),
    "NaN and negative durations": (_nan_duration, 98, "skipped (rank 2, steps 303-307)"),
    "steps 300-349 again after the segment (restart)": (None, 100, "50 duplicate (rank, step) row(s)"),
}


@pytest.mark.parametrize("damage", list(TAIL_DAMAGE))
def test_a_damaged_tail_is_said_and_skipped_never_a_finding(damage, sim_run, tmp_path, capsys, fault_table):
    edit, kept, said = TAIL_DAMAGE[damage]
    run_dir = _copy(sim_run, tmp_path)
    if edit is None:  # a later tail (seq 5) that re-ran steps 300-349: the later file wins, nothing doubles
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(_seg(run_dir, 2, 4)).slice(0, 50), _seg(run_dir, 2, 5))
        _segment_to_tail(run_dir, 2, 5)
    else:
        _segment_to_tail(run_dir, 2, 4, edit)
    run, result = _analyze(run_dir)
    assert _rows_per_rank(run) == [STEPS, STEPS, 3 * SEG_STEPS + kept, STEPS], _rows_per_rank(run)
    assert any(said in w for w in run.warnings), run.warnings
    assert _found(result) == set(), f"{damage}: findings invented: {[f.evidence for f in result.findings]}"
    code, doc, err = _cli_json(run_dir, capsys)
    assert code == 0 and any(said in w for w in doc["summary"]["warnings"]) and not doc["findings"], err
    fault_table.add(
        "bad input",
        f"run store: rank 2's live tail (steps 300-399): {damage}",
        f"analyze: exit {code}, {len(doc['findings'])} findings; --json warnings: "
        f'"{next(w for w in doc["summary"]["warnings"] if said in w)[:100]}"',
        "nothing" if kept == SEG_STEPS else f"{SEG_STEPS - kept} of rank 2's records, skipped and said",
    )


def _to_format1(run_dir):
    """The same run as format 1 (one JSON object a line per rank, as the store wrote before segments)."""
    import pyarrow.parquet as pq

    from telemetry.store import layout
    from telemetry.store.catalogue import rank_files
    from telemetry.store.columns import records_from_columns

    for rank, seqs in rank_files(run_dir).items():
        with open(layout.steps_path(run_dir, rank), "w") as f:
            for seq in sorted(seqs):
                for d in records_from_columns(pq.read_table(seqs[seq]["seg"]), None):
                    f.write(json.dumps(d) + "\n")
                os.remove(seqs[seq]["seg"])


def _line_edit(fn):
    def edit(path):
        with open(path) as f:
            lines = f.read().splitlines(keepends=True)
        with open(path, "w") as f:
            f.write("".join(fn(lines)))

    return edit


def _set_field(line, **values):
    d = json.loads(line)
    d.update(values)
    return json.dumps(d) + "\n"  # NaN is written as the JSON extension NaN, as Python's json reads it


FORMAT1_DAMAGE = {
    # name: (edit of rank 2's rank-00002.steps.jsonl, rows rank 2 keeps, what the warning says)
    "corrupt line in the middle": (
        _line_edit(lambda ls: ls[:150] + ['{"rank": 2, "st\x00\n'] + ls[151:]),
        399,
        "rank-00002.steps.jsonl: line 151 is not a valid step record",
    ),
    "torn last line": (_line_edit(lambda ls: ls[:-1] + [ls[-1][:40]]), 399, "rank-00002.steps.jsonl: torn last record"),
    "step as text": (
        _line_edit(lambda ls: ls[:10] + [_set_field(ls[10], step="10")] + ls[11:]),
        399,
        "rank-00002.steps.jsonl: line 11 is not a valid step record",
    ),
    "NaN and negative durations": (
        _line_edit(
            lambda ls: (
                ls[:20] + [_set_field(ls[20], duration_s=float("nan")), _set_field(ls[21], duration_s=-0.5)] + ls[22:]
            )
        ),
        398,
        "2 row(s) with missing, non-finite or negative rank/step/start_s/duration_s skipped (rank 2, steps 20-21)",
    ),
    "lines repeated and out of order": (
        _line_edit(lambda ls: ls[200:] + ls[:200] + ls[100:150]),
        400,
        "50 duplicate (rank, step) row(s)",
    ),
}


@pytest.mark.parametrize("damage", list(FORMAT1_DAMAGE))
def test_a_damaged_format1_file_is_said_and_skipped_never_a_finding(damage, sim_run, tmp_path, capsys, fault_table):
    from telemetry.store import layout

    edit, kept, said = FORMAT1_DAMAGE[damage]
    run_dir = _copy(sim_run, tmp_path)
    _to_format1(run_dir)
    edit(layout.steps_path(run_dir, 2))
    run, result = _analyze(run_dir)
    assert _rows_per_rank(run) == [STEPS, STEPS, kept, STEPS]
    assert any(said in w for w in run.warnings), run.warnings
    assert _found(result) == set(), f"{damage}: findings invented: {[f.evidence for f in result.findings]}"
    code, doc, err = _cli_json(run_dir, capsys)
    assert code == 0 and not doc["findings"] and any(said in w for w in doc["summary"]["warnings"]), err
    fault_table.add(
        "bad input",
        f"run store (format 1 JSON lines): rank 2's file: {damage}",
        f"analyze: exit {code}, {len(doc['findings'])} findings; warning: "
        f'"{next(w for w in doc["summary"]["warnings"] if said in w)[:100]}"',
        "nothing" if kept == STEPS else f"{STEPS - kept} of rank 2's records, skipped and said",
    )


@pytest.fixture(scope="module")
def clean_table(sim_run):
    from telemetry.analysis.inputs.load import open_input

    return open_input(sim_run).table.drop(columns="node")


def _write(table, path):
    if path.endswith(".csv"):
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)


def _truncate_text(path):
    with open(path, "rb") as f:
        data = f.read()
    cut = data.rfind(b",", 0, len(data) // 2)  # mid-row, after a comma: the row's later fields are gone
    with open(path, "wb") as f:
        f.write(data[: cut + 1])


def _every(n, offset=0):
    return lambda t: (t.index % n) == offset


# name: (change to the table or None, damage to the written file or None, error or warning it gives,
#        rows kept of 1600 (None: an error), formats it applies to)
TABLE_DAMAGE = {
    "no duration_s column": (
        lambda t: t.drop(columns="duration_s"),
        None,
        "missing column(s) duration_s; a steps table needs rank, step, start_s, duration_s",
        None,
    ),
    "rank as text": (lambda t: t.assign(rank="r" + t["rank"].astype(str)), None, "column(s) rank hold no number", None),
    "some durations as text": (
        lambda t: t.assign(duration_s=t["duration_s"].astype(str).where(~_every(40)(t), "slow")),
        None,
        "40 value(s) in duration_s are not numbers",
        1560,
    ),
    "NaN and negative durations": (
        lambda t: t.assign(duration_s=t["duration_s"].where(~_every(50)(t), np.nan).where(~_every(50, 7)(t), -1.0)),
        None,
        "64 row(s) with missing, non-finite or negative rank/step/start_s/duration_s "
        "skipped (ranks 0, 1, 2, 3, steps 0-",
        1536,
    ),
    "non-integer steps": (
        lambda t: t.assign(step=t["step"].astype(float).where(~_every(100)(t), 0.5)),
        None,
        "16 row(s) whose rank or step is not an integer skipped (ranks 0, 1, 2, 3, step 0.5)",
        1584,
    ),
    "every 5th row twice": (
        lambda t: pd.concat([t, t[_every(5)(t)]], ignore_index=True),
        None,
        "320 duplicate (rank, step) row(s)",
        1600,
    ),
    "rows shuffled": (lambda t: t.sample(frac=1.0, random_state=7), None, None, 1600),
    "truncated in the middle": (None, _truncate_text, None, None),
    "garbage bytes": (None, _garbage, "not a readable", None),
}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("damage", list(TABLE_DAMAGE))
def test_a_damaged_steps_table_gives_a_clear_error_or_counted_skips_never_a_finding(
    damage, suffix, clean_table, tmp_path, capsys, fault_table
):
    change, spoil, said, kept = TABLE_DAMAGE[damage]
    path = str(tmp_path / f"steps{suffix}")
    _write(change(clean_table.copy()) if change else clean_table, path)
    if spoil is not None:
        spoil(path)
    if damage == "truncated in the middle":  # CSV: the rows before the cut, and the cut row's fields
        if suffix == ".csv":  # that made it; Parquet: its footer is gone, an error
            said, kept = None, "fewer"
        else:
            said = "not a readable Parquet file"
    code, doc, err = _cli_json(path, capsys)
    if kept is None:  # an error: exit 2 naming the file and what is wrong
        assert code == 2 and f"steps{suffix}" in err and said in err, (code, err)
        if suffix == ".parquet" and damage not in ("truncated in the middle", "garbage bytes"):
            return  # the same outcome as the CSV's row
        fault_table.add(
            "bad input",
            f"steps table ({suffix[1:]}): {damage}",
            f'analyze: exit 2, "{err.strip().splitlines()[-1][:140]}"',
            "nothing (no analysis made)",
        )
        return
    assert code == 0, err
    assert doc["findings"] == [], f"{damage}: findings invented: {[f['evidence'] for f in doc['findings']]}"
    run, result = _analyze(path)
    warnings = doc["summary"].get("warnings", [])
    if kept == "fewer":
        assert 0 < len(run.table) < len(clean_table)
    else:
        assert len(run.table) == kept and doc["summary"]["steps"] <= STEPS
    if said is not None:
        assert any(said in w and f"steps{suffix}" in w for w in warnings), warnings
    if damage == "rows shuffled":  # the same analysis as the table in order
        sorted_doc = _cli_json(_sorted_copy(clean_table, tmp_path, suffix), capsys)[1]
        assert doc["summary"]["step_time_s"] == pytest.approx(sorted_doc["summary"]["step_time_s"])
    if suffix == ".parquet" and damage != "truncated in the middle":
        return  # the same outcome as the CSV's row: one row in the table for both
    fault_table.add(
        "bad input",
        f"steps table ({suffix[1:]}): {damage}",
        f"analyze: exit 0, 0 findings, {len(run.table)} of {len(clean_table)} rows analyzed"
        + (f'; --json warnings: "{warnings[0][:110]}"' if warnings else ""),
        "nothing"
        if len(run.table) == len(clean_table)
        else f"{len(clean_table) - len(run.table)} bad rows, skipped and counted in the warnings",
    )


def _sorted_copy(table, tmp_path, suffix):
    path = str(tmp_path / f"sorted{suffix}")
    _write(table, path)
    return path


def test_a_per_operation_trace_with_bad_values_is_counted_not_a_crash(tmp_path, capsys, fault_table):
    rng = np.random.default_rng(1)
    work = {"forward-compute": (0.0, 0.020), "backward-compute": (0.020, 0.030), "all-reduce": (0.050, 0.001)}
    rows = [
        {
            "rank": r,
            "step": s,
            "optype": op,
            "start_ts": 1000.0 + s * 0.052 + at,
            "duration": took * (1 + rng.normal(0, 0.01)),
        }
        for r in range(4)
        for s in range(60)
        for op, (at, took) in work.items()
    ]
    ops = pd.DataFrame(rows)
    ops["duration"] = ops["duration"].astype(object)
    ops.loc[ops.index % 37 == 0, "duration"] = "n/a"
    path = str(tmp_path / "ops.csv")
    ops.to_csv(path, index=False)
    code, doc, err = _cli_json(path, capsys)
    n_bad = int((ops.index % 37 == 0).sum())
    assert code == 0, err
    assert any(f"ops.csv: {n_bad} operation(s) with a missing, non-numeric" in w for w in doc["summary"]["warnings"]), (
        doc["summary"]["warnings"]
    )
    assert doc["findings"] == [], [f["evidence"] for f in doc["findings"]]
    assert doc["summary"]["ranks"] == 4
    fault_table.add(
        "bad input",
        f"per-operation trace (csv): {n_bad} of {len(ops)} durations are text",
        f'analyze: exit 0, 0 findings; warning: "{doc["summary"]["warnings"][0][:100]}"',
        f"the {n_bad} unreadable operations (counted; their steps are kept with the rest)",
    )


@pytest.mark.slow  # 2,020,000 rows: seconds of CPU
def test_two_million_rows_with_bad_and_duplicate_rows(tmp_path, capsys, fault_table):
    from telemetry.demo.simulate import Scenario, simulate

    table = simulate(Scenario(name="big", ranks=200, steps=10_000, seed=5, static=0.0))
    rng = np.random.default_rng(0)
    bad = rng.choice(len(table), 20_000, replace=False)
    table.loc[bad[:10_000], "duration_s"] = np.nan
    table.loc[bad[10_000:], "start_s"] = -np.inf
    good = np.ones(len(table), dtype=bool)
    good[bad] = False
    dup = rng.choice(np.flatnonzero(good), 20_000, replace=False)  # good rows repeated: must not count twice
    table = pd.concat([table, table.iloc[dup]], ignore_index=True)
    path = str(tmp_path / "big.parquet")
    table.to_parquet(path, index=False)
    t0 = time.perf_counter()
    code, doc, err = _cli_json(path, capsys)
    took = time.perf_counter() - t0
    assert code == 0, err
    warnings = doc["summary"]["warnings"]
    assert any("20000 row(s)" in w and "big.parquet" in w for w in warnings), warnings
    assert any("20000 duplicate (rank, step) row(s)" in w for w in warnings), warnings
    assert doc["summary"]["ranks"] == 200 and doc["summary"]["steps"] == 10_000
    assert doc["findings"] == [], [f["evidence"] for f in doc["findings"]]
    assert took < 120, took
    fault_table.add(
        "bad input",
        f"steps table (parquet), {len(table):,} rows: 20,000 with NaN/-inf times, 20,000 repeated",
        f"analyze: exit 0 in {took:.1f} s, 0 findings, both counted in --json warnings",
        "the 20,000 bad rows (counted); the repeats are not counted twice",
    )


# ---- values given to telemetry.log, and what /metrics makes of them ------------------------------

ODD_NAMES = {'a"quote': 1.0, "back\\slash": 2.0, "new\nline": 3.0, "ünï 名前": 4.0, "}{,=": 5.0}
NONFINITE = {"loss": float("nan"), "grad_norm": float("inf"), "lr_scale": -float("inf")}


def _metrics(port) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode("utf-8")


def _families(text):
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def _promtool(text):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    return p.returncode, (p.stdout + p.stderr).decode()


@pytest.mark.slow  # serves /metrics (a real HTTP server in this process) and runs promtool
def test_nan_and_infinity_are_counted_said_once_and_exported_as_what_they_are(tmp_path, caplog, fault_table):
    """NaN/inf given to telemetry.log are data (a diverged loss): counted in stats()['nonfinite_values'],
    said once per name, stored as NaN/inf (never as a string or a made-up number), read back as such in
    the steps table, and exported in /metrics as the exposition format spells them (NaN, +Inf, -Inf),
    which Prometheus and promtool read."""
    import pyarrow.parquet as pq

    from telemetry.analysis.inputs.load import open_input
    from telemetry.store.segreads import read_records

    port = free_port_range(1)
    run_dir = str(tmp_path / "run")
    telemetry.init(
        run_dir=run_dir,
        job="nan-test",
        sinks=["store", "prometheus"],
        prometheus_port=port,
        flush_interval_s=0.05,
        announce=False,
        online=False,
        handle_sigterm=False,
    )
    steps = 6
    with caplog.at_level("WARNING", logger="telemetry"):
        for i in range(steps):
            with telemetry.step(samples=4):
                with telemetry.phase("forward"):
                    pass
                telemetry.log(**NONFINITE, ok_value=float(i))
        # until the last step's values are on /metrics (a record is counted before the sinks have it)
        deadline = time.monotonic() + 10
        text = _metrics(port)
        while (
            not any('name="ok_value"' in ln and ln.endswith(f" {steps - 1:.1f}") for ln in text.splitlines())
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
            text = _metrics(port)
        stats = telemetry.shutdown()
    assert stats["nonfinite_values"] == steps * len(NONFINITE)
    assert stats["pipeline_errors"] == 0
    assert all(s["failures"] == 0 and s["dropped"] == 0 for s in stats["sinks"].values()), stats["sinks"]
    said = [r.getMessage() for r in caplog.records if "is not a finite number" in r.getMessage()]
    assert len(said) == len(NONFINITE), said  # once per name, not once per step
    # /metrics: the last value of each name, as the exposition format writes NaN and infinities
    samples = {s.labels["name"]: s.value for s in _families(text)["train_log_value"].samples}
    assert math.isnan(samples["loss"]) and samples["grad_norm"] == math.inf and samples["lr_scale"] == -math.inf
    assert samples["ok_value"] == steps - 1
    lines = [ln for ln in text.splitlines() if ln.startswith("train_log_value{")]
    assert {ln.rsplit(" ", 1)[1] for ln in lines} <= {"NaN", "+Inf", "-Inf", f"{steps - 1:.1f}"}, lines
    code, out = _promtool(text)
    assert code == 0, out
    # The store: float64 NaN/inf in the segment, nothing else; the steps table reads them back.
    seg = [os.path.join(run_dir, "ranks", n) for n in os.listdir(os.path.join(run_dir, "ranks")) if ".seg-" in n]
    stored = pq.read_table(seg[0]).to_pydict()
    assert all(math.isnan(v) for v in stored["log.loss"]) and set(stored["log.grad_norm"]) == {math.inf}
    table = open_input(run_dir).table
    assert len(table) == steps and table["log.loss"].isna().all()
    assert (table["log.grad_norm"] == np.inf).all() and (table["log.lr_scale"] == -np.inf).all()
    assert table["log.ok_value"].tolist() == [float(i) for i in range(steps)]
    assert set(read_records(run_dir, [])[0]["phases"]) == {"forward"}  # not start/duration as phases
    fault_table.add(
        "bad input",
        f"telemetry.log(loss=nan, grad_norm=inf, lr_scale=-inf) on each of {steps} steps",
        f"finished; {stats['nonfinite_values']} counted in stats()['nonfinite_values'], one warning per "
        "name; /metrics shows NaN, +Inf, -Inf (promtool accepts it); the store and the steps table hold "
        "NaN/inf",
        "nothing",
    )


class _Huge:
    """A number type whose value is too large for a float (as a Fraction or Decimal can be)."""

    def __float__(self):
        raise OverflowError("too large")

    def __gt__(self, other):
        return True


@pytest.mark.parametrize(
    "value, stored",
    [(10**400, math.inf), (-(10**400), -math.inf), (_Huge(), math.inf)],
    ids=["int 10**400", "int -10**400", "a number type over a float's range"],
)
def test_a_number_too_large_for_a_float_is_an_infinity_not_a_lost_batch(value, stored, tmp_path, fault_table):
    import fractions

    from telemetry.analysis.inputs.load import open_input

    run_dir = str(tmp_path / "run")
    telemetry.init(run_dir=run_dir, sinks=["store"], announce=False, online=False, handle_sigterm=False)
    for i in range(4):
        with telemetry.step():
            telemetry.log(big=value if i == 2 else 1.0, frac=fractions.Fraction(10**400, 3) if i == 3 else 0.5)
    stats = telemetry.shutdown()
    assert stats["sinks"]["store"]["failures"] == 0 and stats["sinks"]["store"]["dropped"] == 0, stats["sinks"]
    table = open_input(run_dir).table
    assert len(table) == 4
    assert table["log.big"].tolist() == [1.0, 1.0, stored, 1.0] and table["log.frac"].iloc[3] == math.inf
    assert stats["nonfinite_values"] == 2
    if isinstance(value, int) and value > 0:
        fault_table.add(
            "bad input",
            "telemetry.log(big=10**400) (an int too large for a float), and a Fraction",
            "finished; stored as inf and counted in stats()['nonfinite_values'], like NaN",
            "nothing (before: the store and the Prometheus sink each dropped the whole batch)",
        )


@pytest.mark.parametrize("value", ["1.5", b"2", 1 + 2j, [1.0], None], ids=["str", "bytes", "complex", "list", "None"])
def test_a_value_that_is_not_a_real_number_is_refused_and_counted(value, tmp_path):
    run_dir = str(tmp_path / "run")
    telemetry.init(run_dir=run_dir, sinks=["store"], announce=False, online=False, handle_sigterm=False)
    with telemetry.step():
        telemetry.log(bad=value, good=1.0)
    stats = telemetry.shutdown()
    from telemetry.analysis.inputs.load import open_input

    table = open_input(run_dir).table
    assert "log.bad" not in table.columns and table["log.good"].tolist() == [1.0]
    assert stats["sinks"]["store"]["failures"] == 0


def test_a_complex_tensor_is_refused_not_a_failed_seal(tmp_path):
    torch = pytest.importorskip("torch")
    run_dir = str(tmp_path / "run")
    telemetry.init(
        run_dir=run_dir, sinks=["store"], announce=False, online=False, handle_sigterm=False, collectives=False
    )
    with telemetry.step():
        telemetry.log(z=torch.tensor(1 + 2j), t=torch.tensor(float("nan")), b=torch.tensor(True))
    stats = telemetry.shutdown()
    assert stats["sinks"]["store"]["failures"] == 0 and stats["nonfinite_values"] == 1, stats
    from telemetry.analysis.inputs.load import open_input

    table = open_input(run_dir).table
    assert "log.z" not in table.columns and table["log.t"].isna().all() and table["log.b"].tolist() == [1.0]


@pytest.mark.slow  # serves /metrics and runs promtool
def test_label_values_of_any_text_round_trip_through_metrics_and_promtool(tmp_path, fault_table):
    """Logged names with quotes, backslashes, newlines, braces and unicode, unicode phase names and a job
    name with every character a job may hold: escaped in the exposition, read back unchanged by
    Prometheus's own parser, accepted by promtool."""
    port = free_port_range(1)
    phases = ("vorwärts", "前向", "optimizer")
    job = "a.b:c-d_e9"
    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job=job,
        sinks=["store", "prometheus"],
        prometheus_port=port,
        flush_interval_s=0.05,
        announce=False,
        online=False,
        handle_sigterm=False,
    )
    for _ in range(3):
        with telemetry.step():
            for name in phases:
                with telemetry.phase(name):
                    pass
            telemetry.log(**ODD_NAMES)
    deadline = time.monotonic() + 5
    while telemetry.stats()["records"] < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    text = _metrics(port)
    stats = telemetry.shutdown()
    assert stats["sinks"]["prometheus"]["failures"] == 0
    fams = _families(text)
    logged = {s.labels["name"]: s.value for s in fams["train_log_value"].samples}
    assert logged == ODD_NAMES
    seen_phases = {s.labels["phase"] for s in fams["train_phase_duration_seconds"].samples}
    assert seen_phases == set(phases)
    assert {s.labels["job"] for f in fams.values() for s in f.samples if "job" in s.labels} == {job}
    assert 'name="new\\nline"' in text and 'name="a\\"quote"' in text and 'name="back\\\\slash"' in text
    code, out = _promtool(text)
    assert code == 0, out
    fault_table.add(
        "bad input",
        'logged names with " \\ newline { } = and unicode; unicode phase names',
        f"finished; all {len(ODD_NAMES)} names and {len(phases)} phases read back unchanged from /metrics by "
        "prometheus_client's parser; promtool check metrics: ok",
        "nothing",
    )
