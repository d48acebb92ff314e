"""What ``rainierd --version`` says: the package's version and, run from a
source checkout, the commit it is at (two checkouts of one version differ,
and a bug report wants the commit).

Loaded by ``_start`` before anything slow, so it imports only the standard
library; git is asked only when the package sits in a checkout of its own
(``pyproject.toml`` and ``.git`` beside it), never for an installed wheel.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from rainierd import __version__

_CHECKOUT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    """Return git's answer in the checkout, None when git is missing or refuses (not a repository, no commit)."""
    try:
        done = subprocess.run(["git", "-C", str(_CHECKOUT), *args], capture_output=True, text=True, timeout=5,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> str | None:
    """Return the checkout's short commit, with ``+modified`` when tracked files differ; None outside one."""
    if not ((_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / ".git").exists()):
        return None
    head = _git("rev-parse", "--short=12", "HEAD")
    if head is None:
        return None
    changed = _git("status", "--porcelain", "--untracked-files=no")
    return f"{head}+modified" if changed else head


def describe() -> str:
    """Return the version line: ``rainierd 0.1.0 (commit 5d089c5a1b2c)``, or without the commit."""
    found = commit()
    return f"rainierd {__version__}" + (f" (commit {found})" if found else "")
