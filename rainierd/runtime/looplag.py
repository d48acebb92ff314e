"""Event-loop lag: how late a short sleep wakes up, the symptom of anything
blocking the loop (a large numpy step, a render, a garbage collection) for
too long.  The worst lag of the last window is exported as
``rainier_event_loop_lag_seconds``; every probe also lands in a histogram,
``rainier_event_loop_probe_lag_seconds``, so its percentiles over any span
can be read from two scrapes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from rainierd.runtime.histogram import LagHistogram

# Fine from 1 ms to 1 s: the budget is 10 ms, and what breaks it (a GC pass,
# a render holding the GIL) shows as tens to hundreds of milliseconds.
LOOP_LAG_BUCKETS_S: Final = (
    0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
)


def _histogram() -> LagHistogram:
    return LagHistogram(LOOP_LAG_BUCKETS_S, np.zeros(len(LOOP_LAG_BUCKETS_S) + 1, np.int64))


@dataclass(eq=False)
class LoopLag:
    """Samples the loop's lag every ``interval_s``; keeps the last ``window`` samples and a histogram of all."""

    interval_s: float = 0.1
    window: int = 100
    samples: deque[float] = field(default_factory=deque)
    histogram: LagHistogram = field(default_factory=_histogram)

    @property
    def worst_s(self) -> float:
        """Return the worst lag in the window (0 before any sample)."""
        return max(self.samples, default=0.0)

    def observe(self, lag_s: float) -> None:
        """Record one probe's lag."""
        self.samples.append(lag_s)
        if len(self.samples) > self.window:
            self.samples.popleft()
        self.histogram.observe(np.array([lag_s]))

    async def run(self) -> None:
        """Sample until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            self.observe(max(0.0, loop.time() - before - self.interval_s))
