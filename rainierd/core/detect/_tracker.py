"""Hysteresis for health states: raise after persistence, escalate to a worse
state, clear only after a clean period, so an alert neither flaps nor lingers.

States are small integers ordered by severity (0 is healthy).  Each tick a
detector proposes a candidate state and a reason bitmask per entity; the
tracker turns proposals into states and reports the entities whose state
changed.  It never de-escalates: a state ends only by clearing to healthy.

Persistence and clean periods are in seconds of the entities' own sample
intervals, not in ticks, so a fault raises and clears in the same time at a
0.5 s or a 5 s tick: each sample adds its interval to the streak it extends.

Given the samples' timestamps (``at_s``), the clean period is timed on them
instead: it runs from the start of the interval of the first healthy sample
to the latest healthy one, so an entity clears ``clear_after_s`` after its
healthy evidence began, in sample time, however many of its samples were
lost on the way or judged nothing.  Counting clean samples alone, a link
that lost a sample in three, or a chip a detector could judge on every
other sample, cleared half as fast again as documented (issue 38: stragglers
9.6-13.2 s and flapping links 31.7-39.8 s against 8 s and 30 s).  An unknown
sample (no evidence: none arrived, or the detector could not judge it)
neither clears nor raises: a clear in progress is neither restarted nor
paused by an unknown gap, which the next known sample settles, a healthy one
bridging it (the entity clears on it if the streak is then long enough), a
bad one restarting the streak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, F64, I64, Floats


@dataclass(frozen=True, eq=False)
class Transitions:
    """Entities whose state changed this tick: ids, before, after."""

    ids: I64
    before: I64
    after: I64


@dataclass(eq=False)
class StateTracker:
    """Vectorised state machine over ``n`` entities."""

    raise_after_s: F32  # seconds of persistence needed, indexed by candidate state (0: the first bad sample)
    clear_after_s: float  # clean seconds needed to clear
    state: npt.NDArray[np.int8]
    reason: npt.NDArray[np.int32]
    onset: I64
    bad_ticks: npt.NDArray[np.int32]  # samples in the current bad streak (for the onset tick)
    bad_s: F32  # seconds in the current bad streak
    good_s: F32  # seconds in the current clean streak
    # Where the clean streak is timed on sample timestamps: when its healthy evidence began (NaN: no streak).
    # Float64, as the timestamps are (epoch seconds); only the entities the tracker works on are ever read.
    good_from_s: F64 | None = None

    def __post_init__(self) -> None:
        if self.good_from_s is None:
            self.good_from_s = np.full(self.state.shape, np.nan)

    @classmethod
    def create(cls, n: int, *, raise_after_s: list[float], clear_after_s: float) -> StateTracker:
        """Return a tracker with every entity healthy (small dtypes: these arrays are fleet-sized)."""
        def zeros(dtype: type[np.generic]) -> npt.NDArray[Any]:
            return np.zeros(n, dtype=dtype)

        return cls(np.asarray(raise_after_s, dtype=np.float32), float(clear_after_s), zeros(np.int8),
                   zeros(np.int32), np.full(n, -1, dtype=np.int64), zeros(np.int32), zeros(np.float32),
                   zeros(np.float32), np.full(n, np.nan))

    def unhealthy(self) -> I64:
        """Return the ids of the entities not healthy, ascending: ``np.flatnonzero(state)``, found eight states
        at a time (few are unhealthy, and a scan of every state one by one costs ~2 ms a million at rainier)."""
        state = self.state
        if state.size % 8 or not state.flags.c_contiguous:
            return np.flatnonzero(state)
        words = np.flatnonzero(state.view(np.uint64))
        ids: I64 = (words[:, None] * 8 + np.arange(8))[state.reshape(-1, 8)[words] != 0]
        return ids

    def update(
        self, candidate: npt.NDArray[np.integer[Any]], reasons: npt.NDArray[np.int32], evidence: npt.NDArray[np.bool_],
        tick: int, *, seconds: Floats | float = 1.0, holding: npt.NDArray[np.bool_] | None = None,
        at_s: F64 | None = None,
    ) -> Transitions:
        """Fold this tick's candidates in where ``evidence`` (a new sample) exists.

        ``seconds`` is each entity's sample interval (or one figure for all);
        an unknown (NaN) interval counts as the shortest possible, none.
        ``holding`` marks entities that may not clear now, however clean (a
        link within the flap hold of its last blip); their clean streak goes on.
        ``at_s`` is each entity's latest sample time: given, the clean streak
        is timed on it (the module docstring), a healthy sample with no time
        (NaN) adding nothing to it; else it sums the healthy samples' ``seconds``.
        """
        # Only entities that are, or may be becoming, unhealthy need any work.
        # For every other one nothing changes that is ever read: its bad
        # streak is 0 and its good streak matters only once it is unhealthy,
        # which a bad tick (resetting it) must precede.
        busy = np.flatnonzero((candidate > 0) | (self.state > 0) | (self.bad_ticks > 0))
        if not busy.size:
            return Transitions(busy, busy, busy)
        cand = candidate[busy].astype(np.int8)
        ev = evidence[busy]
        interval = np.nan_to_num(np.broadcast_to(np.asarray(seconds, np.float32), candidate.shape)[busy], nan=0.0)
        state, reason, onset = self.state[busy], self.reason[busy], self.onset[busy]
        bad_ticks, bad_s, good_s = self.bad_ticks[busy], self.bad_s[busy], self.good_s[busy]
        bad = ev & (cand > 0)
        good = ev & (cand == 0)
        bad_ticks = np.where(bad, bad_ticks + 1, np.where(good, 0, bad_ticks))
        bad_s = np.where(bad, bad_s + interval, np.where(good, np.float32(0.0), bad_s))
        good_from = self._good_from(busy, at_s, good, bad, interval)
        if good_from is None:
            good_s = np.where(good, good_s + interval, np.where(bad, np.float32(0.0), good_s))
        else:
            # The streak's span in sample time; a healthy sample with no time leaves it as it was.
            clean_s = (np.asarray(at_s, np.float64)[busy] - good_from).astype(np.float32)
            good_s = np.where(good & np.isfinite(clean_s), clean_s, np.where(bad, np.float32(0.0), good_s))
        before = state.copy()
        # The first bad sample always counts: a state whose persistence is 0 s raises on it.
        persistent = bad & ((bad_s >= self.raise_after_s[cand]) | (self.raise_after_s[cand] <= 0))
        rising = persistent & (cand > state)
        onset = np.where(rising & (state == 0), tick - bad_ticks + 1, onset)
        state = np.where(rising, cand, state)
        reason = np.where(bad & (state > 0), reason | reasons[busy], reason)
        clearing = (state > 0) & good & (good_s >= self.clear_after_s)
        if holding is not None:
            clearing &= ~holding[busy]
        state = np.where(clearing, 0, state)
        reason = np.where(clearing, 0, reason)
        self.state[busy], self.reason[busy], self.onset[busy] = state, reason, onset
        self.bad_ticks[busy], self.bad_s[busy], self.good_s[busy] = bad_ticks, bad_s, good_s
        if good_from is not None:
            self._good_from_s()[busy] = good_from
        changed = np.flatnonzero(state != before)
        return Transitions(busy[changed], before[changed].astype(np.int64), state[changed].astype(np.int64))

    def _good_from_s(self) -> F64:
        """Return when each entity's timed clean streak began (``__post_init__`` always sets it)."""
        assert self.good_from_s is not None
        return self.good_from_s

    def _good_from(self, busy: I64, at_s: F64 | None, good: npt.NDArray[np.bool_], bad: npt.NDArray[np.bool_],
                   interval: F32) -> F64 | None:
        """Return when the busy entities' clean streaks began, timed on ``at_s`` (None without it).

        A bad sample ends the streak (NaN); the first healthy one starts it
        at the start of its interval, the span its evidence covers; a sample
        with no evidence leaves it as it was.
        """
        if at_s is None:
            return None
        at = np.asarray(at_s, np.float64)[busy]
        began = self._good_from_s()[busy]
        began = np.where(bad, np.nan, began)
        starts = good & np.isnan(began)
        return np.where(starts, at - interval.astype(np.float64), began)
