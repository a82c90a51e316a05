"""The monitoring stack's docker-compose.yml and every config it mounts, checked without Docker.

No engine runs here, so the compose file is validated statically: against the Compose
Specification's JSON schema (check-jsonschema's vendored copy) and by Debian's ``docker-compose
config``, plus what neither checks (mounted paths exist, published ports bind 127.0.0.1, images are
pinned, services name each other consistently). Each config it mounts goes through its own real
checker (promtool, amtool) where installed, and the Prometheus config is loaded by a real
Prometheus (paths and peers rewritten to a temporary directory and 127.0.0.1). The OpenTelemetry
Collector has no checker installable here: its config is checked for structure."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port, http_get, prometheus, require

COMPOSE = os.path.join(ROOT, "docker-compose.yml")
PROMETHEUS_YML = os.path.join(ROOT, "telemetry", "dashboards", "prometheus", "prometheus.yml")
ALERTMANAGER_YML = os.path.join(ROOT, "telemetry", "dashboards", "alertmanager", "alertmanager.yml")
COLLECTOR_YML = os.path.join(ROOT, "telemetry", "dashboards", "otel", "collector.yml")

# The UIs and APIs a user opens, by the container port each service publishes.
PUBLISHED = {
    "prometheus": 9090,
    "alertmanager": 9093,
    "pushgateway": 9091,
    "grafana": 3000,
    "jaeger": 16686,
    "dashboard": 8501,
}
# An exact release: 1.2.3, v1.2.3, 3.11.13-slim-bookworm (a variant after the version is fine).
PINNED_TAG = re.compile(r"^v?\d+\.\d+\.\d+([-.][A-Za-z0-9.-]+)?$")


def load_yaml(path: str):
    """PyYAML (dev extra), else ruamel.yaml (which check-jsonschema brings)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if importlib.util.find_spec("yaml") is not None:
        import yaml

        return yaml.safe_load(text)
    ruamel = pytest.importorskip("ruamel.yaml", reason="no YAML parser: pip install pyyaml (the dev extra)")
    return ruamel.YAML(typ="safe", pure=True).load(text)


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def prom_config() -> dict:
    return load_yaml(PROMETHEUS_YML)


def mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of each volume entry, short or long syntax."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            out.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
        else:
            out.append((v.get("source", ""), v["target"], bool(v.get("read_only"))))
    return out


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def host_path(service: dict, container_path: str) -> str | None:
    """The repository path a bind mount puts at container_path, or None if no bind mount does."""
    for source, target, _ in sorted(mounts(service), key=lambda m: -len(m[1])):
        if is_bind(source) and (container_path == target or container_path.startswith(target.rstrip("/") + "/")):
            rest = container_path[len(target) :].lstrip("/")
            return os.path.normpath(os.path.join(ROOT, source, rest))
    return None


def ports(service: dict) -> list[tuple[str, str, int]]:
    """(host ip, published port, container port) of each published port, short or long syntax."""
    out = []
    for p in service.get("ports", []):
        if isinstance(p, dict):
            out.append((p.get("host_ip", ""), str(p.get("published", "")), int(p["target"])))
            continue
        spec = str(p).split("/")[0]
        parts = spec.rsplit(":", 2)
        if len(parts) == 3:
            out.append((parts[0], parts[1], int(parts[2])))
        elif len(parts) == 2:
            out.append(("", parts[0], int(parts[1])))
        else:
            out.append(("", "", int(parts[0])))
    return out


def flags(command: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in command if a.startswith("--"))


def host_port(address: str) -> tuple[str, int]:
    address = re.sub(r"^[a-z]+://", "", address).split("/")[0]
    host, _, port = address.rpartition(":")
    return host, int(port)


# ---- the compose file ------------------------------------------------------------------------


