"""`telemetry stack init DIR`: what it writes, checked by the real tools (promtool, amtool, the
Compose Specification's schema, Debian's docker-compose), the compose file's exposure (every
published port on 127.0.0.1, no host networking: the rule tests/faults/test_fault_security.py holds
the repository's compose file to), the paths the configs name against the compose mounts, and how
the stack's Prometheus finds a rank the real Prometheus sink announced. No engine runs here, so
nothing is started in a container."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import resources

import pytest
import yaml

from telemetry import stack
from telemetry.cli import main
from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port, require

CONTRACT = [  # DESIGN.md, "Packaging"
    "prometheus/prometheus.yml",
    "prometheus/recording.rules.yml",
    "prometheus/alerts.rules.yml",
    "prometheus/tests",
    "alertmanager/alertmanager.yml",
    "grafana/provisioning",
    "grafana/dashboards",
    "otel/collector.yml",
    "docker-compose.yml",
    "Dockerfile",
]
BACKENDS = {"prometheus", "alertmanager", "pushgateway", "otel-collector", "jaeger", "grafana", "dashboard"}


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("stack") / "monitoring")
    stack.init_stack(out, out=io.StringIO())
    return out


def load(path: str):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def run(*cmd: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def resolved(stack_dir) -> dict:
    """The compose file as Debian's docker-compose resolves it: relative paths absolute, ${VAR:-default}
    filled in."""
    binary = require("docker-compose", "docker-compose")
    r = run(binary, "-f", os.path.join(stack_dir, "docker-compose.yml"), "config", cwd=stack_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    return yaml.safe_load(r.stdout)


def host_path(service: dict, container_path: str) -> str:
    """The host path that `service`'s bind mounts (resolved, short syntax) put at container_path."""
    best = None
    for v in service.get("volumes", []):
        source, target = v.split(":")[:2]
        if not source.startswith("/"):
            continue  # a named volume
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            if best is None or len(target) > len(best[1]):
                best = (source, target)
    assert best is not None, f"nothing is mounted at {container_path}"
    rest = container_path[len(best[1]) :].lstrip("/")
    return os.path.join(best[0], rest) if rest else best[0]


# ---- what is written ---------------------------------------------------------------------------
def test_writes_the_contracted_files_from_the_package_data(stack_dir):
    for rel in CONTRACT:
        assert os.path.exists(os.path.join(stack_dir, rel)), rel
    assert sorted(os.listdir(os.path.join(stack_dir, "prometheus", "tests"))) == [
        "alerts.test.yml",
        "recording.test.yml",
    ]
    assert len([n for n in os.listdir(os.path.join(stack_dir, "grafana", "dashboards")) if n.endswith(".json")]) >= 5
    src = resources.files("telemetry.dashboards")
    for rel in ("prometheus/alerts.rules.yml", "prometheus/tests/alerts.test.yml", "grafana/dashboards/ranks.json"):
        with open(os.path.join(stack_dir, rel), "rb") as f:
            assert f.read() == src.joinpath(rel).read_bytes(), rel
    for name in ("docker-compose.yml", "Dockerfile"):
        with open(os.path.join(stack_dir, name), encoding="utf-8") as f:
            text = f.read()
        assert "@" not in text.replace("@VERSION@", "") and "@VERSION@" not in text, f"{name}: a placeholder left"
        assert telemetry_version() in text
    # The containers run as other users than the one who ran `stack init`: all of it must be readable.
    for folder, dirs, files in os.walk(stack_dir):
        for name in dirs + files:
            mode = os.stat(os.path.join(folder, name)).st_mode & 0o777
            assert mode & 0o004, f"{os.path.join(folder, name)} is not world-readable ({oct(mode)})"


def telemetry_version() -> str:
    from telemetry.version import __version__

    return __version__


