"""Event-loop lag: how late a short sleep wakes up, the symptom of anything
blocking the loop (a large numpy step, a render) for too long.  The worst lag
of the last window is exported as ``rainier_event_loop_lag_seconds``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

__all__ = ["LoopLag"]


@dataclass(eq=False)
class LoopLag:
    """Samples the loop's lag every ``interval_s``; keeps the last ``window`` samples."""

    interval_s: float = 0.1
    window: int = 100
    samples: deque[float] = field(default_factory=deque)

    @property
    def worst_s(self) -> float:
        """Return the worst lag in the window (0 before any sample)."""
        return max(self.samples, default=0.0)

    async def run(self) -> None:
        """Sample until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            self.samples.append(max(0.0, loop.time() - before - self.interval_s))
            if len(self.samples) > self.window:
                self.samples.popleft()
