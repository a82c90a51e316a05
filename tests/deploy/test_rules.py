"""The Prometheus rules and the Alertmanager config, checked by the real tools: `promtool check
rules`, `promtool test rules` (every alert fires where it must and stays silent where it must not,
every recording rule has its values checked), `amtool check-config`; and the conventions a user
relies on (names, severities, annotations, runbook sections, metric names that exist)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from telemetry.metrics import names
from tests.helpers.paths import ROOT
from tests.helpers.servers import require

yaml = pytest.importorskip("yaml")

RULES = os.path.join(ROOT, "telemetry", "dashboards", "prometheus")
ALERTS = os.path.join(RULES, "alerts.rules.yml")
RECORDS = os.path.join(RULES, "recording.rules.yml")
TESTS = os.path.join(RULES, "tests")
RUNBOOK = os.path.join(ROOT, "docs", "runbook.md")
ALERTMANAGER = os.path.join(ROOT, "telemetry", "dashboards", "alertmanager", "alertmanager.yml")


def rules(path: str) -> list[dict]:
    with open(path) as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("path", [RECORDS, ALERTS])
def test_promtool_checks_the_rule_files(path):
    promtool = require("promtool", "prometheus")
    out = run(promtool, "check", "rules", path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


# promtool's run of every rule test (both files, in place) is tests/deploy/test_stack.py's
# test_promtool_test_rules_the_rules_own_tests_pass, on `telemetry stack init`'s copies, which it checks
# are these files byte for byte: run here as well, it cost the suite 38 s more on a busy machine.


@pytest.mark.slow  # promtool, as above
def test_the_unit_tests_can_fail(tmp_path):
    """A rule changed under the tests makes them fail: they check values, not only syntax. Only the
    straggler alert's own tests are run against the changed rule (all of them: 28 s on a busy machine)."""
    promtool = require("promtool", "prometheus")
    broken = tmp_path / "alerts.rules.yml"
    broken.write_text(
        open(ALERTS)
        .read()
        .replace(
            "job_rank:train_compute_seconds:ratio_to_job_median > 1.2",
            "job_rank:train_compute_seconds:ratio_to_job_median > 1.1",
        )
    )
    (tmp_path / "recording.rules.yml").write_text(open(RECORDS).read())
    tests = tmp_path / "tests"
    tests.mkdir()
    with open(os.path.join(TESTS, "alerts.test.yml")) as f:
        doc = yaml.safe_load(f)
    doc["tests"] = [t for t in doc["tests"] if t["name"].startswith("TrainingStragglerRank ")]
    assert len(doc["tests"]) >= 3 and any("stays silent on noise" in t["name"] for t in doc["tests"])
    (tests / "alerts.test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run(promtool, "test", "rules", str(tests / "alerts.test.yml"))
    assert out.returncode != 0 and "stays silent on noise" in out.stdout + out.stderr
    # and the same subset passes against the rule as shipped: what failed was the change
    broken.write_text(open(ALERTS).read())
    assert run(promtool, "test", "rules", str(tests / "alerts.test.yml")).returncode == 0


def test_every_alert_fires_and_stays_silent_in_some_test():
    with open(os.path.join(TESTS, "alerts.test.yml")) as f:
        doc = yaml.safe_load(f)
    fired, silent = set(), set()
    for t in doc["tests"]:
        for a in t.get("alert_rule_test", []):
            (fired if a["exp_alerts"] else silent).add(a["alertname"])
    names = {r["alert"] for r in rules(ALERTS)}
    assert len(names) >= 12
    assert names - fired == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested staying silent"


def test_every_recording_rule_has_its_values_tested():
    with open(os.path.join(TESTS, "recording.test.yml")) as f:
        doc = yaml.safe_load(f)
    tested = {e["expr"] for t in doc["tests"] for e in t.get("promql_expr_test", [])}
    records = [r["record"] for r in rules(RECORDS)]
    assert set(records) - tested == set()
    for name in records:  # level:metric:operations
        assert re.fullmatch(r"[a-z_]+:[a-z_]+:[a-z0-9_]+", name), name


def test_alerts_follow_the_conventions_and_have_a_runbook_section():
    with open(RUNBOOK) as f:
        anchors = {
            re.sub(r"[^a-z0-9-]", "", line[3:].strip().lower().replace(" ", "-"))
            for line in f
            if line.startswith("## ")
        }
    for r in rules(ALERTS):
        name = r["alert"]
        assert re.fullmatch(r"Training[A-Z][A-Za-z]+", name), name
        assert r["labels"]["severity"] in ("warning", "critical"), name
        ann = r["annotations"]
        assert ann["summary"] and ann["description"], name
        assert "{{ $labels.job }}" in ann["summary"] + ann["description"], name
        anchor = ann["runbook_url"].split("#", 1)[1]
        assert ann["runbook_url"].startswith("docs/runbook.md#") and anchor in anchors, (name, anchor)
        per_rank = "rank" in r["expr"] or "job_rank:" in r["expr"] or "up{" in r["expr"]
        if per_rank:  # an alert about a rank names it, and its node
            text = ann["summary"] + ann["description"]
            assert "rank }}" in text and "$labels.node" in text, name


def test_counters_that_never_reset_are_alerted_on_their_increase():
    for r in rules(ALERTS):
        for counter in re.findall(r"train_[a-z_]+_total\b", r["expr"]):
            assert re.search(rf"(increase|rate|changes)\(\s*{counter}", r["expr"]), (r["alert"], counter)


def unknown_names(expr: str, recorded: set[str]) -> set[str]:
    """The train_* sample names in ``expr`` that no metric of telemetry.metrics.names exposes (a
    counter read without _total, a histogram without _bucket/_sum/_count, a name that is none of
    ours) and no recording rule records."""
    used = set(re.findall(r"(?<![:a-z_])train_[a-z_]+", expr)) - recorded
    return {n for n in used if names.by_series(n) is None}


def test_the_rules_only_read_metrics_the_exporter_writes():
    """Every train_* name in the rules is a sample name of a metric the package exports (the one
    list the exporter declares its metrics from), or one a recording rule records."""
    recorded = {r["record"] for r in rules(RECORDS)}
    assert unknown_names("rate(train_steps_total[5m]) / train_step_duration_seconds_count", set()) == set()
    assert unknown_names("rate(train_steps[5m]) + train_step_seconds_sum", set()) == {
        "train_steps",
        "train_step_seconds_sum",
    }
    unknown = {}
    for path in (RECORDS, ALERTS):
        for r in rules(path):
            bad = unknown_names(r["expr"], recorded)
            if bad:
                unknown[r.get("alert") or r.get("record")] = sorted(bad)
    assert unknown == {}


def test_the_rules_read_only_metrics_every_metrics_level_exports():
    """A rank at metrics_level job (the least) still exports every train_* series the recording and
    alert rules read: the budget never silences an alert or empties a record."""
    recorded = {r["record"] for r in rules(RECORDS)}
    read = {}
    for path in (RECORDS, ALERTS):
        for r in rules(path):
            for name in set(re.findall(r"(?<![:a-z_])train_[a-z_]+", r["expr"])) - recorded:
                read.setdefault(name, []).append(r.get("alert") or r.get("record"))
    assert "train_collective_bus_bytes_total" in read and "train_step_duration_seconds_bucket" in read
    missing = {n: who for n, who in read.items() if not names.by_series(n).exported_at("job")}
    assert missing == {}


def test_amtool_checks_the_alertmanager_config():
    amtool = require("amtool", "prometheus-alertmanager")
    out = run(amtool, "check-config", ALERTMANAGER)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
