"""Grafana dashboards and provisioning (dashboards/grafana/): their structure, and every panel's PromQL
against a real Prometheus that scrapes a real demo job with our recording rules loaded.

Grafana is not installable here, so what Grafana would refuse or render badly is checked statically:
JSON that parses, a small JSON schema, current panel types only, a datasource, title, unit and place
for every panel, the template variables, the provisioning files and the exemplar link to Jaeger. The
slow test then runs each target's expression, with the template variables substituted as Grafana
would, through Prometheus's query API: each must parse and evaluate, and each must return data
unless it reads something a CPU-only demo cannot have (NO_DATA_ON_CPU_DEMO says what and why)."""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port_range, prometheus, training_scrape_config

GRAFANA = os.path.join(ROOT, "telemetry", "dashboards", "grafana")
DASHBOARD_FILES = sorted(glob.glob(os.path.join(GRAFANA, "dashboards", "*.json")))
DATASOURCES = os.path.join(GRAFANA, "provisioning", "datasources", "prometheus.yml")
PROVIDER = os.path.join(GRAFANA, "provisioning", "dashboards", "training.yml")
RECORDING_RULES = os.path.join(ROOT, "telemetry", "dashboards", "prometheus", "recording.rules.yml")
MOUNT = "/var/lib/grafana/dashboards"  # where docker-compose mounts dashboards/grafana/dashboards/

DEPRECATED = {
    "graph",
    "singlestat",
    "table-old",
    "grafana-piechart-panel",
    "grafana-singlestat-panel",
    "grafana-worldmap-panel",
    "grafana-clock-panel",
    "heatmap-old",
    "graph-old",
}
CURRENT = {
    "timeseries",
    "heatmap",
    "table",
    "stat",
    "bargauge",
    "gauge",
    "barchart",
    "state-timeline",
    "status-history",
    "histogram",
    "text",
    "row",
}
NO_UNIT = {"text", "row"}
# Colour modes that colour-blind viewers can tell apart: a perceptually uniform scheme, or fixed and
# threshold colours taken from the Okabe-Ito palette.
SAFE_COLOUR_MODES = {"continuous-viridis", "fixed", "thresholds"}
OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
SAFE_HEATMAP_SCHEMES = {"Viridis", "Cividis", "Magma", "Inferno", "Plasma"}

# What a CPU-only demo job (no GPU, no CUDA, no FLOPs per token, no fault) cannot export.
NO_DATA_ON_CPU_DEMO = {
    "train_gpu_": "no GPU on this machine: NVML has nothing to read",
    "train_cuda_": "no CUDA on a CPU run: the caching allocator is never read",
    "train_mfu_ratio": "MFU needs flops_per_token (the demo sets none) and a device peak (none for a CPU)",
    "train_findings": "the series appear with online detection's first analysis (0 per kind when it finds nothing)",
    "train_nic_": "no RDMA NIC on this machine (no /sys/class/infiniband): the node's NIC counters are absent",
}

PANEL = {
    "type": "object",
    "required": ["type", "title", "gridPos", "id"],
    "properties": {
        "type": {"type": "string", "enum": sorted(CURRENT)},
        "title": {"type": "string", "minLength": 1},
        "id": {"type": "integer"},
        "gridPos": {
            "type": "object",
            "required": ["x", "y", "w", "h"],
            "properties": {
                "x": {"type": "integer", "minimum": 0, "maximum": 23},
                "y": {"type": "integer", "minimum": 0},
                "w": {"type": "integer", "minimum": 1, "maximum": 24},
                "h": {"type": "integer", "minimum": 1},
            },
        },
        "datasource": {
            "type": "object",
            "required": ["type", "uid"],
            "properties": {"type": {"const": "prometheus"}, "uid": {"const": "prometheus"}},
        },
        "targets": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["refId", "expr"],
                "properties": {
                    "refId": {"type": "string", "minLength": 1},
                    "expr": {"type": "string", "minLength": 1},
                    "datasource": {"type": "object", "properties": {"uid": {"const": "prometheus"}}},
                },
            },
        },
        "fieldConfig": {
            "type": "object",
            "required": ["defaults"],
            "properties": {
                "defaults": {
                    "type": "object",
                    "required": ["unit"],
                    "properties": {"unit": {"type": "string", "minLength": 1}},
                }
            },
        },
    },
    "allOf": [
        {
            "if": {"properties": {"type": {"not": {"enum": sorted(NO_UNIT)}}}},
            "then": {"required": ["datasource", "targets", "fieldConfig"]},
        }
    ],
}
DASHBOARD = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "tags", "panels", "templating", "time", "links"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 39},
        "tags": {"type": "array", "contains": {"const": "training-telemetry"}},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "type", "query", "definition"]},
                }
            },
        },
        "time": {"type": "object", "required": ["from", "to"]},
        "links": {"type": "array"},
    },
}


