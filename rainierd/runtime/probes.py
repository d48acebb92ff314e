"""A probe's verdict (``/healthz``, ``/readyz``) as plain data: the roles
decide it, the HTTP server serves it and ``rainierd healthcheck`` reads it
back, without any of them importing another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Verdict:
    """A probe's verdict: ok, and a one-line reason."""

    ok: bool
    reason: str