def test_compose_validates_against_the_compose_spec():
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.skip("check-jsonschema not installed (PyPI package check-jsonschema, in the dev extra)")
    r = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", COMPOSE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_docker_compose_config_accepts_it(tmp_path):
    binary = require("docker-compose", "docker-compose")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}
    env["HOME"] = str(tmp_path)  # nothing from a user's ~/.docker
    r = subprocess.run(
        [binary, "-f", COMPOSE, "config", "--quiet"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_mounted_and_built_path_exists(compose):
    missing = []
    for name, svc in compose["services"].items():
        for source, target, _ in mounts(svc):
            if is_bind(source) and not os.path.exists(os.path.join(ROOT, source)):
                missing.append(f"{name}: {source} (-> {target})")
        build = svc.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            for path in (context, os.path.join(context, dockerfile)):
                if not os.path.exists(os.path.join(ROOT, path)):
                    missing.append(f"{name}: build {path}")
    assert not missing, f"paths the compose file uses that the repository lacks: {missing}"


def test_named_volumes_are_declared(compose):
    declared = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for source, _target, _ in mounts(svc):
            if source and not is_bind(source):
                assert source in declared, f"{name} mounts volume {source!r}, not declared at the top level"


def test_every_published_port_binds_loopback(compose):
    seen = {}
    for name, svc in compose["services"].items():
        for ip, published, target in ports(svc):
            assert ip == "127.0.0.1", f"{name} publishes {target} on {ip or 'every interface'}"
            assert published, f"{name} publishes {target} on a random host port"
            seen.setdefault(name, set()).add(target)
    for name, port in PUBLISHED.items():
        assert port in seen.get(name, ()), f"{name} does not publish {port}"


def test_every_image_is_pinned(compose):
    for name, svc in compose["services"].items():
        image = svc.get("image")
        assert image, f"{name} has no image (built services are tagged too)"
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{name}: {image!r} has no tag"
        assert tag != "latest" and PINNED_TAG.match(tag), f"{name}: {image!r} is not pinned to a release"


def test_dockerfile_is_pinned_and_copies_what_exists():
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert bases, "Dockerfile has no FROM"
    for base in bases:
        tag = base.rpartition(":")[2]
        assert ":" in base and PINNED_TAG.match(tag), f"base image {base!r} is not pinned"
    for line in re.findall(r"^COPY\s+(.+)$", text, re.M):
        for source in line.split()[:-1]:
            assert os.path.exists(os.path.join(ROOT, source)), f"Dockerfile copies {source}, which is missing"
    with open(os.path.join(ROOT, "constraints-cpu.txt"), encoding="utf-8") as f:
        pinned = re.search(r"^torch==(\S+)", f.read(), re.M).group(1)
    assert f"torch=={pinned}" in text, "the image's torch differs from constraints-cpu.txt"
    with open(os.path.join(ROOT, ".dockerignore"), encoding="utf-8") as f:
        ignored = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    assert {".venv", ".git", "runs"} <= ignored


def test_telemetry_commands_parse(compose):
    """trainer and dashboard run the image's entry point, `telemetry`: their arguments are ones the
    CLI accepts."""
    from telemetry.cli import build_parser

    parser = build_parser()
    for name in ("trainer", "dashboard"):
        args = parser.parse_args(compose["services"][name]["command"])
        assert args.command == {"trainer": "demo", "dashboard": "dashboard"}[name]
    dash = parser.parse_args(compose["services"]["dashboard"]["command"])
    assert dash.host == "0.0.0.0" and dash.port == 8501
    assert ("runs", "/runs", True) in mounts(compose["services"]["dashboard"]), "the dashboard reads runs read-only"


def test_trainer_settings_are_real_and_wired(compose, prom_config, monkeypatch):
    """The trainer's TELEMETRY_* variables are real settings; its targets land where Prometheus's
    file_sd looks, and name an address Prometheus can reach from its own container."""
    import dataclasses

    from telemetry.config import ENV_PREFIX, Config
    from telemetry.exporters import prometheus_targets

    services = compose["services"]
    trainer = services["trainer"]
    env = trainer["environment"]
    fields = {f.name for f in dataclasses.fields(Config)}
    for key in env:
        if key.startswith(ENV_PREFIX):
            assert key[len(ENV_PREFIX) :].lower() in fields, f"{key} is no setting of telemetry.config.Config"
    cfg = Config.resolve({}, environ={k: str(v) for k, v in env.items()})
    assert "otlp" in cfg.sinks and "prometheus" in cfg.sinks
    # A rank both scraped and pushing is in Prometheus twice (with and without `instance`), and
    # every sum over ranks doubles: the scraped trainer does not push.
    assert not cfg.pushgateway_url

    # Rank processes bound to 0.0.0.0 advertise socket.getfqdn(): the container's hostname.
    assert cfg.prometheus_host == "0.0.0.0"
    hostname = trainer.get("hostname")
    assert hostname in services, "the trainer's hostname must be a name the compose network resolves"
    monkeypatch.setattr(prometheus_targets.socket, "getfqdn", lambda *a: hostname)
    assert prometheus_targets.target_address(cfg.prometheus_host, cfg.prometheus_port) == f"{hostname}:9464"

    # Its shared targets directory is the one the training job's file_sd glob watches, on a volume
    # the trainer writes and Prometheus reads.
    training = next(j for j in prom_config["scrape_configs"] if j["job_name"] == "training")
    assert training.get("honor_labels") is True
    globs = [f for sd in training["file_sd_configs"] for f in sd["files"]]
    assert os.path.join(cfg.prometheus_sd_dir, "*.json") in globs

    def volume_at(service: dict, path: str) -> str | None:
        for source, target, _ in mounts(service):
            if not is_bind(source) and (path + "/").startswith(target.rstrip("/") + "/"):
                return source
        return None

    assert (
        volume_at(trainer, cfg.prometheus_sd_dir) == volume_at(services["prometheus"], cfg.prometheus_sd_dir) == "runs"
    )

    # OTLP goes to the collector's HTTP receiver.
    host, port = host_port(cfg.otlp_endpoint)
    assert host == "otel-collector" and host in services
    receivers = load_yaml(COLLECTOR_YML)["receivers"]["otlp"]["protocols"]
    assert port == host_port(receivers["http"]["endpoint"])[1]


def test_services_reach_each_other_by_name(compose, prom_config):
    services = compose["services"]
    for am in prom_config["alerting"]["alertmanagers"]:
        for sc in am["static_configs"]:
            for target in sc["targets"]:
                assert host_port(target) == ("alertmanager", 9093), target
    for job in prom_config["scrape_configs"]:
        for sc in job.get("static_configs", []):
            for target in sc["targets"]:
                host = host_port(target)[0]
                assert host == "localhost" or host in services, f"{job['job_name']}: {target}"
    pushgateway = next(j for j in prom_config["scrape_configs"] if j["job_name"] == "pushgateway")
    assert pushgateway.get("honor_labels") is True
    jaeger = load_yaml(COLLECTOR_YML)["exporters"]["otlp/jaeger"]
    assert host_port(jaeger["endpoint"]) == ("jaeger", 4317) and jaeger["tls"]["insecure"] is True
    assert str(services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"]).lower() == "true"
    for name, svc in services.items():
        for dep in svc.get("depends_on") or {}:
            assert dep in services, f"{name} depends on {dep!r}, no such service"
            cond = svc["depends_on"][dep]["condition"] if isinstance(svc["depends_on"], dict) else ""
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy: it has no healthcheck"


def test_mounted_configs_are_the_repository_files(compose):
    """The config files the daemons are told to read are the repository's, through their mounts."""
    services = compose["services"]
    prom = flags(services["prometheus"]["command"])
    assert host_path(services["prometheus"], prom["config.file"]) == PROMETHEUS_YML
    assert "exemplar-storage" in prom["enable-feature"].split(",")
    am = flags(services["alertmanager"]["command"])
    assert host_path(services["alertmanager"], am["config.file"]) == ALERTMANAGER_YML
    assert am["cluster.listen-address"] == ""
    otel = flags(services["otel-collector"]["command"])
    assert host_path(services["otel-collector"], otel["config"]) == COLLECTOR_YML
    grafana = services["grafana"]
    assert host_path(grafana, "/etc/grafana/provisioning") == os.path.join(
        ROOT, "telemetry", "dashboards", "grafana", "provisioning"
    )
    assert host_path(grafana, "/var/lib/grafana/dashboards") == os.path.join(
        ROOT, "telemetry", "dashboards", "grafana", "dashboards"
    )
    assert str(grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"]).lower() == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


@pytest.mark.parametrize(
    "service,binary,package",
    [
        ("prometheus", "prometheus", "prometheus"),
        ("alertmanager", "prometheus-alertmanager", "prometheus-alertmanager"),
        ("pushgateway", "prometheus-pushgateway", "prometheus-pushgateway"),
    ],
)
def test_daemon_flags_exist(compose, service, binary, package):
    """Every flag given to the daemon is one it knows (checked against Debian's build, an older
    release than the pinned image: a flag it knows, the image knows too)."""
    path = require(binary, package)
    help_text = subprocess.run([path, "--help-long"], capture_output=True, text=True, timeout=30)
    known = set(re.findall(r"--([a-z][a-z0-9.-]*)", help_text.stdout + help_text.stderr))
    given = set(flags(compose["services"][service]["command"]))
    assert given <= known, f"{service}: unknown flags {sorted(given - known)}"


# ---- the configs it mounts, through their real checkers ------------------------------------------


def rule_paths(prom_config: dict) -> list[str]:
    base = os.path.dirname(PROMETHEUS_YML)
    return [os.path.join(base, p) for p in prom_config.get("rule_files", [])]


def test_promtool_check_config_as_written(prom_config):
    """promtool reads the rule files the config names, each of which must be there."""
    promtool = require("promtool", "prometheus")
    r = subprocess.run([promtool, "check", "config", PROMETHEUS_YML], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_check_config_with_the_rules_by_absolute_path(prom_config, tmp_path):
    """Every rule file the config names is in the repository, and the config with them given by
    absolute path (as a copy of it elsewhere would name them) passes promtool too."""
    promtool = require("promtool", "prometheus")
    missing = [os.path.relpath(p, ROOT) for p in rule_paths(prom_config) if not os.path.exists(p)]
    assert not missing, f"prometheus.yml names rule files the repository lacks: {missing}"
    cfg = dict(prom_config, rule_files=rule_paths(prom_config))
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("rule_file", ["recording.rules.yml", "alerts.rules.yml"])
def test_promtool_check_rules(prom_config, rule_file):
    promtool = require("promtool", "prometheus")
    assert rule_file in prom_config["rule_files"]
    path = os.path.join(os.path.dirname(PROMETHEUS_YML), rule_file)
    assert os.path.exists(path), f"{os.path.relpath(path, ROOT)} is missing"
    r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_amtool_check_config():
    amtool = require("amtool", "prometheus-alertmanager")
    r = subprocess.run([amtool, "check-config", ALERTMANAGER_YML], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_collector_config_is_complete():
    """Every component a pipeline names is defined (the collector refuses to start otherwise), and
    the receivers listen where the trainer sends."""
    cfg = load_yaml(COLLECTOR_YML)
    service = cfg["service"]
    for ext in service.get("extensions", []):
        assert ext in (cfg.get("extensions") or {}), f"extension {ext!r} is not defined"
    pipelines = service["pipelines"]
    assert "traces" in pipelines
    for name, pipe in pipelines.items():
        assert name.split("/")[0] in ("traces", "metrics", "logs"), name
        assert pipe.get("receivers") and pipe.get("exporters"), f"pipeline {name} needs receivers and exporters"
        for kind in ("receivers", "processors", "exporters"):
            for comp in pipe.get(kind, []):
                assert comp in (cfg.get(kind) or {}), f"pipeline {name}: {kind[:-1]} {comp!r} is not defined"
    assert "otlp/jaeger" in pipelines["traces"]["exporters"]
    assert "batch" in pipelines["traces"]["processors"]
    protocols = cfg["receivers"]["otlp"]["protocols"]
    # In a container the receivers must listen beyond loopback (the collector's default is localhost).
    assert host_port(protocols["http"]["endpoint"]) == ("0.0.0.0", 4318)
    assert host_port(protocols["grpc"]["endpoint"]) == ("0.0.0.0", 4317)


# ---- the Prometheus config in a real Prometheus ------------------------------------------------


def rule_groups(paths: list[str]) -> set[str]:
    return {g["name"] for p in paths for g in (load_yaml(p) or {}).get("groups", [])}


@pytest.mark.slow
def test_prometheus_loads_the_config(prom_config, tmp_path):
    """The compose config, its file_sd directory, rule files and peers rewritten to a temporary
    directory and 127.0.0.1, loads in a real Prometheus: the config is served back, every rule
    group of the rule files is loaded, the file_sd glob finds a targets file the way the trainer
    writes it, and the alertmanager is in use."""
    rules = rule_paths(prom_config)
    targets_dir = tmp_path / "prometheus_targets"
    targets_dir.mkdir()
    rank_port = free_port()
    (targets_dir / "demo.json").write_text(
        json.dumps([{"targets": [f"127.0.0.1:{rank_port}"], "labels": {"job": "demo", "rank": "0", "local_rank": "0"}}])
    )
    am_port = free_port()
    cfg = json.loads(json.dumps(prom_config))
    cfg["rule_files"] = rules
    cfg["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
    for job in cfg["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [os.path.join(str(targets_dir), os.path.basename(f)) for f in sd["files"]]
        for sc in job.get("static_configs", []):
            sc["targets"] = [f"127.0.0.1:{free_port()}" for _ in sc["targets"]]
    t0 = time.monotonic()
    with prometheus(tmp_path, json.dumps(cfg)) as prom:
        status = prom.api("status/config")["yaml"]
        for job in prom_config["scrape_configs"]:
            assert f"job_name: {job['job_name']}" in status
        loaded = {g["name"] for g in prom.api("rules")["groups"]}
        assert loaded == rule_groups(rules) and loaded
        deadline = time.monotonic() + 20
        while True:
            active = prom.api("targets")["activeTargets"]
            training = [t for t in active if t["scrapePool"] == "training"]
            ams = prom.api("alertmanagers")["activeAlertmanagers"]
            if training and ams:
                break
            assert time.monotonic() < deadline, f"targets {active}, alertmanagers {ams}"
            time.sleep(0.2)
        assert training[0]["labels"]["job"] == "demo" and training[0]["labels"]["rank"] == "0"
        assert ams[0]["url"].startswith(f"http://127.0.0.1:{am_port}/")
        flags_doc = json.loads(http_get(f"{prom.url}/api/v1/status/flags"))["data"]
        assert "exemplar-storage" in flags_doc["enable-feature"]
    print(f"prometheus loaded the compose config in {time.monotonic() - t0:.1f} s")