def load_dashboards() -> dict[str, dict]:
    out = {}
    for path in DASHBOARD_FILES:
        with open(path, encoding="utf-8") as f:
            out[os.path.basename(path)] = json.load(f)
    return out


def all_panels(dash: dict):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", ())  # a collapsed row keeps its panels inside


def all_queries(dash: dict):
    """(panel title, target) for every target, annotations included (their title: 'annotation ...')."""
    for p in all_panels(dash):
        for target in p.get("targets", ()):
            yield p["title"], target
    for a in dash.get("annotations", {}).get("list", ()):
        if a.get("expr"):
            yield f"annotation {a['name']}", a


def read_yaml(path: str):
    """PyYAML (the dev extra), else ruamel.yaml (which check-jsonschema brings)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml
    except ImportError:
        ruamel = pytest.importorskip("ruamel.yaml", reason="no YAML parser: pip install pyyaml (the dev extra)")
        return ruamel.YAML(typ="safe").load(text)
    return yaml.safe_load(text)


# ---- structure (fast, no server) ------------------------------------------------------------------------


def test_five_dashboards_parse_with_unique_uids_and_titles():
    dashboards = load_dashboards()
    assert len(dashboards) == 5, sorted(dashboards)
    uids = [d["uid"] for d in dashboards.values()]
    titles = [d["title"] for d in dashboards.values()]
    assert len(set(uids)) == len(uids) and len(set(titles)) == len(titles)
    for name, d in dashboards.items():
        assert d["schemaVersion"] >= 39, name
        assert d["tags"] == ["training-telemetry"], name
        ids = [p["id"] for p in all_panels(d)]
        assert len(set(ids)) == len(ids), f"{name}: duplicate panel ids"


def test_dashboards_match_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    for name, d in load_dashboards().items():
        errors = sorted(jsonschema.Draft202012Validator(DASHBOARD).iter_errors(d), key=lambda e: list(e.path))
        assert not errors, f"{name}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def test_panels_are_current_types_with_datasource_title_unit_and_place():
    for name, d in load_dashboards().items():
        for p in all_panels(d):
            where = f"{name}: {p.get('title')!r}"
            assert p["type"] not in DEPRECATED, f"{where}: deprecated panel type {p['type']}"
            assert p["type"] in CURRENT, f"{where}: unknown panel type {p['type']}"
            assert p.get("title") and set(p.get("gridPos", {})) >= {"x", "y", "w", "h"}, where
            assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, where
            if p["type"] in NO_UNIT:
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "prometheus"}, where
            assert p["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
            assert p.get("description"), f"{where}: no description"
            assert p["targets"], where
            for target in p["targets"]:
                assert target.get("expr") and target.get("refId"), where
                assert target.get("datasource", p["datasource"])["uid"] == "prometheus", where
            refs = [target["refId"] for target in p["targets"]]
            assert len(set(refs)) == len(refs), f"{where}: duplicate refIds"


def test_panels_do_not_overlap():
    for name, d in load_dashboards().items():
        cells: dict[tuple[int, int], str] = {}
        for p in d["panels"]:
            g = p["gridPos"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, f"{name}: {p['title']!r} overlaps {cells[(x, y)]!r}"
                    cells[(x, y)] = p["title"]


def test_axis_labels_and_colour_blind_safe_colours():
    for name, d in load_dashboards().items():
        for p in all_panels(d):
            where = f"{name}: {p['title']!r}"
            if p["type"] in NO_UNIT:
                continue
            fc = p["fieldConfig"]
            if p["type"] == "timeseries":
                assert fc["defaults"]["custom"].get("axisLabel"), f"{where}: no axis label"
            if p["type"] == "heatmap":
                assert p["options"]["yAxis"].get("axisLabel"), f"{where}: no axis label"
                assert p["options"]["color"]["scheme"] in SAFE_HEATMAP_SCHEMES, where
            configs = [fc["defaults"]] + [
                {prop["id"].split(".")[-1]: prop["value"] for prop in o["properties"]} for o in fc.get("overrides", ())
            ]
            for c in configs:
                colour = c.get("color")
                if colour:
                    assert colour["mode"] in SAFE_COLOUR_MODES, f"{where}: colour mode {colour['mode']}"
                    if colour["mode"] == "fixed":
                        assert colour["fixedColor"] in OKABE_ITO, where
                for step in (c.get("thresholds") or {}).get("steps", ()):
                    assert step["color"] in OKABE_ITO, f"{where}: threshold colour {step['color']}"


def test_template_variables_and_every_query_filters_by_them():
    for name, d in load_dashboards().items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["job"]["definition"] == "label_values(train_steps_total, job)"
        assert variables["node"]["definition"] == 'label_values(train_steps_total{job="$job"}, node)'
        assert variables["rank"]["definition"] == 'label_values(train_steps_total{job="$job", node=~"$node"}, rank)'
        assert not variables["job"]["multi"]
        for v in ("node", "rank"):
            assert variables[v]["multi"] and variables[v]["includeAll"] and variables[v]["allValue"] == ".*"
        for v in variables.values():
            assert v["query"]["query"] == v["definition"] and v["datasource"]["uid"] == "prometheus"
        for title, target in all_queries(d):
            expr = target["expr"]
            assert 'job="$job"' in expr, f"{name}: {title!r} does not filter by job: {expr}"
            # Per-rank series are filtered by the node and rank selection; job-wide records and what
            # only rank 0 exports (online detection) cannot be, and say so in their description.
            if re.search(r"\btrain_(?!findings|straggler_score|straggler_cost)\w+\{", expr) or "job_rank" in expr:
                assert 'node=~"$node"' in expr and 'rank=~"$rank"' in expr, f"{name}: {title!r}: {expr}"
            if "train_straggler_score" in expr or "train_straggler_cost" in expr:
                assert 'scored_rank=~"$rank"' in expr, f"{name}: {title!r}: {expr}"


def test_every_metric_a_panel_reads_is_exported_or_recorded():
    """The train_* names of every query are sample names of telemetry.metrics.names (the exporter's
    one list) or recording rules' outputs: a renamed metric breaks this test, not a live panel."""
    from tests.deploy.test_rules import RECORDS, rules, unknown_names

    recorded = {r["record"] for r in rules(RECORDS)}
    unknown = {}
    for name, d in load_dashboards().items():
        for title, target in all_queries(d):
            bad = unknown_names(target.get("expr", ""), recorded)
            if bad:
                unknown[f"{name}: {title}"] = sorted(bad)
    assert unknown == {}