def test_prints_what_was_written_and_the_next_steps(tmp_path, capsys):
    assert main(["stack", "init", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    home = str(tmp_path / "s")
    for want in (
        f" files to {home}",
        "docker compose up -d --build",
        f"promtool test rules {home}/prometheus/tests/*.yml",
        "TELEMETRY_PROMETHEUS_HOST=172.17.0.1",
        f"TELEMETRY_PROMETHEUS_SD_DIR={home}/runs/prometheus_targets",
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
        "TELEMETRY_PUSHGATEWAY_URL=http://127.0.0.1:9091",
        "http://127.0.0.1:3000",
        "http://127.0.0.1:8501",
    ):
        assert want in out, want


# ---- the real checkers -------------------------------------------------------------------------
def test_promtool_check_config(stack_dir):
    promtool = require("promtool", "prometheus")
    r = run(promtool, "check", "config", os.path.join(stack_dir, "prometheus", "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 rule files found" in r.stdout


def test_promtool_check_config_of_the_agent(stack_dir):
    """agent.yml (Prometheus in agent mode, remote-writing to a central store) is written too, and is a
    valid agent-mode config: no rules, no alerting. tests/integration/test_prometheus_agent.py runs it."""
    promtool = require("promtool", "prometheus")
    r = run(promtool, "check", "config", "--agent", os.path.join(stack_dir, "prometheus", "agent.yml"))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_promtool_check_rules(stack_dir):
    promtool = require("promtool", "prometheus")
    rules = [os.path.join(stack_dir, "prometheus", n) for n in ("recording.rules.yml", "alerts.rules.yml")]
    r = run(promtool, "check", "rules", *rules)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow  # promtool evaluates every test series: seconds
def test_promtool_test_rules_the_rules_own_tests_pass(stack_dir):
    """The written tests name the rule files relative to themselves (../*.rules.yml): they pass in place.
    The copies are the package's files byte for byte, so this is also the one run of the rules' own
    tests in the suite (tests/deploy/test_rules.py checks that they can fail)."""
    promtool = require("promtool", "prometheus")
    folder = os.path.join(stack_dir, "prometheus", "tests")
    tests = sorted(os.path.join(folder, n) for n in os.listdir(folder))
    shipped = os.path.join(ROOT, "telemetry", "dashboards", "prometheus")
    for path in [
        *tests,
        *(os.path.join(stack_dir, "prometheus", n) for n in ("alerts.rules.yml", "recording.rules.yml")),
    ]:
        rel = os.path.relpath(path, os.path.join(stack_dir, "prometheus"))
        with open(path, "rb") as a, open(os.path.join(shipped, rel), "rb") as b:
            assert a.read() == b.read(), rel
    r = run(promtool, "test", "rules", *tests)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(tests) == 2, r.stdout


def test_amtool_check_config(stack_dir):
    amtool = require("amtool", "prometheus-alertmanager")
    r = run(amtool, "check-config", os.path.join(stack_dir, "alertmanager", "alertmanager.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_file_against_the_compose_spec_schema(stack_dir):
    checker = shutil.which("check-jsonschema") or os.path.join(os.path.dirname(sys.executable), "check-jsonschema")
    if not os.path.exists(checker):
        pytest.skip("check-jsonschema not installed (the dev extra)")
    r = run(checker, "--builtin-schema", "vendor.compose-spec", os.path.join(stack_dir, "docker-compose.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_docker_compose_config_accepts_it(resolved):
    assert set(resolved["services"]) == BACKENDS
    assert "trainer" not in resolved["services"]  # the job runs where the user runs it


def test_images_are_pinned(stack_dir):
    """Exact releases, never `latest`: the stack a user brings up is the one these tests checked."""
    compose = load(os.path.join(stack_dir, "docker-compose.yml"))
    for name, svc in compose["services"].items():
        image, _, tag = svc["image"].rpartition(":")
        assert image and re.fullmatch(r"v?\d+\.\d+\.\d+([-.][A-Za-z0-9.-]+)?", tag), f"{name}: {svc['image']}"
    assert compose["services"]["dashboard"]["image"].endswith(":" + telemetry_version())


# ---- exposure ----------------------------------------------------------------------------------
def published(service: dict) -> list[tuple[str, str, str]]:
    """(host ip, host port, container port) of each published port, short or long syntax."""
    out = []
    for p in service.get("ports", []):
        if isinstance(p, dict):
            out.append((str(p.get("host_ip", "")), str(p.get("published", "")), str(p["target"])))
            continue
        parts = str(p).split("/")[0].rsplit(":", 2)
        parts = [""] * (3 - len(parts)) + parts
        out.append((parts[0], parts[1], parts[2]))
    return out


def test_every_published_port_binds_loopback_and_no_host_networking(stack_dir, resolved):
    for compose in (load(os.path.join(stack_dir, "docker-compose.yml")), resolved):
        ports = {}
        for name, svc in compose["services"].items():
            assert svc.get("network_mode") != "host", name
            for ip, host_port, target in published(svc):
                assert ip == "127.0.0.1", f"{name}: {target} published on {ip or 'every interface'}"
                assert host_port == target, f"{name}: {target} published on port {host_port!r}"
                ports[name, target] = host_port
        assert {n for n, _ in ports} == BACKENDS
        assert len(ports) == 8, ports


# ---- paths: what the configs name is where the compose file mounts it -------------------------
def test_config_paths_match_the_compose_mounts(stack_dir, resolved):
    services = resolved["services"]
    prom = services["prometheus"]
    config = next(a.split("=", 1)[1] for a in prom["command"] if a.startswith("--config.file="))
    prom_yml = host_path(prom, config)
    assert os.path.samefile(prom_yml, os.path.join(stack_dir, "prometheus", "prometheus.yml"))
    cfg = load(prom_yml)
    for rule in cfg["rule_files"]:
        assert os.path.isfile(host_path(prom, os.path.join(os.path.dirname(config), rule))), rule
    globs = [f for job in cfg["scrape_configs"] for sd in job.get("file_sd_configs", []) for f in sd["files"]]
    assert globs == ["/runs/prometheus_targets/*.json"]
    assert os.path.isdir(os.path.dirname(host_path(prom, globs[0])))
    assert os.path.samefile(host_path(prom, "/runs"), os.path.join(stack_dir, "runs"))
    assert prom.get("extra_hosts") in (["host.docker.internal:host-gateway"], {"host.docker.internal": "host-gateway"})
    # Peers are named by their service and port.
    am = cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"]
    static = {t for job in cfg["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    assert static == {"pushgateway:9091", "localhost:9090", "alertmanager:9093"}

    am_svc = services["alertmanager"]
    am_cfg = next(a.split("=", 1)[1] for a in am_svc["command"] if a.startswith("--config.file="))
    assert os.path.isfile(host_path(am_svc, am_cfg))

    grafana = services["grafana"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning")
    provider = load(os.path.join(provisioning, "dashboards", "training.yml"))["providers"][0]["options"]["path"]
    assert any(n.endswith(".json") for n in os.listdir(host_path(grafana, provider)))
    sources = load(os.path.join(provisioning, "datasources", "prometheus.yml"))["datasources"]
    assert {s["url"] for s in sources} == {"http://prometheus:9090", "http://jaeger:16686"}

    collector = services["otel-collector"]
    flag = next(a for a in collector["command"] if a.startswith("--config="))
    otel = load(host_path(collector, flag.split("=", 1)[1]))
    assert otel["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"

    # The dashboard lists the runs under <working dir>/runs (telemetry dashboard with no path): the
    # same host folder Prometheus reads the targets from.
    dash = services["dashboard"]
    assert dash["command"][0] == "dashboard" and "--host" in dash["command"]
    assert os.path.samefile(host_path(dash, dash["working_dir"] + "/runs"), os.path.join(stack_dir, "runs"))
    assert os.path.samefile(dash["build"]["context"], stack_dir)


def test_runs_folder_can_be_moved_with_an_environment_variable(stack_dir, tmp_path):
    binary = require("docker-compose", "docker-compose")
    env = dict(os.environ, TELEMETRY_RUNS_DIR=str(tmp_path))
    r = run(binary, "-f", os.path.join(stack_dir, "docker-compose.yml"), "config", cwd=stack_dir, env=env)
    assert r.returncode == 0, r.stderr
    services = yaml.safe_load(r.stdout)["services"]
    assert host_path(services["prometheus"], "/runs") == str(tmp_path)
    assert host_path(services["dashboard"], "/data/runs") == str(tmp_path)


def test_dockerfile_installs_the_package_from_wheels_or_the_spec(stack_dir):
    with open(os.path.join(stack_dir, "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0].startswith("FROM python:3.11.")
    assert "COPY wheels/ /wheels/" in lines and os.path.isdir(os.path.join(stack_dir, "wheels"))
    assert f"ARG TELEMETRY_SPEC=training-telemetry[dashboard,otel]=={telemetry_version()}" in lines
    assert any(line.startswith("ARG TORCH_SPEC=torch") for line in lines)
    assert 'ENTRYPOINT ["telemetry"]' in lines and "USER telemetry" in lines


# ---- how Prometheus finds the ranks ----------------------------------------------------------
@pytest.mark.slow  # a real /metrics server (the sink's)
def test_prometheus_finds_a_rank_the_sink_announced(stack_dir, resolved, tmp_path):
    """The real Prometheus sink, run with its run directory under DIR/runs, writes its targets where
    the stack's Prometheus reads them; promtool's service discovery (no scrape: nothing is contacted)
    shows the loopback target rewritten to host.docker.internal (the host, from the container), and
    a bridge address (TELEMETRY_PROMETHEUS_HOST=172.17.0.1 on Linux) and a compose service kept."""
    import telemetry
    from telemetry.exporters.prometheus_targets import target_address

    promtool = require("promtool", "prometheus")
    runs = os.path.join(str(tmp_path), "stack")
    shutil.copytree(stack_dir, runs)
    port = free_port()
    telemetry.init(
        run_dir=os.path.join(runs, "runs", "exp1"),
        job="exp1",
        sinks=["prometheus"],
        prometheus_port=port,
        flush_interval_s=0.05,
        announce=False,
    )
    with telemetry.step():
        pass
    announced = os.path.join(runs, "runs", "prometheus_targets", "exp1.json")
    deadline = time.monotonic() + 10
    while not os.path.exists(announced):
        assert time.monotonic() < deadline, "the sink wrote no targets file"
        time.sleep(0.05)
    with open(announced, encoding="utf-8") as f:
        entries = json.load(f)
    assert entries[0]["targets"] == [f"127.0.0.1:{port}"]
    extra = [
        {"targets": [target_address("172.17.0.1", 9464)], "labels": {"job": "bridge", "rank": "0"}},
        {"targets": ["trainer:9464"], "labels": {"job": "demo", "rank": "0"}},
    ]
    with open(os.path.join(runs, "runs", "prometheus_targets", "others.json"), "w", encoding="utf-8") as f:
        json.dump(extra, f)
    # The config as the container sees it, with its one container path (the targets glob) mapped to
    # the host folder the compose file mounts there.
    prom = resolved["services"]["prometheus"]
    glob = "/runs/prometheus_targets/*.json"
    host_glob = host_path(prom, glob).replace(stack_dir, runs, 1)
    with open(os.path.join(runs, "prometheus", "prometheus.yml"), encoding="utf-8") as f:
        text = f.read()
    assert text.count(glob) == 1
    with open(os.path.join(runs, "prometheus", "sd.yml"), "w", encoding="utf-8") as f:
        f.write(text.replace(glob, host_glob))
    r = run(
        promtool, "check", "service-discovery", "--timeout=1s", os.path.join(runs, "prometheus", "sd.yml"), "training"
    )
    telemetry.shutdown()  # the live job's file: removed at shutdown, so read while the job runs
    assert r.returncode == 0, r.stdout + r.stderr
    found = {t["labels"]["job"]: t["labels"] for t in json.loads(r.stdout)}
    assert found["exp1"]["__address__"] == f"host.docker.internal:{port}"
    assert found["exp1"]["instance"] == f"127.0.0.1:{port}" and found["exp1"]["rank"] == "0"
    assert found["bridge"]["__address__"] == "172.17.0.1:9464"
    assert found["demo"]["__address__"] == "trainer:9464"


# ---- refusal, --force, --wheel ---------------------------------------------------------------
def test_refuses_a_non_empty_dir(tmp_path, capsys):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    assert main(["stack", "init", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "--force" in err and "Traceback" not in err
    assert os.listdir(target) == ["notes.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["stack", "init", str(a_file)]) == 2
    assert "is a file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["stack", "init", str(empty)]) == 0


def test_force_writes_over_the_stack_files_and_leaves_the_rest(tmp_path, capsys):
    target = tmp_path / "s"
    assert main(["stack", "init", str(target)]) == 0
    am = target / "alertmanager" / "alertmanager.yml"
    am.write_text("edited")
    (target / "notes.txt").write_text("keep me")
    assert main(["stack", "init", str(target)]) == 2
    assert am.read_text() == "edited"
    assert main(["stack", "init", str(target), "--force"]) == 0
    assert (
        am.read_bytes()
        == resources.files("telemetry.dashboards").joinpath("alertmanager/alertmanager.yml").read_bytes()
    )
    assert (target / "notes.txt").read_text() == "keep me"
    capsys.readouterr()


def test_wheel_is_copied_for_the_image(tmp_path, capsys):
    wheel = tmp_path / f"training_telemetry-{telemetry_version()}-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    target = tmp_path / "s"
    assert main(["stack", "init", str(target), "--wheel", str(wheel)]) == 0
    assert (target / "wheels" / wheel.name).read_bytes() == b"PK"
    assert f"wheels/{wheel.name} (the image installs this wheel)" in capsys.readouterr().out
    bad = tmp_path / "other-1.0-py3-none-any.whl"
    bad.write_bytes(b"PK")
    assert main(["stack", "init", str(tmp_path / "t"), "--wheel", str(bad)]) == 2
    assert "training_telemetry-" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
