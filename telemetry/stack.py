"""``telemetry stack init DIR [--force] [--wheel WHEEL]``: the monitoring stack, written out of the
installed package for a pip user (:func:`init_stack`).

Everything comes from the package's data (:mod:`importlib.resources`), so it works from a wheel: the
Prometheus, Alertmanager, Grafana and collector files (and ``agent.yml``, for Prometheus in agent mode,
not used by the compose file), ``docker-compose.yml``, the dashboard's ``Dockerfile`` with ``wheels/``,
and ``runs/`` for the jobs' run directories. The training job is not in the compose file: it runs on
the host and its ranks serve ``/metrics`` there; how the containerized Prometheus reaches them on
Docker Desktop and on Linux, and the limits of each way: docs/stack.md, "For a pip user".
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib import resources
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

from .version import __version__

DIST = "training-telemetry"
# The monitoring files' folders in package telemetry.dashboards, written under the same names.
CONFIG_DIRS = ("prometheus", "alertmanager", "grafana", "otel")
# Templates in telemetry.dashboards/stack, written at the top of DIR with their @NAME@ filled in.
TEMPLATES = ("docker-compose.yml", "Dockerfile")
WHEELS, RUNS = "wheels", "runs"
FILE_MODE, DIR_MODE = 0o644, 0o755  # the containers run as other users: they must read what we write
SUFFIXES = (".yml", ".yaml", ".json", "Dockerfile")


class StackError(Exception):
    """A sentence for the user: what is wrong, and what is accepted."""


def _source() -> Traversable:
    return resources.files("telemetry.dashboards")


def _walk(node: Traversable, rel: str) -> list[tuple[str, Traversable]]:
    """(relative path, file) of every monitoring file under ``node`` (no Python, no caches)."""
    out = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        path = f"{rel}/{child.name}"
        if child.is_dir():
            if child.name != "__pycache__":
                out.extend(_walk(child, path))
        elif child.name.endswith(SUFFIXES):
            out.append((path, child))
    return out


def _torch_spec() -> str:
    """The torch the image installs: the release installed here (its local tag, e.g. +cpu, dropped)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "torch==" + version("torch").split("+")[0]
    except PackageNotFoundError:
        return "torch"


def installed_from() -> tuple[str, str] | None:
    """Where pip installed this package from, when it recorded it (PEP 610): ("wheel", the file, if
    it is still there) or ("checkout", its folder); None for an index."""
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlparse

    try:
        doc = json.loads(distribution(DIST).read_text("direct_url.json") or "null")
    except (PackageNotFoundError, ValueError):
        return None
    url = doc.get("url") if isinstance(doc, dict) else None
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    path = unquote(urlparse(url).path)
    if path.endswith(".whl"):
        return ("wheel", path) if os.path.isfile(path) else None
    return ("checkout", path) if os.path.isdir(path) else None


def installed_wheel() -> str | None:
    """The wheel file this package was installed from, when pip recorded one and it is still there."""
    found = installed_from()
    return found[1] if found and found[0] == "wheel" else None


def _check_wheel(path: str) -> str:
    name = os.path.basename(path)
    if not (name.startswith("training_telemetry-") and name.endswith(".whl")):
        raise StackError(f"--wheel {path!r}: accepted: a training_telemetry-<version>-*.whl file")
    if not os.path.isfile(path):
        raise StackError(f"--wheel {path!r} does not exist")
    return path


def _check_dir(dest: str, force: bool) -> None:
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise StackError(f"{dest!r} is a file; accepted: a new or empty directory")
    if os.path.isdir(dest) and not force:
        try:
            entries = os.listdir(dest)
        except OSError as exc:
            raise StackError(f"cannot read {dest!r}: {exc.strerror}") from None
        if entries:
            raise StackError(
                f"{dest!r} is not empty ({len(entries)} entr{'ies' if len(entries) != 1 else 'y'}); accepted: a new "
                "or empty directory, or --force to write the stack's files over it (other files are left as they are)"
            )


def _write(dest: str, rel: str, data: bytes) -> None:
    """``dest/rel``, and each folder on the way below ``dest``, readable by everyone (the umask aside)."""
    folder = dest
    for part in rel.split("/")[:-1]:
        folder = os.path.join(folder, part)
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, DIR_MODE)
    path = os.path.join(dest, *rel.split("/"))
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, FILE_MODE)


