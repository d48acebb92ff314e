"""One drift-free tick schedule for the roles that work once a tick (the
simulator producing its fleet's frames, the aggregator batching what it
heard), so both keep time, and fall behind, the same way.

Tick ``k`` is due at ``start + k * tick_s`` on the event loop's monotonic
clock: a slow tick shortens the wait for the next one instead of shifting
every later tick.  A tick that starts more than a tick after it was due is
counted late, and logged at the 1st, the 10th and every 100th.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

log = structlog.get_logger("rainierd.runtime.schedule")


@dataclass(eq=False)
class Schedule:
    """Yields tick numbers on time; ``late`` counts the ticks that started over a tick after they were due."""

    tick_s: float
    role: str  # who keeps it, for the log line: "simulator", "aggregator"
    late: int = 0

    async def ticks(self, *, first: int = 0, count: int = 0) -> AsyncIterator[int]:
        """Yield ``first``, ``first + 1``, … each when it is due (``count`` of them, or until cancelled if 0).

        Tick ``first`` is due ``first * tick_s`` after this call: 0 yields at once, 1 after a tick.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        k = first
        while count == 0 or k < first + count:
            delay = start + k * self.tick_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif -delay > self.tick_s:
                self.late += 1
                if self.late in (1, 10) or self.late % 100 == 0:
                    log.warning(f"{self.role} cannot keep pace; ticks are late", tick=k, late_s=round(-delay, 2),
                                ticks_late=self.late)
            yield k
            k += 1
