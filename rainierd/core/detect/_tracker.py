"""Hysteresis for health states: raise after persistence, escalate to a worse
state, clear only after a clean period, so an alert neither flaps nor lingers.

States are small integers ordered by severity (0 is healthy).  Each tick a
detector proposes a candidate state and a reason bitmask per entity; the
tracker turns proposals into states and reports the entities whose state
changed.  It never de-escalates: a state ends only by clearing to healthy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["StateTracker", "Transitions"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Transitions:
    """Entities whose state changed this tick: ids, before, after."""

    ids: I64
    before: I64
    after: I64


@dataclass(eq=False)
class StateTracker:
    """Vectorised state machine over ``n`` entities."""

    raise_after: I64  # ticks of persistence needed, indexed by candidate state
    clear_after: int
    state: I64
    reason: I64
    onset: I64
    bad_streak: I64
    good_streak: I64
    hold: I64  # extra clean ticks needed to clear (e.g. a flapping link)

    @classmethod
    def create(cls, n: int, *, raise_after: list[int], clear_after: int) -> StateTracker:
        """Return a tracker with every entity healthy."""
        z = np.zeros(n, dtype=np.int64)
        return cls(np.asarray(raise_after, dtype=np.int64), clear_after,
                   z.copy(), z.copy(), np.full(n, -1, dtype=np.int64), z.copy(), z.copy(), z.copy())

    def update(self, candidate: I64, reasons: I64, evidence: npt.NDArray[np.bool_], tick: int) -> Transitions:
        """Fold this tick's candidates in where ``evidence`` (a new sample) exists."""
        bad = evidence & (candidate > 0)
        good = evidence & (candidate == 0)
        self.bad_streak = np.where(bad, self.bad_streak + 1, np.where(good, 0, self.bad_streak))
        self.good_streak = np.where(good, self.good_streak + 1, np.where(bad, 0, self.good_streak))
        before = self.state.copy()
        persistent = bad & (self.bad_streak >= self.raise_after[candidate])
        rising = persistent & (candidate > self.state)
        self.onset = np.where(rising & (self.state == 0), tick - self.bad_streak + 1, self.onset)
        self.state = np.where(rising, candidate, self.state)
        self.reason = np.where(bad & (self.state > 0), self.reason | reasons, self.reason)
        clearing = (self.state > 0) & good & (self.good_streak >= self.clear_after + self.hold)
        self.state = np.where(clearing, 0, self.state)
        self.reason = np.where(clearing, 0, self.reason)
        self.hold = np.where(clearing, 0, self.hold)
        changed = np.flatnonzero(self.state != before)
        return Transitions(changed, before[changed], self.state[changed])