def init_stack(dest: str, force: bool = False, wheel: str | None = None, out: TextIO | None = None) -> list[str]:
    """Write the stack into ``dest``; returns the paths written (relative to it). Prints what was
    written and the next steps to ``out`` (stdout). StackError: a sentence, nothing written.

    The dashboard's image installs the newest ``training_telemetry-*.whl`` in ``wheels/`` (the wheel
    installed from, copied there when pip recorded one, or ``wheel``), else the build argument
    ``TELEMETRY_SPEC`` (default ``training-telemetry[dashboard,otel]==<this version>``) from the package
    index; torch is the CPU build. The compose file's dashboard reads ``DIR/runs`` (or
    ``TELEMETRY_RUNS_DIR``), Prometheus the file_sd targets in ``runs/prometheus_targets/`` (or
    ``TELEMETRY_PROMETHEUS_SD_DIR``)."""
    out = out or sys.stdout
    _check_dir(dest, force)
    wheel = _check_wheel(wheel) if wheel else installed_wheel()
    src = _source()
    files = [f for d in CONFIG_DIRS for f in _walk(src / d, d)]
    missing = [d for d in CONFIG_DIRS if not any(rel.startswith(d + "/") for rel, _ in files)]
    if missing:  # a broken install: say so rather than write half a stack
        raise StackError(f"the installed package has no {', '.join(missing)} files; reinstall training-telemetry")
    values = {"@VERSION@": __version__, "@TORCH_SPEC@": _torch_spec()}
    written = []
    for rel, node in files:
        _write(dest, rel, node.read_bytes())
        written.append(rel)
    for name in TEMPLATES:
        text = (src / "stack" / name).read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace(key, value)
        _write(dest, name, text.encode("utf-8"))
        written.append(name)
    for sub in (WHEELS, RUNS, f"{RUNS}/prometheus_targets"):
        _write(dest, f"{sub}/.keep", b"")  # the folders compose mounts and the Dockerfile copies
    copied = None
    if wheel:
        copied = f"{WHEELS}/{os.path.basename(wheel)}"
        target = os.path.join(dest, WHEELS, os.path.basename(wheel))
        if os.path.abspath(wheel) != os.path.abspath(target):
            shutil.copyfile(wheel, target)
        os.chmod(target, FILE_MODE)
        written.append(copied)
    print(_report(dest, written, copied), file=out)
    return written


def _report(dest: str, written: list[str], wheel: str | None) -> str:
    home = os.path.abspath(dest)
    runs = os.path.join(home, RUNS)

    def count(prefix: str) -> int:
        return sum(1 for w in written if w.startswith(prefix))

    source = installed_from()
    if wheel:
        image = f"{wheel} (the image installs this wheel)"
    elif source and source[0] == "checkout":
        image = (
            f"empty: this package is installed from the checkout {source[1]}; put its wheel here for the "
            f"image: pip wheel --no-deps -w {home}/{WHEELS} {source[1]} (else the image installs "
            f"training-telemetry=={__version__} from your package index: TELEMETRY_SPEC in the Dockerfile)"
        )
    else:
        image = (
            f"empty: the image installs training-telemetry=={__version__} from your package index "
            f"(TELEMETRY_SPEC); to use a wheel, put it here or run again with --wheel FILE"
        )
    lines = [
        f"telemetry stack init: wrote {len(written)} files to {home}",
        f"  prometheus/     prometheus.yml, recording and alert rules, their promtool tests ({count('prometheus/tests/')} in tests/)",
        "  alertmanager/   alertmanager.yml (its receiver is a webhook placeholder: point it at your relay)",
        f"  grafana/        provisioning/ (datasources, dashboard provider), dashboards/ ({count('grafana/dashboards/')} dashboards)",
        "  otel/           collector.yml (OTLP in, traces to Jaeger)",
        "  docker-compose.yml, Dockerfile   the stack; the dashboard's image is built from the package",
        f"  wheels/         {image}",
        "  runs/           your jobs' run directories: the dashboard and Prometheus read them",
        "",
        "Next steps:",
        f"  1. Check the configs (optional): promtool check config {home}/prometheus/prometheus.yml",
        f"       promtool test rules {home}/prometheus/tests/*.yml",
        f"       amtool check-config {home}/alertmanager/alertmanager.yml",
        f"  2. Start the stack: cd {home} && docker compose up -d --build",
        "     (runs elsewhere: TELEMETRY_RUNS_DIR=/your/runs docker compose up -d --build)",
        "  3. Run your training job on this machine with its run directory under runs/:",
        f"       export TELEMETRY_PROMETHEUS_SD_DIR={runs}/prometheus_targets",
        "       export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
        "       Linux (Docker Engine): export TELEMETRY_PROMETHEUS_HOST=172.17.0.1",
        "         (the docker0 bridge's address, see `ip -4 addr show docker0`: a container cannot reach the",
        "         host's 127.0.0.1; this address is reached by this machine and its containers only, unless",
        "         a neighbour on your network segment routes to it: see the compose file's header)",
        "       Docker Desktop: keep the default 127.0.0.1 (Prometheus reaches it at host.docker.internal)",
        f"       then: torchrun ... (telemetry.init(run_dir='{runs}/<job>')), or try: telemetry demo --run-dir {runs}/demo",
        "     If the scrape cannot reach your ranks (a firewall): TELEMETRY_PUSHGATEWAY_URL=http://127.0.0.1:9091",
        "     and TELEMETRY_PROMETHEUS_SD_DIR=off push through the Pushgateway instead.",
        "  4. Open: Grafana http://127.0.0.1:3000, Prometheus http://127.0.0.1:9090 (Status > Targets lists your",
        "     ranks), Alertmanager http://127.0.0.1:9093, Jaeger http://127.0.0.1:16686, the dashboard",
        "     http://127.0.0.1:8501. Every port is published on 127.0.0.1 only.",
    ]
    return "\n".join(lines)
