"""Lint, format, types and the layer contracts, in the suite: ruff over the package, tests, bench, examples
and scripts; basedpyright over the package ([tool.basedpyright] in pyproject.toml); import-linter's contracts
(pyproject.toml) encode ARCHITECTURE.md's one-way flow; every ``# noqa`` names its reason."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREES = ("telemetry", "tests", "bench", "examples", "scripts")
BIN = os.path.dirname(sys.executable)
# A noqa comment names its codes, then a dash (or an em dash) and the reason: a bare one hides a finding unexplained.
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
REASONED = re.compile(r":\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s+[-\u2014]\s+\S")


def tool(name: str) -> str:
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.fail(f"{name} is not installed in this environment: pip install -e '.[dev]'")
    return path


def run(*cmd: str, cwd: str = ROOT, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def basedpyright(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """basedpyright's run with the project's settings, and its JSON report; skipped where it is not installed."""
    path = os.path.join(BIN, "basedpyright")
    if not os.path.exists(path):
        pytest.skip(
            "basedpyright is not installed in this environment (it is in the dev extra: pip install -e '.[dev]')"
        )
    p = run(path, "--outputjson", "--pythonpath", sys.executable, *args, timeout=600)
    try:
        return p, json.loads(p.stdout)
    except ValueError:
        pytest.fail(f"basedpyright wrote no report (exit {p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-2000:]}")


def diagnostics(report: dict) -> str:
    return "\n".join(
        f"{os.path.relpath(d['file'], ROOT)}:{d['range']['start']['line'] + 1}: {d['severity']}: {d['message']}"
        + (f" ({d['rule']})" if d.get("rule") else "")
        for d in report["generalDiagnostics"]
    )


def test_ruff_lint_passes():
    p = run(tool("ruff"), "check", *TREES)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_ruff_format_is_applied():
    p = run(tool("ruff"), "format", "--check", *TREES)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


@pytest.mark.slow  # a minute of CPU: the whole package, torch's and pandas' types with it
def test_the_type_check_passes():
    p, report = basedpyright()
    summary = report["summary"]
    said = diagnostics(report)
    if len(said) > 8000:  # the first of them, whole lines
        said = said[: said.rfind("\n", 0, 8000)] + "\n..."
    assert summary["errorCount"] == 0 and summary["warningCount"] == 0, (
        f"{summary['errorCount']} error(s), {summary['warningCount']} warning(s) (make typecheck lists them all):\n{said}"
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert summary["filesAnalyzed"] > 100, summary


def test_the_type_check_can_fail(tmp_path):
    """The settings catch what they are there for: a parameter without an annotation, a wrong type, a
    suppression without its rule, mypy's bare ``# type: ignore``."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(x) -> int:\n"
        "    return 1\n"
        "y: int = 'a'\n"
        "z: int = 'b'  # pyright: ignore\n"
        "w: int = 'c'  # type: ignore\n"
        "v: int = 1  # pyright: ignore[reportAssignmentType]\n",
        encoding="utf-8",
    )
    p, report = basedpyright("--project", os.path.join(ROOT, "pyproject.toml"), str(planted))
    assert p.returncode != 0
    found = {(d["range"]["start"]["line"] + 1, d.get("rule")) for d in report["generalDiagnostics"]}
    assert (1, "reportMissingParameterType") in found, diagnostics(report)
    assert (3, "reportAssignmentType") in found, diagnostics(report)
    assert (4, "reportIgnoreCommentWithoutRule") in found, diagnostics(report)
    assert (5, "reportAssignmentType") in found, diagnostics(report)
    assert (6, "reportUnnecessaryTypeIgnoreComment") in found, diagnostics(report)


def test_the_import_contracts_hold():
    p = run(tool("lint-imports"))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout


def test_an_import_against_the_flow_breaks_the_contracts(tmp_path):
    """The contracts can fail: the store importing the analysis (upward) is caught."""
    shutil.copytree(
        os.path.join(ROOT, "telemetry"), tmp_path / "telemetry", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    with open(tmp_path / "telemetry" / "store" / "layout.py", "a", encoding="utf-8") as f:
        f.write("\nfrom telemetry.analysis import findings as _upward  # planted by the test\n")
    p = run(tool("lint-imports"), cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert p.returncode != 0, p.stdout[-3000:]
    assert "telemetry.store.layout -> telemetry.analysis.findings" in p.stdout


def noqa_without_reason(text: str) -> list[int]:
    """Lines whose comment is a noqa without a reason (comments only: a string that mentions noqa is
    not one)."""
    import io
    import tokenize

    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            m = NOQA.search(tok.string)
            if m and not REASONED.match(m.group("rest")):
                out.append(tok.start[0])
    return out


def test_every_noqa_names_its_reason():
    planted = 'x = 1  # noqa: E501\ny = 2  # noqa\nz = 3  # noqa: E402 - after the path set-up\ns = "# noqa"\n'
    assert noqa_without_reason(planted) == [1, 2]
    bare = []
    for tree in TREES:
        for d, dirs, names in os.walk(os.path.join(ROOT, tree)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(d, name)
                    with open(path, encoding="utf-8") as f:
                        bare += [f"{os.path.relpath(path, ROOT)}:{n}" for n in noqa_without_reason(f.read())]
    assert bare == [], "noqa without a reason ('# noqa: CODE - why'):\n" + "\n".join(bare)
