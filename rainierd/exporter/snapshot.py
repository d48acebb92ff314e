"""What one analysis tick concluded, frozen for the collectors: they read only
this (and the ingest counters), never the live numpy state that the next
analysis mutates in a worker thread.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rainierd.core.detect import STATE_NAMES, FleetDetector
from rainierd.core.model import LostByCause
from rainierd.core.throughput import Throughput

__all__ = ["HealthView", "MonitorSnapshot"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class HealthView:
    """The unhealthy entities of every kind: ids, states, reason masks."""

    ids: dict[str, I64]
    states: dict[str, I64]
    reasons: dict[str, I64]

    @classmethod
    def of(cls, detector: FleetDetector) -> HealthView:
        """Return a copy of the detectors' current unhealthy sets."""
        ids, states, reasons = {}, {}, {}
        for entity, tracker in detector.trackers().items():
            bad = np.flatnonzero(tracker.state)
            ids[entity], states[entity], reasons[entity] = bad, tracker.state[bad], tracker.reason[bad]
        return cls(ids, states, reasons)

    def counts(self) -> dict[tuple[str, str], int]:
        """Return how many entities of each kind are in each unhealthy state."""
        out = {}
        for entity, names in STATE_NAMES.items():
            states = self.states.get(entity, np.zeros(0, dtype=np.int64))
            for value, name in enumerate(names[1:], start=1):
                out[entity, name] = int((states == value).sum())
        return out


@dataclass(frozen=True, eq=False)
class MonitorSnapshot:
    """What one analysis tick concluded."""

    generation: int
    throughput: Throughput
    chips_total: int
    analysis_s: float
    analysed_ticks: int
    lost: LostByCause | None = None
    health: HealthView | None = None
    events: Counter[tuple[str, str]] = field(default_factory=Counter)  # cumulative, by (entity, new state)
