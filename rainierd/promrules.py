"""Test-sized copies of the Prometheus rule files: every ``for:`` replaced by
one duration, so an end-to-end test or a demo sees alerts fire in seconds
while the shipped files keep their production durations.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from rainierd.errors import ConfigError

__all__ = ["RULES_DIR", "override_for", "write_overridden"]

RULES_DIR: Final = Path(__file__).parent / "rules"
"""The shipped rule files (package data: an installed wheel has them too)."""

_FOR: Final = re.compile(r"^(\s*for:\s*)\S+(.*)$", re.MULTILINE)
_DURATION: Final = re.compile(r"^(\d+(ms|s|m|h))+$")


def override_for(text: str, duration: str) -> str:
    """Return a rule file's text with every ``for:`` set to ``duration``.

    Raises ConfigError if ``duration`` is not a Prometheus duration.
    """
    if not _DURATION.match(duration):
        raise ConfigError(f"{duration!r} is not a Prometheus duration such as 5s or 1m30s")
    return _FOR.sub(lambda m: f"{m[1]}{duration}{m[2]}", text)


def write_overridden(source: Path, target: Path, duration: str) -> list[Path]:
    """Write every ``*.yml`` of ``source`` to ``target`` with ``for:`` overridden; return the new paths."""
    files = sorted(source.glob("*.yml"))
    if not files:
        raise ConfigError(f"no rule files (*.yml) in {source}")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path in files:
        out = target / path.name
        out.write_text(override_for(path.read_text(), duration))
        written.append(out)
    return written
