"""``telemetry dashboard``: the Streamlit app, served by a child process that ends with this command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from .common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Start the Streamlit app on the run, print its URL, serve until interrupted; the server (a
    child process in its own session) is stopped with us."""
    import importlib.util

    if importlib.util.find_spec("streamlit") is None:
        print(
            "telemetry dashboard: needs Streamlit, an optional extra: pip install 'training-telemetry[dashboard]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEMETRY_DASHBOARD_")}
    if args.prometheus:
        if args.path or args.base or args.history:
            print(
                "telemetry dashboard: --prometheus shows a live job; give it no run directory, no --base and no "
                "--history",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if not args.prometheus.startswith(("http://", "https://")):
            print(
                f"telemetry dashboard: --prometheus {args.prometheus!r}; accepted: an http:// or https:// URL, "
                "e.g. http://127.0.0.1:9090",
                file=sys.stderr,
            )
            return EXIT_USAGE
        env["TELEMETRY_DASHBOARD_PROMETHEUS"] = args.prometheus.rstrip("/")
        env["TELEMETRY_DASHBOARD_JOB"] = args.job or ""
    elif args.job:
        print("telemetry dashboard: --job goes with --prometheus URL", file=sys.stderr)
        return EXIT_USAGE
    from ..analysis_options import DASHBOARD, AnalysisOptions

    try:
        options = AnalysisOptions.from_args(args, DASHBOARD)
    except ValueError as exc:
        print(f"telemetry dashboard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    given = {n: getattr(options, n) for n in DASHBOARD if getattr(args, n, None) is not None}
    if given:  # the page's analyses run with them (dashboards.source.options)
        import json

        env["TELEMETRY_DASHBOARD_OPTIONS"] = json.dumps(given)
    if args.trace_ui_url:
        from ..config import ConfigError, check_trace_ui_url

        try:
            env["TELEMETRY_DASHBOARD_TRACE_UI_URL"] = check_trace_ui_url("--trace-ui-url", args.trace_ui_url)
        except ConfigError as exc:
            print(f"telemetry dashboard: {exc}", file=sys.stderr)
            return EXIT_USAGE
    for name, given in (("TELEMETRY_DASHBOARD_PATH", args.path), ("TELEMETRY_DASHBOARD_BASE", args.base)):
        if not given:
            continue
        if not os.path.exists(given):
            print(
                f"telemetry dashboard: {given!r} does not exist; accepted: a run directory or a steps table",
                file=sys.stderr,
            )
            return EXIT_USAGE
        env[name] = os.path.abspath(given)
    if args.history:
        from ..analysis.history.runs import find_runs

        for given in args.history:
            if not os.path.isdir(given):
                print(
                    f"telemetry dashboard: --history {given!r} is not a directory; accepted: run directories or "
                    "folders of run directories",
                    file=sys.stderr,
                )
                return EXIT_USAGE
        paths = [os.path.abspath(p) for p in args.history]
        if not find_runs(paths):
            print(
                f"telemetry dashboard: --history: no run directory in {', '.join(args.history)} (a run directory "
                "holds meta.json or ranks/)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        env["TELEMETRY_DASHBOARD_HISTORY"] = os.pathsep.join(paths)
    if not args.path and not args.prometheus:
        env["TELEMETRY_DASHBOARD_ROOT"] = os.path.abspath("runs")
    # serve.py imports and exercises the app's modules before it serves (a plain `streamlit run` makes
    # the first visitor wait for them), then runs the app's script; see serve.command for why isolated.
    from ..dashboards.serve import command

    cmd = command(
        [
            "--server.headless",
            "true",
            "--server.address",
            args.host,
            "--server.port",
            str(args.port),
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ]
    )
    from .. import children

    # its own session (a Ctrl-C reaches only us, and we stop it); it dies with us even when we are SIGKILLed
    proc = subprocess.Popen(cmd, env=children.child_env(env), start_new_session=True, stdout=subprocess.DEVNULL)
    what = (
        f"job {args.job or '(choose in the page)'} on {args.prometheus}"
        if args.prometheus
        else args.path or "runs under runs/"
    )
    print(f"telemetry dashboard: starting on {args.host}:{args.port} ({what})", flush=True)
    previous = children.interrupt_on_signals()  # SIGTERM, SIGHUP: stop the server, as Ctrl-C does
    try:
        local = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        if not _wait_healthy(proc, f"http://{local}:{args.port}"):
            print(
                f"telemetry dashboard: the server did not start (exit {proc.poll()}; is port {args.port} free? "
                "--port picks another)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(f"telemetry dashboard: http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
        code = proc.wait()
        return EXIT_OK if code == 0 else EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        with children.signals_held():  # a second signal waits until the server is stopped
            children.stop_group([proc], grace_s=5.0)
            children.restore(previous)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout_s: float = 60.0) -> bool:
    """Wait until the Streamlit server at ``url`` answers its health check; False if it exits first
    or never answers."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.2)
    return False
