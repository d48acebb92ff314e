"""The monitor's view of itself as plain data: its MQTT connection, its
backlog, and how late its samples are applied.  The edges that produce these
(``mqtt``, ``monitor``) and the exporter that reports them both import this
module and nothing of each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from rainierd._types import F64, I64

__all__ = ["LAG_BUCKETS_S", "BacklogState", "CheckpointState", "ConnectionState", "LagHistogram"]

# Fine steps up to 3 s (a 1 s tick's lag lives there), coarse beyond.
LAG_BUCKETS_S: Final = (*(round(0.1 * i, 1) for i in range(1, 31)), 4.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0)


@dataclass(slots=True)
class ConnectionState:
    """Whether a supervised session is connected, for /readyz and metrics."""

    connected: bool = False
    broker: str | None = None  # URL of the broker of the current or last connection (fail-over: which node)
    connects: int = 0
    failures: int = 0
    status_overwritten: int = 0  # another client wrote this one's retained status; it was said again


@dataclass(slots=True)
class CheckpointState:
    """How the monitor's stream checkpoint (``--state-file``) is keeping up."""

    saves: int = 0
    failures: int = 0
    last_save_wall_s: float = float("nan")  # wall time of the last checkpoint written


@dataclass(slots=True)
class BacklogState:
    """Messages waiting for analysis, what overflow dropped, and whether the monitor is behind."""

    messages: int = 0
    bytes: int = 0
    oldest_s: float = 0.0  # how long the oldest message of the last window waited
    dropped_messages: int = 0
    dropped_bytes: int = 0
    overloaded: bool = False
    overload_episodes: int = 0
    reasons: tuple[str, ...] = ()
    # Wall time at receipt minus sample time over the last window, (median, largest magnitude):
    # publishers' clock offsets plus transport delay.
    receive_offset_s: tuple[float, float] = (float("nan"), float("nan"))


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
