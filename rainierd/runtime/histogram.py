"""A cumulative histogram of lags, kept live by whoever measures (the monitor's
sample lag, the event loop's probe lag) and frozen once a tick for the
exporter, which only ever reads the frozen copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from rainierd._types import F64, I64

# Fine steps up to 3 s (a 1 s tick's lag lives there), coarse beyond.
LAG_BUCKETS_S: Final = (*(round(0.1 * i, 1) for i in range(1, 31)), 4.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class Histogram:
    """A histogram as of one instant: (upper bound, count at or below it) per bucket, +Inf last."""

    buckets: tuple[tuple[float, int], ...]
    total_s: float
    count: int


@dataclass(eq=False)
class LagHistogram:
    """A cumulative histogram of how long after its sample time each frame was applied."""

    bounds: tuple[float, ...] = LAG_BUCKETS_S
    counts: I64 = field(default_factory=lambda: np.zeros(len(LAG_BUCKETS_S) + 1, np.int64))
    total_s: float = 0.0
    count: int = 0

    def observe(self, lags_s: F64) -> None:
        """Count each lag in its bucket (the last bucket is +Inf)."""
        if not lags_s.size:
            return
        self.counts += np.bincount(np.searchsorted(self.bounds, lags_s, side="left"), minlength=self.counts.size)
        self.total_s += float(lags_s.sum())
        self.count += int(lags_s.size)

    def cumulative(self) -> list[tuple[float, int]]:
        """Return (upper bound, count at or below it) per bucket, +Inf last, as Prometheus wants."""
        running = np.cumsum(self.counts).tolist()
        return list(zip([*self.bounds, float("inf")], running, strict=True))

    def frozen(self) -> Histogram:
        """Return the histogram as it stands now, as a value no later observation changes."""
        return Histogram(tuple(self.cumulative()), self.total_s, self.count)
