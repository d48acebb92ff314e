"""The one place the tests' and benchmarks' timing lives: the tick every
process-level test runs at, and the one slack factor every wait's timeout is
scaled by.

A wait is for a condition, never for a time; its timeout only bounds how long
a failure takes to show.  On a loaded machine (CI, or a laptop running other
work) the same conditions hold later, so a timeout too tight for that
machine is a defect of the harness, not of the code.  Rather than widening
timeouts one test at a time, a slow machine raises ``RAINIERD_TEST_SLACK``
(e.g. ``RAINIERD_TEST_SLACK=2``) and every wait scales with it.  Product
promises (a process exits within 2 s of SIGTERM) are *not* scaled: they are
asserted as specified, in tests/integration/test_stops.py.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["FAST_TICK_S", "SLACK", "TICK_S", "within"]


def _slack() -> float:
    raw = os.environ.get("RAINIERD_TEST_SLACK", "1")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"RAINIERD_TEST_SLACK must be a number >= 1, not {raw!r}") from None
    if not value >= 1.0:  # also refuses nan
        raise ValueError(f"RAINIERD_TEST_SLACK must be a number >= 1, not {raw!r}")
    return value


TICK_S: Final = 0.5
"""The tick of every test that runs a simulator and a monitor: short enough that a run of a hundred ticks
takes under a minute, long enough that an analysis (a few ms at the test topology) never overruns it on
two shared cores."""

FAST_TICK_S: Final = TICK_S / 2
"""For the tests whose subject is counting frames across many disruptions (restarts, fail-overs, node
kills): twice the frames in the same wall time, so a run long enough for all its disruptions stays short.
Nothing they assert depends on the analysis keeping up within a tick."""

SLACK: Final = _slack()
"""How much longer than on a quiet machine every wait may take here (``RAINIERD_TEST_SLACK``, default 1)."""


def within(seconds: float) -> float:
    """Return the timeout for a wait that takes up to ``seconds`` on a quiet machine, scaled by ``SLACK``."""
    return seconds * SLACK