def test_dashboards_link_to_each_other():
    dashboards = load_dashboards()
    uids = {d["uid"] for d in dashboards.values()}
    for name, d in dashboards.items():
        tag_links = [lk for lk in d["links"] if lk["type"] == "dashboards"]
        assert any("training-telemetry" in lk["tags"] and lk["includeVars"] and lk["keepTime"] for lk in tag_links), (
            name
        )
        for p in all_panels(d):
            for lk in p.get("links", ()):
                uid = re.match(r"/d/([^/?]+)", lk["url"])
                assert uid and uid.group(1) in uids, f"{name}: {p['title']!r} links to {lk['url']}"


def test_units_fit_the_metrics():
    """A panel of seconds is in s, of bytes in bytes or Bps, of ratios in percentunit, and so on."""
    expected = [
        (r"_watts\b", "watt"),
        (r"_celsius\b", "celsius"),
        (r"_hertz\b", "hertz"),
        (r"train_(gpu|cuda)_memory\w*_bytes\b|_resident_memory_bytes\b", "bytes"),
        (r"busbw_bytes_per_second", "Bps"),
        (r"_ratio\b|:ratio", "percentunit"),
    ]
    for name, d in load_dashboards().items():
        for p in all_panels(d):
            for target in p.get("targets", ()):
                for pattern, unit in expected:
                    if re.search(pattern, target["expr"]) and p["type"] != "table":
                        assert p["fieldConfig"]["defaults"]["unit"] == unit, f"{name}: {p['title']!r}"


