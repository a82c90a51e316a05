"""A virtual environment of its own for HolisticTraceAnalysis (HTA 0.5.0), the reference the trace
breakdown is checked against (``bench/hta_compare.py``). HTA is never installed into the project's
``.venv``: it lives in ``.hta-venv`` at the repository's root (gitignored), with ``--no-deps`` (its wheel asks for
jupyterlab and pytest, which its analyses do not import) and the runtime packages its imports need.

    python bench/hta_env.py            # create .hta-venv if missing; prints its python
    python bench/hta_env.py --force    # recreate it

A wheel of HTA already on disk (``HTA_WHEEL``, or /tmp/hta_dl/) is used when there is one, else pip
fetches ``holistictraceanalysis==0.5.0`` from the package index.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# beside .venv, not under bench/: the noqa check in tests/deploy/test_lint.py reads every .py under bench/
VENV = ROOT / ".hta-venv"
HTA = "holistictraceanalysis==0.5.0"
# What HTA 0.5.0's analyses import at run time (found by importing hta.trace_analysis and running every
# analysis bench/hta_reference.py calls: psutil too; ijson only for its non-default parser). pandas below 3:
# HTA 0.5.0 was written against pandas 2.
DEPS = [
    "numpy>=1.23.5,<2.3",
    "pandas>=1.5.2,<3",
    "plotly>=5.11.0",
    "networkx>=3.1",
    "pydot>=1.3.0",
    "pyyaml",
    "psutil",
]
WHEEL_DIRS = [os.environ.get("HTA_WHEEL_DIR", ""), "/tmp/hta_dl"]


def python() -> pathlib.Path:
    return VENV / "bin" / "python"


def ready() -> bool:
    if not python().exists():
        return False
    r = subprocess.run([str(python()), "-c", "import hta.trace_analysis, hta.version"], capture_output=True)
    return r.returncode == 0


def _wheel() -> str:
    if os.environ.get("HTA_WHEEL") and os.path.exists(os.environ["HTA_WHEEL"]):
        return os.environ["HTA_WHEEL"]
    for d in WHEEL_DIRS:
        w = os.path.join(d, "holistictraceanalysis-0.5.0-py3-none-any.whl") if d else ""
        if w and os.path.exists(w):
            return w
    return HTA


def ensure(force: bool = False) -> pathlib.Path:
    """Create the HTA venv when missing (or ``force``); return its python."""
    if force and VENV.exists():
        shutil.rmtree(VENV)
    if ready():
        return python()
    if not python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(python()), "-m", "pip", "install", "-q"]
    subprocess.run(pip + DEPS, check=True)
    subprocess.run(pip + ["--no-deps", _wheel()], check=True)
    if not ready():
        raise SystemExit(f"{VENV}: HTA installed but `import hta.trace_analysis` fails")
    return python()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="recreate the venv")
    args = ap.parse_args()
    print(ensure(force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
