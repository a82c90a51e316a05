"""Opens no door: what telemetry serves binds loopback unless told otherwise, /metrics speaks TLS and
checks client certificates when configured (and never falls back to clear text), no stored or
received data is unpickled or evaluated, the dashboard opens nothing outside its runs, and the
compose stack publishes on loopback only. Real servers, sockets and certificates (openssl)."""

from __future__ import annotations

import ast
import os
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest

import telemetry
from tests.helpers.servers import free_port, stop_group

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEVER = 60.0  # the longest flush interval: nothing is delivered during a test


def listening(port: int) -> set[str]:
    """The local addresses a socket listens on at ``port`` (this machine, any process)."""
    return {
        c.laddr.ip
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    }


# ---- loopback by default ------------------------------------------------------------------------
def test_metrics_bind_loopback_unless_a_wider_address_is_set(tmp_path, fault_table):
    port = free_port()
    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job="bind",
        sinks=["prometheus"],
        prometheus_port=port,
        flush_interval_s=NEVER,
        announce=False,
    )
    default = listening(port)
    telemetry.shutdown()
    assert default == {"127.0.0.1"}, default
    assert listening(port) == set()
    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job="bind",
        sinks=["prometheus"],
        prometheus_port=port,
        prometheus_host="0.0.0.0",
        flush_interval_s=NEVER,
        announce=False,
    )
    try:
        wide = listening(port)
    finally:
        telemetry.shutdown()
    assert wide == {"0.0.0.0"}, wide
    fault_table.add(
        "security",
        "who can reach a rank's /metrics: the listening socket, read from the kernel "
        '(psutil), default settings, then prometheus_host="0.0.0.0"',
        f"trains as usual; bound to {', '.join(sorted(default))} by default, to "
        f"{', '.join(sorted(wide))} only when prometheus_host says so",
        "nothing",
    )


