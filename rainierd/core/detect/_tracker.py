"""Hysteresis for health states: raise after persistence, escalate to a worse
state, clear only after a clean period, so an alert neither flaps nor lingers.

States are small integers ordered by severity (0 is healthy).  Each tick a
detector proposes a candidate state and a reason bitmask per entity; the
tracker turns proposals into states and reports the entities whose state
changed.  It never de-escalates: a state ends only by clearing to healthy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd._types import I64

__all__ = ["StateTracker", "Transitions"]


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
    state: npt.NDArray[np.int8]
    reason: npt.NDArray[np.int32]
    onset: I64
    bad_streak: npt.NDArray[np.int32]
    good_streak: npt.NDArray[np.int32]
    hold: npt.NDArray[np.int32]  # extra clean ticks needed to clear (e.g. a flapping link)

    @classmethod
    def create(cls, n: int, *, raise_after: list[int], clear_after: int) -> StateTracker:
        """Return a tracker with every entity healthy (small dtypes: these arrays are fleet-sized)."""
        def zeros(dtype: type[np.integer[Any]]) -> npt.NDArray[Any]:
            return np.zeros(n, dtype=dtype)

        return cls(np.asarray(raise_after, dtype=np.int64), clear_after, zeros(np.int8), zeros(np.int32),
                   np.full(n, -1, dtype=np.int64), zeros(np.int32), zeros(np.int32), zeros(np.int32))

    def update(
        self, candidate: npt.NDArray[np.integer[Any]], reasons: npt.NDArray[np.int32], evidence: npt.NDArray[np.bool_],
        tick: int,
    ) -> Transitions:
        """Fold this tick's candidates in where ``evidence`` (a new sample) exists."""
        # Only entities that are, or may be becoming, unhealthy need any work.
        # For every other one nothing changes that is ever read: its bad
        # streak is 0 and its good streak matters only once it is unhealthy,
        # which a bad tick (resetting it) must precede.
        busy = np.flatnonzero((candidate > 0) | (self.state > 0) | (self.bad_streak > 0))
        if not busy.size:
            return Transitions(busy, busy, busy)
        cand = candidate[busy].astype(np.int8)
        ev = evidence[busy]
        state, reason, onset = self.state[busy], self.reason[busy], self.onset[busy]
        bad_streak, good_streak, hold = self.bad_streak[busy], self.good_streak[busy], self.hold[busy]
        bad = ev & (cand > 0)
        good = ev & (cand == 0)
        bad_streak = np.where(bad, bad_streak + 1, np.where(good, 0, bad_streak))
        good_streak = np.where(good, good_streak + 1, np.where(bad, 0, good_streak))
        before = state.copy()
        persistent = bad & (bad_streak >= self.raise_after[cand])
        rising = persistent & (cand > state)
        onset = np.where(rising & (state == 0), tick - bad_streak + 1, onset)
        state = np.where(rising, cand, state)
        reason = np.where(bad & (state > 0), reason | reasons[busy], reason)
        clearing = (state > 0) & good & (good_streak >= self.clear_after + hold)
        state = np.where(clearing, 0, state)
        reason = np.where(clearing, 0, reason)
        hold = np.where(clearing, 0, hold)
        self.state[busy], self.reason[busy], self.onset[busy] = state, reason, onset
        self.bad_streak[busy], self.good_streak[busy], self.hold[busy] = bad_streak, good_streak, hold
        changed = np.flatnonzero(state != before)
        return Transitions(busy[changed], before[changed].astype(np.int64), state[changed].astype(np.int64))
