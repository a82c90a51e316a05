"""Every Prometheus configuration and every rule the documentation shows is one Prometheus accepts,
and its file_sd globs find the targets files our sink writes.

Every ```yaml block of README.md and of every docs/**/*.md is read. Among them there must be at least
one scrape configuration and at least one set of rules: a page that stops showing either fails here
rather than leaving nothing to check. A scrape configuration (a ``scrape_configs:`` document, or a
bare ``- job_name:`` fragment, which is wrapped into one) is checked with ``promtool check config``,
after ``/path/to/`` is rewritten to a temporary directory in which a real Prometheus sink of a run in
``/path/to/runs/<job>`` has written its targets. promtool rejects a glob that is not in the last path
element and checks every targets file a glob matches; the test also requires each glob to match at
least one file. Other referenced files are created empty. A ``groups:`` block (alerting or recording
rules) is checked with ``promtool check rules``. Other blocks (a Kubernetes env list, say) are not
Prometheus's and are left alone."""

import glob
import os
import re
import subprocess
import textwrap
import time

import pytest

import telemetry
from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port, require

FENCE = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)


def pages() -> list[str]:
    """README.md and every Markdown page under docs/, as paths relative to the repository."""
    docs = glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    return ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in docs)


def blocks_of(page: str) -> list[tuple[str, str]]:
    """(PAGE:LINE of its fence, block) for each ```yaml block of the page."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    return [(f"{page}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1)) for m in FENCE.finditer(text)]


def is_scrape_config(block: str) -> bool:
    return bool(re.search(r"^scrape_configs:", block, re.M) or re.match(r"\s*- job_name:", block))


def as_prometheus_yml(block: str) -> str:
    if re.search(r"^scrape_configs:", block, re.M):
        return block
    return "scrape_configs:\n" + textwrap.indent(textwrap.dedent(block), "  ")


def run_sink_in(base: str, job: str = "readme") -> None:
    """A real rank-0 Prometheus sink of a run in BASE/runs/JOB, as the docs lay runs out."""
    session = telemetry.init(
        run_dir=os.path.join(base, "runs", job),
        job=job,
        sinks=["prometheus"],
        prometheus_port=free_port(),
        flush_interval_s=60.0,
    )
    with telemetry.step():
        time.sleep(0.001)
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers


def referenced_paths(config: str, base: str) -> list[str]:
    return re.findall(re.escape(base) + r"/[^\s\"',\]}]+", config)


def check_config(block: str, base: str, promtool: str) -> None:
    config = as_prometheus_yml(block).replace("/path/to/", base + "/")
    for path in referenced_paths(config, base):
        if glob.has_magic(path):
            assert glob.glob(path), (
                f"the glob {path!r} matches none of the files the sink wrote: "
                f"{sorted(glob.glob(base + '/**', recursive=True))}"
            )
        elif not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
    cfg = os.path.join(base, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(config)
    proc = subprocess.run([promtool, "check", "config", cfg], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"promtool rejects this configuration\n{block}\n{proc.stdout}{proc.stderr}"


PAGES = pages()
BLOCKS = [b for page in PAGES for b in blocks_of(page)]
SCRAPE = [(where, b) for where, b in BLOCKS if is_scrape_config(b)]
RULES = [(where, b) for where, b in BLOCKS if re.search(r"^groups:", b, re.M)]
NONE_SHOWN = "no ```yaml block of {pages} holds {what}"


def test_the_docs_show_a_scrape_configuration_and_rules():
    assert SCRAPE, NONE_SHOWN.format(pages=", ".join(PAGES), what="a Prometheus scrape configuration")
    assert RULES, NONE_SHOWN.format(pages=", ".join(PAGES), what="Prometheus rules (a `groups:` document)")


@pytest.mark.parametrize("where, block", SCRAPE, ids=[where for where, _ in SCRAPE])
def test_scrape_configuration_passes_promtool(where, block, tmp_path):
    promtool = require("promtool", "prometheus")
    run_sink_in(str(tmp_path))
    check_config(block, str(tmp_path), promtool)


def test_rules_pass_promtool(tmp_path):
    # not parametrized: with no rules block at all this fails, where a parametrization over none
    # would only be skipped
    assert RULES, NONE_SHOWN.format(pages=", ".join(PAGES), what="Prometheus rules (a `groups:` document)")
    promtool = require("promtool", "prometheus")
    for i, (where, block) in enumerate(RULES):
        path = tmp_path / f"rules{i}.yml"
        path.write_text(block)
        proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"promtool rejects the rules at {where}\n{block}\n{proc.stdout}{proc.stderr}"


def test_the_checker_rejects_the_old_glob_and_accepts_the_shared_directory(tmp_path):
    """The check itself, on the snippet the README once had (a wildcard in a middle path element) and on
    the shared targets directory, so that it is known to catch what it is for."""
    promtool = require("promtool", "prometheus")
    run_sink_in(str(tmp_path))
    old = (
        "scrape_configs:\n  - job_name: training\n    honor_labels: true\n"
        '    file_sd_configs: [{files: ["/path/to/runs/*/prometheus_targets.json"], refresh_interval: 5s}]\n'
    )
    with pytest.raises(AssertionError, match="is not valid for file discovery"):
        check_config(old, str(tmp_path), promtool)
    fragment = (
        "- job_name: training\n  honor_labels: true\n"
        '  file_sd_configs: [{files: ["/path/to/runs/prometheus_targets/*.json"]}]\n'
    )
    check_config(fragment, str(tmp_path), promtool)
    with pytest.raises(AssertionError, match="matches none of the files"):
        check_config(fragment.replace("prometheus_targets/*.json", "targets/*.json"), str(tmp_path), promtool)