def test_step_time_panel_has_exemplars_linked_to_jaeger():
    overview = next(d for d in load_dashboards().values() if d["uid"] == "tt-overview")
    exemplar = [(p, target) for p in all_panels(overview) for target in p.get("targets", ()) if target.get("exemplar")]
    assert exemplar, "no target with exemplars on the overview"
    panel, target = exemplar[0]
    assert panel["type"] == "timeseries" and "train_step_duration_seconds_bucket" in target["expr"]
    # a recording rule's series carry no exemplars: only the raw bucket series has them
    assert "job:" not in target["expr"]

    doc = read_yaml(DATASOURCES)
    assert doc["apiVersion"] == 1
    by_uid = {ds["uid"]: ds for ds in doc["datasources"]}
    prom, jaeger = by_uid["prometheus"], by_uid["jaeger"]
    assert prom["type"] == "prometheus" and prom["url"] == "http://prometheus:9090" and prom["isDefault"]
    assert jaeger["type"] == "jaeger" and jaeger["url"] == "http://jaeger:16686"
    assert sum(bool(ds.get("isDefault")) for ds in doc["datasources"]) == 1
    dest = prom["jsonData"]["exemplarTraceIdDestinations"]
    # the exemplar's label, as the exporter sets it on a step whose trace is exported
    from telemetry.exporters.prometheus import PrometheusSink

    sink = SimpleNamespace(_trace_sampled=lambda r: True, _run_info={}, job="j")
    (label,) = PrometheusSink._exemplar(sink, SimpleNamespace(step=7))
    assert dest == [{"name": label, "datasourceUid": "jaeger"}]


def test_dashboard_provider_loads_the_mounted_folder():
    doc = read_yaml(PROVIDER)
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == MOUNT


# ---- PromQL against a real Prometheus scraping a real demo ----------------------------------------------


def substitute(expr: str, job: str) -> str:
    """The expression as Grafana sends it, for the whole job (node and rank 'All')."""
    values = {
        "__rate_interval": "1m",
        "__interval": "15s",
        "__range": "5m",
        "__range_s": "300",
        "job": job,
        "node": ".*",
        "rank": ".*",
    }
    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], expr)
    assert "$" not in out, out
    return out


def no_data_reason(expr: str) -> str | None:
    return next((why for prefix, why in NO_DATA_ON_CPU_DEMO.items() if prefix in expr), None)


def fast_rules(tmp_path) -> str:
    """The recording rules, evaluated every second instead of every 15 s."""
    with open(RECORDING_RULES, encoding="utf-8") as f:
        text = re.sub(r"(?m)^(\s*)interval:\s*\S+\s*$", r"\1interval: 1s", f.read())
    path = tmp_path / "recording.rules.yml"
    path.write_text(text)
    return str(path)


def finite(result: list[dict]) -> list[float]:
    return [v for v in (float(x["value"][1]) for x in result) if math.isfinite(v)]


def panel_target(dashboards: dict, uid: str, title: str, ref: str = "A") -> dict:
    d = next(d for d in dashboards.values() if d["uid"] == uid)
    panel = next(p for p in all_panels(d) if p["title"] == title)
    return next(t for t in panel["targets"] if t["refId"] == ref)