def _dashboard(table: str, *args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "telemetry", "dashboard", table, "--port", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    proc.stdout.readline()  # starting on ...
    assert "http://" in proc.stdout.readline(), "the dashboard did not start"  # printed once it answers
    return proc, port


@pytest.mark.slow
def test_the_dashboard_binds_loopback_unless_host_says_otherwise(tmp_path, fault_table):
    from telemetry.demo.simulate import Scenario, simulate

    table = str(tmp_path / "steps.parquet")
    simulate(Scenario(ranks=2, steps=20)).to_parquet(table, index=False)
    found = {}
    for name, args in (("default", ()), ("--host 0.0.0.0", ("--host", "0.0.0.0"))):
        proc, port = _dashboard(table, *args)
        try:
            found[name] = listening(port)
        finally:
            stop_group(proc)
    assert found["default"] == {"127.0.0.1"}, found
    assert found["--host 0.0.0.0"] and found["--host 0.0.0.0"] <= {"0.0.0.0", "::"}, found
    fault_table.add(
        "security",
        "who can reach `telemetry dashboard`: the listening socket of the real server "
        "(psutil), default, then --host 0.0.0.0",
        f"not involved; bound to {', '.join(sorted(found['default']))} by default, to "
        f"{', '.join(sorted(found['--host 0.0.0.0']))} only with --host 0.0.0.0",
        "nothing",
    )


# ---- TLS and client certificates ----------------------------------------------------------------
def _certs(tmp_path) -> dict[str, tuple[str, str]]:
    """(key, certificate) of a CA, a server (127.0.0.1) and a client it signed, and of a client a
    second CA signed, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")

    def run(*args) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    out = {}
    for ca in ("ca", "other-ca"):
        key, crt = tmp_path / f"{ca}.key", tmp_path / f"{ca}.crt"
        run(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            key,
            "-out",
            crt,
            "-subj",
            f"/CN={ca}",
        )
        out[ca] = (str(key), str(crt))
    ext = tmp_path / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for name, ca in (("server", "ca"), ("client", "ca"), ("stranger", "other-ca")):
        key, csr, crt = tmp_path / f"{name}.key", tmp_path / f"{name}.csr", tmp_path / f"{name}.crt"
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        run(
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            out[ca][1],
            "-CAkey",
            out[ca][0],
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            crt,
            "-extfile",
            ext,
        )
        out[name] = (str(key), str(crt))
    return out


def _get(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 5.0) -> str:
    """The body, or the kind of failure."""
    try:
        return urllib.request.urlopen(url, context=ctx, timeout=timeout).read().decode()
    except (ssl.SSLError, urllib.error.URLError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"refused: {type(reason).__name__}: {reason}"


def _client(certs, ca: str = "ca", cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs[ca][1])
    if cert:
        ctx.load_cert_chain(certs[cert][1], certs[cert][0])
    return ctx


def test_metrics_over_tls_with_client_certificates_and_no_clear_text_fallback(tmp_path, fault_table):
    # tests/unit/telemetry/exporters/test_prometheus.py checks a client with the CA's certificate is served and one without
    # any is refused; here: clear text refused, a certificate of another CA refused, TLS without
    # client certificates, and a TLS setting that cannot be served serves nothing (never clear text).
    certs = _certs(tmp_path)
    port = free_port()
    https, http = f"https://127.0.0.1:{port}/metrics", f"http://127.0.0.1:{port}/metrics"
    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job="tls",
        sinks=["prometheus"],
        prometheus_port=port,
        prometheus_certfile=certs["server"][1],
        prometheus_keyfile=certs["server"][0],
        prometheus_client_cafile=certs["ca"][1],
        flush_interval_s=NEVER,
        announce=False,
    )
    try:
        seen = {
            "CA + client certificate": _get(https, _client(certs, cert="client")),
            "plain http": _get(http),
            "no client certificate": _get(https, _client(certs)),
            "another CA's client certificate": _get(https, _client(certs, cert="stranger")),
            "server not trusted (other CA)": _get(https, _client(certs, ca="other-ca", cert="client")),
        }
    finally:
        telemetry.shutdown()
    assert "train_build_info" in seen["CA + client certificate"], seen
    for what in (
        "plain http",
        "no client certificate",
        "another CA's client certificate",
        "server not trusted (other CA)",
    ):
        assert seen[what].startswith("refused"), (what, seen[what][:200])

    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job="tls",
        sinks=["prometheus"],
        prometheus_port=port,
        prometheus_certfile=certs["server"][1],
        prometheus_keyfile=certs["server"][0],
        flush_interval_s=NEVER,
        announce=False,
    )
    try:  # TLS alone: any client that trusts the CA, no client certificate asked
        tls_only = _get(https, _client(certs))
        tls_plain = _get(http)
    finally:
        telemetry.shutdown()
    assert "train_build_info" in tls_only and tls_plain.startswith("refused"), (tls_only[:200], tls_plain[:200])

    # a key that does not match the certificate: the sink is off, nothing listens, training goes on
    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job="tls",
        sinks=["store", "prometheus"],
        prometheus_port=port,
        prometheus_certfile=certs["server"][1],
        prometheus_keyfile=certs["client"][0],
        flush_interval_s=NEVER,
        announce=False,
    )
    try:
        with telemetry.step():
            pass
        mismatched = {"plain http": _get(http, timeout=2), "https": _get(https, _client(certs, cert="client"), 2)}
        assert listening(port) == set()  # the bad certificate was found before anything was bound
    finally:
        stats = telemetry.shutdown()
    assert all(v.startswith("refused") for v in mismatched.values()), mismatched
    assert "prometheus" not in stats["sinks"] and stats["records"] == 1, stats
    refused = [w for w in seen if seen[w].startswith("refused")]
    fault_table.add(
        "security",
        "/metrics with TLS and client certificates (openssl-made CA, server and client "
        "certificates): clients without the right credentials; a key that does not match its "
        "certificate",
        "trains as usual; served only over TLS to a client with the CA's certificate; refused: "
        f"{', '.join(refused)}; TLS without prometheus_client_cafile serves any client trusting the "
        "CA; a mismatched key disables the sink (metrics served neither in clear text nor over TLS) "
        "and the step is still recorded",
        "nothing (with the mismatched key: the metrics of that run, said in the log)",
    )


# ---- no unpickling or evaluation of data --------------------------------------------------------
PACKAGES = ("telemetry",)  # exporters and the dashboard are telemetry.exporters and telemetry.dashboards
BANNED_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}


def unsafe_calls(source: str, name: str = "<source>") -> list[str]:
    """Where ``source`` can run code hidden in data: an import of a pickle-like module, eval/exec/
    compile, yaml.load without a safe loader, yaml.unsafe_load/full_load, torch.load without
    weights_only=True, pandas.read_pickle, numpy.load with allow_pickle=True."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in BANNED_MODULES:
            found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and any(a.name in ("read_pickle", "unsafe_load") for a in node.names):
            found.append(f"{where}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            kw = {k.arg: k.value for k in node.keywords}

            def const(key):
                v = kw.get(key)  # noqa: B023 - called in this iteration only
                return v.value if isinstance(v, ast.Constant) else v

            if isinstance(func, ast.Name) and called in ("eval", "exec", "compile", "__import__"):
                found.append(f"{where}: {called}()")
            elif called in ("read_pickle", "unsafe_load", "full_load", "full_load_all", "unsafe_load_all"):
                found.append(f"{where}: {owner + '.' if owner else ''}{called}()")
            elif owner == "yaml" and called in ("load", "load_all"):
                loader = kw.get("Loader") or (node.args[1] if len(node.args) > 1 else None)
                text = ast.unparse(loader) if loader is not None else ""
                if not text.endswith(("SafeLoader", "CSafeLoader", "BaseLoader")):
                    found.append(f"{where}: yaml.{called} without SafeLoader")
            elif owner == "torch" and called == "load" and const("weights_only") is not True:
                found.append(f"{where}: torch.load without weights_only=True")
            elif owner in ("np", "numpy") and called == "load" and const("allow_pickle") not in (None, False):
                found.append(f"{where}: numpy.load with allow_pickle")
            elif called == "cache_data" and const("persist") not in (None, False):
                found.append(f"{where}: st.cache_data(persist=...) (pickled to disk, loaded back)")
    return found


def test_no_stored_or_received_data_is_unpickled_or_evaluated(fault_table):
    # The rule must catch each of these (a check that cannot fail proves nothing)...
    planted = {
        "import pickle": 1,
        "from marshal import loads": 1,
        "import shelve": 1,
        "import dill as d": 1,
        "x = eval(s)": 1,
        "exec(code)": 1,
        "yaml.load(f)": 1,
        "yaml.load(f, Loader=yaml.Loader)": 1,
        "yaml.unsafe_load(f)": 1,
        "torch.load(p)": 1,
        "torch.load(p, weights_only=False)": 1,
        "pd.read_pickle(p)": 1,
        "pandas.read_pickle(p)": 1,
        "np.load(p, allow_pickle=True)": 1,
        "@st.cache_data(persist='disk')\ndef f(): pass": 1,
        # ... and pass these
        "yaml.load(f, Loader=yaml.SafeLoader)": 0,
        "yaml.safe_load(f)": 0,
        "torch.load(p, weights_only=True)": 0,
        "json.loads(s)": 0,
        "model.eval()": 0,
        "pd.read_parquet(p)": 0,
        "np.load(p)": 0,
        "re.compile(r'x')": 0,
        "@st.cache_data(max_entries=3)\ndef f(): pass": 0,
        "@st.cache_resource\ndef f(): pass": 0,
    }
    for src, n in planted.items():
        assert len(unsafe_calls(src)) == n, (src, unsafe_calls(src))
    # ... then it holds over every module of the library, the exporters and the dashboard.
    files, found = 0, []
    for pkg in PACKAGES:
        for d, _, names in os.walk(os.path.join(ROOT, pkg)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(d, name)
                    with open(path, encoding="utf-8") as f:
                        found += unsafe_calls(f.read(), os.path.relpath(path, ROOT))
                    files += 1
    assert files > 50 and found == [], found
    caught = sum(planted.values())
    fault_table.add(
        "security",
        f"code hidden in data: every module of {', '.join(PACKAGES)} ({files} files) "
        "parsed (ast) for pickle/marshal/shelve imports, eval/exec/compile, yaml.load without "
        "SafeLoader, torch.load without weights_only=True, read_pickle, numpy allow_pickle, "
        "st.cache_data persisted to disk",
        "not involved; none found (run files, steps tables, Prometheus and OTLP answers are read "
        "as JSON, CSV and Parquet only; the dashboard's st.cache_resource keeps its own objects in "
        f"memory, never pickled); the rule catches each of {caught} planted cases",
        "nothing",
    )


PYARROW_SAFE = (14, 0, 1)  # before it, pyarrow unpickled extension types read from Parquet (CVE-2023-47248)


def _version(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_a_parquet_file_that_carries_a_pickle_runs_no_code(tmp_path, fault_table):
    """A steps table whose column says it is a pickled Python extension type (the form of
    CVE-2023-47248): read by the one loader, nothing in it runs."""
    import pickle  # the test plants a pickle; the package never loads one

    import pyarrow as pa
    import pyarrow.parquet as pq

    from telemetry.analysis.inputs.load import open_input

    canary = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {canary}",))

    meta = {b"ARROW:extension:name": b"arrow.py_extension_type", b"ARROW:extension:metadata": pickle.dumps(Payload())}
    schema = pa.schema(
        [
            pa.field("rank", pa.int64()),
            pa.field("step", pa.int64()),
            pa.field("start_s", pa.float64()),
            pa.field("duration_s", pa.float64(), metadata=meta),
        ]
    )
    path = tmp_path / "steps.parquet"
    pq.write_table(
        pa.table({"rank": [0, 0], "step": [0, 1], "start_s": [1.0, 2.0], "duration_s": [0.1, 0.2]}, schema=schema), path
    )
    assert pickle.loads(meta[b"ARROW:extension:metadata"]) == 0 and canary.exists()  # the payload does run...
    canary.unlink()
    run = open_input(str(path))  # ... but not when the file is read
    assert not canary.exists() and len(run.table) == 2
    assert _version(pa.__version__) >= PYARROW_SAFE, pa.__version__
    fault_table.add(
        "security",
        "a steps table (Parquet) carrying a pickled payload as a Python extension type "
        "(CVE-2023-47248's form), read by the loader every command and the dashboard use",
        f"not involved; read as plain columns, the payload never ran (pyarrow {pa.__version__}; "
        "pyproject requires >= 14.0.1, the first that does not unpickle them)",
        "nothing",
    )


def test_the_declared_pyarrow_does_not_unpickle_parquet_metadata():
    import re

    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        floor = re.search(r'"pyarrow>=([0-9.]+)"', f.read())
    assert floor and _version(floor.group(1)) >= PYARROW_SAFE, (
        f"pyproject.toml allows pyarrow {floor.group(1) if floor else '(any)'}; versions before 14.0.1 unpickle "
        "extension types from Parquet files (CVE-2023-47248): require pyarrow>=14.0.1"
    )


# ---- the dashboard opens nothing outside its runs -----------------------------------------------
def _a_run(path: str, job: str, steps: int) -> str:
    telemetry.init(run_dir=path, job=job, sinks=["store"], announce=False)
    for _ in range(steps):
        with telemetry.step():
            pass
    telemetry.shutdown()
    return path


def test_the_dashboard_opens_only_the_runs_under_its_root(tmp_path, monkeypatch, fault_table):
    from streamlit.testing.v1 import AppTest

    from telemetry.dashboards import source as S
    from telemetry.dashboards.serve import APP

    root = tmp_path / "runs"
    inside = _a_run(str(root / "mine"), "mine", 12)
    outside = _a_run(str(tmp_path / "secret" / "theirs"), "theirs", 7)
    os.symlink(outside, root / "link-out")  # a link in the root to a run elsewhere
    os.symlink(inside, root / "link-in")  # a link that stays inside: still offered
    monkeypatch.delenv("TELEMETRY_DASHBOARD_PATH", raising=False)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_ROOT", str(root))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["view"] = "../../secret"  # the page takes a view, steps and ranks from the URL, never a path
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    [box] = [s for s in at.sidebar.selectbox if s.label == "run"]
    offered = sorted(os.path.basename(o) for o in box.options)
    assert offered == ["link-in", "mine"], offered
    assert any("Not offered: link-out" in c.value for c in at.sidebar.caption)
    assert at.header[0].value == "Overview"

    from streamlit.proto.WidgetStates_pb2 import WidgetState
    from streamlit.testing.v1.element_tree import Selectbox

    real_state = Selectbox._widget_state
    tried = {}
    for forged in (outside, "../secret/theirs", "link-out", str(root / "link-out"), "theirs", "..", "/"):

        def crafted(self, forged=forged):  # what a crafted client sends: any string as the choice
            return WidgetState(id=self.id, string_value=forged) if self.label == "run" else real_state.fget(self)

        monkeypatch.setattr(Selectbox, "_widget_state", property(crafted))
        at.run()
        monkeypatch.setattr(Selectbox, "_widget_state", real_state)
        assert not at.exception, [e.value for e in at.exception]
        shown = [c.value for c in at.caption if " ranks, " in c.value]
        tried[forged] = shown[0] if shown else "nothing"
        assert shown and shown[0].startswith("1 ranks, 12 steps"), (forged, shown)  # the inside run, not theirs
    assert S.list_runs(str(tmp_path / "nope")) == [] and S.links_out(str(root)) == ["link-out"]
    fault_table.add(
        "security",
        "the dashboard asked for runs outside its root: a link in the root to a run "
        "elsewhere, forged run choices (absolute path, ../, the link), a forged ?view=",
        f"not involved; the link out is not offered (the page says so), each of the {len(tried)} forged "
        "choices shows a run inside the root, the forged view shows the overview; no traceback",
        "nothing (nothing outside the root was read)",
    )


# ---- the compose stack --------------------------------------------------------------------------
def loopback_problems(compose: dict) -> list[str]:
    """Every way a compose file exposes a service beyond this machine: a published port not on
    127.0.0.1 (or on a random host port), host networking."""
    from tests.deploy.test_compose import ports

    out = []
    for name, svc in (compose.get("services") or {}).items():
        for ip, published, target in ports(svc):
            if ip != "127.0.0.1":
                out.append(f"{name}: {target} published on {ip or 'every interface'}")
            if not published:
                out.append(f"{name}: {target} published on a random host port")
        if str(svc.get("network_mode", "")) == "host":
            out.append(f"{name}: network_mode host (every port it opens is on every interface)")
    return out


def test_the_compose_stack_publishes_on_loopback_only(fault_table):
    import yaml

    planted = {
        "services": {
            "a": {"ports": ["9090:9090"]},
            "b": {"ports": ["0.0.0.0:1:1"]},
            "c": {"ports": [{"target": 2, "published": 2}]},
            "d": {"network_mode": "host"},
            "e": {"ports": ["127.0.0.1::3"]},
            "ok": {"ports": ["127.0.0.1:4:4"]},
        }
    }
    assert [p.split(":")[0] for p in loopback_problems(planted)] == ["a", "b", "c", "d", "e"]
    with open(os.path.join(ROOT, "docker-compose.yml")) as f:
        compose = yaml.safe_load(f)
    problems = loopback_problems(compose)
    published = sum(len(s.get("ports", [])) for s in compose["services"].values())
    assert published >= 8 and problems == [], problems
    fault_table.add(
        "security",
        f"the compose stack's exposure: docker-compose.yml parsed, its {published} "
        f"published ports across {len(compose['services'])} services, and host networking",
        "not involved; every port is published on 127.0.0.1 only, no service on the host network "
        "(the rule catches each of 5 planted exposures)",
        "nothing",
    )
