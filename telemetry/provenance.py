"""What a run was: the training code's git commit (and whether its tree was dirty), read once by the
rank that writes the run's meta, so that ``telemetry history`` can say after which change a run got
slower.

The repository is the one holding the training script (``sys.argv[0]``'s folder), else the working
directory. ``git`` runs with a 2 s timeout; no git, no repository or a timeout: no commit, said in the
meta as ``{"commit": null, "why": ...}``, never a guess. ``TELEMETRY_GIT_COMMIT`` (with an optional
``TELEMETRY_GIT_DIRTY=1``) names the commit where the job runs from a copy without ``.git`` (a
container image built by CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Mapping

TIMEOUT_S = 2.0


def _repo_dir() -> str:
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    folder = os.path.dirname(os.path.abspath(script)) if script and os.path.exists(script) else ""
    return folder or os.getcwd()


def _git(folder: str, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", folder, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=True,
    )
    return out.stdout.strip()


def code_state(folder: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str | bool | None]:
    """``{"commit", "dirty", "repo"}`` of the training code, or ``{"commit": None, "why": ...}``."""
    environ = os.environ if environ is None else environ
    given = environ.get("TELEMETRY_GIT_COMMIT", "").strip()
    if given:
        return {"commit": given, "dirty": environ.get("TELEMETRY_GIT_DIRTY", "") in ("1", "true", "yes"), "repo": None}
    folder = folder or _repo_dir()
    try:
        root = _git(folder, "rev-parse", "--show-toplevel")
        commit = _git(folder, "rev-parse", "HEAD")
        dirty = bool(_git(folder, "status", "--porcelain", "--untracked-files=no"))
    except FileNotFoundError:
        return {"commit": None, "why": "git is not installed"}
    except subprocess.TimeoutExpired:
        return {"commit": None, "why": f"git took over {TIMEOUT_S:.0f} s"}
    except (subprocess.CalledProcessError, OSError):
        return {"commit": None, "why": f"{folder} is not in a git repository"}
    return {"commit": commit, "dirty": dirty, "repo": root}