@pytest.mark.slow
def test_every_panel_query_runs_on_a_live_demo(tmp_path):
    """A 4-rank demo whose rank 2 computes its forward twice as long (and saves a checkpoint every 25
    steps): every panel's query evaluates, every one returns data but for what a CPU run cannot have, and
    the ranks dashboard names rank 2."""
    from tests.helpers.otlp_receiver import Receiver  # needs opentelemetry-proto (a dev dependency)
    from tests.helpers.runs import stop_demo

    t0 = time.monotonic()
    job = "grafana"
    run_dir = tmp_path / "runs" / job
    base = free_port_range(4)
    config = training_scrape_config(tmp_path / "runs" / "prometheus_targets", (str(fast_rules(tmp_path)),))
    dashboards = load_dashboards()
    with prometheus(tmp_path, config) as prom, Receiver() as rcv:
        # OTLP on, so that steps carry trace_id exemplars (every 10th step's trace is exported)
        env = {
            **os.environ,
            "TELEMETRY_PROMETHEUS_PORT": str(base),
            "OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url,
            "TELEMETRY_OTLP_SAMPLE_EVERY": "10",
        }
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "telemetry",
                "demo",
                "--ranks",
                "4",
                "--steps",
                "100000",
                "--run-dir",
                str(run_dir),
                "--json",
                "--inject",
                "straggler:rank=2,phase=forward,factor=2",
                "--checkpoint-every",  # DCP saves, for the I/O row's checkpoint panels
                "25",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # the records every dashboard leans on, online detection's scores, then its first finding
            # (about 10 s after the first scores); without a finding its panels are allowed to be empty
            prom.wait_for(
                f'job_rank:train_compute_seconds:ratio_to_job_median{{job="{job}"}}',
                lambda r: len(finite(r)) == 4,
                timeout=90,
            )
            prom.wait_for(
                f'job_op:train_collective_busbw_bytes_per_second:rate5m{{job="{job}"}}',
                lambda r: len(finite(r)) >= 1,
                timeout=20,
            )
            prom.wait_for(f'train_straggler_score{{job="{job}"}}', lambda r: len(r) == 4, timeout=30)
            try:
                prom.wait_for(f'train_findings{{job="{job}"}}', bool, timeout=25)
            except AssertionError:
                print("online detection reported no finding in time: its panels may be empty")
            ready_s = time.monotonic() - t0

            # the template variables, as Grafana asks for label_values(selector, label)
            found = {}
            for v in dashboards["job-overview.json"]["templating"]["list"]:
                selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", v["definition"]).groups()
                found[v["name"]] = prom.api(f"label/{label}/values", **{"match[]": substitute(selector, job)})
            assert job in found["job"] and found["node"] and sorted(found["rank"]) == ["0", "1", "2", "3"]

            empty, failed, n = [], [], 0
            for name, d in dashboards.items():
                for title, target in all_queries(d):
                    n += 1
                    expr = substitute(target["expr"], job)
                    try:
                        result = prom.query(expr)
                        if not result:  # evaluated, but nothing now: anything in the last minute?
                            now = time.time()
                            result = prom.api("query_range", query=expr, start=now - 60, end=now, step=1)["result"]
                    except AssertionError as exc:  # Prometheus's answer was not success
                        failed.append(f"{name}: {title!r}: {expr}: {exc}")
                        continue
                    if not result:
                        empty.append((name, title, expr, no_data_reason(expr)))
            assert not failed, "\n".join(failed)
            unexplained = [e for e in empty if e[3] is None]
            assert not unexplained, "\n".join(f"{n}: {t!r} returned no data: {x}" for n, t, x, _ in unexplained)

            # what a user looks for: the straggler table's first row and the brightest heatmap row
            # (one query) are rank 2, and so is online detection's highest score
            # The 1-minute window still holds the demo's first seconds (four ranks on two cores: the
            # scheduler can hold any rank back for a while), so wait for it to settle, bounded.
            def top(label):
                return lambda r: bool(r) and max(r, key=lambda x: float(x["value"][1]))["metric"][label] == "2"

            prom.wait_for(
                substitute(
                    panel_target(dashboards, "tt-ranks", "Stragglers: ranks by compute vs the job median")["expr"], job
                ),
                top("rank"),
                timeout=45,
            )
            prom.wait_for(
                substitute(
                    panel_target(dashboards, "tt-overview", "Straggler cost and score by rank (online detection)", "B")[
                        "expr"
                    ],
                    job,
                ),
                top("scored_rank"),
                timeout=45,
            )

            # exemplars: Grafana asks query_exemplars with the step-time panel's own expression
            (target,) = [x for _, x in all_queries(dashboards["job-overview.json"]) if x.get("exemplar")]
            now = time.time()
            ex = prom.api("query_exemplars", query=substitute(target["expr"], job), start=now - 300, end=now + 5)
            labels = [e["labels"] for block in ex for e in block["exemplars"]]
            assert labels and all(len(lb["trace_id"]) == 32 for lb in labels), ex
        finally:
            stop_demo(demo, run_dir)
    for name, title, _, why in empty:
        print(f"no data on the CPU demo: {name}: {title!r}: {why}")
    print(f"ready after {ready_s:.1f} s; {n} queries, {len(empty)} without data; {time.monotonic() - t0:.1f} s")
