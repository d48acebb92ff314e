"""How often each stream (a node's frames, a site's) reports, so its silence
is judged in its own periods, not the monitor's tick.

Why: silence was judged against ``stale_after_ticks x tick`` of listening
for every entity, so AWS neuron-monitor at its documented default period of
5 s, beside agents at 1 s, left its nodes `lost` between every two of its
reports and the fleet flapping `feed lost` (issue 33: 51 events in 150 s).
Each stream's period is now known, and an entity is silent only after
``max(stale_after_s, stale_after_ticks x period)`` unheard
(``FleetState.silent``).

A stream's period is what its latest frame declares (a JSON node frame's
``period_s``), else what its cadence shows: the upper median of its last
``RING`` sample intervals, each the time between two consecutive frames of
the stream on its own sample clock divided by the sequence numbers between
them, so frames lost on the way do not stretch it.  A median of five is
robust to two outliers: a silence (one long interval, when it ends) or a
stalled backlog flushed at once (short ones) does not move it, while a real
change of period is followed within three frames.  A declared period wins
over the learned one, so a publisher is held to what it says, and a declared
change (5 s → 1 s → 5 s) is followed from the frame that declares it.

Until a stream has declared a period or shown one interval, its silence is
judged at ``stale_after_s``: an undeclared publisher slower than that looks
silent once, at its very first interval, unless it started within the
monitor's reconnect grace (20 s after each connect, when no silence is
judged and the period is learned).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from rainierd._types import F64, I64

__all__ = ["MAX_PERIOD_S", "RING", "Cadence"]

MAX_PERIOD_S: Final = 3_600.0
"""The longest period a stream may have (a JSON frame's ``period_s`` is refused beyond it); a longer interval
is a silence, never a period."""
RING: Final = 5
"""Sample intervals kept per stream for the learned period."""


class Cadence:
    """The period of ``n`` streams: declared by their latest frame, else learned from their intervals."""

    def __init__(self, n: int) -> None:
        self.declared_s = np.full(n, np.nan)  # what the latest frame declared (NaN: nothing)
        self.learned_s = np.full(n, np.nan)  # upper median of the intervals kept (NaN: none yet)
        self.period_s = np.full(n, np.nan)  # the period silence is judged by (NaN: unknown)
        self._intervals_s = np.full((n, RING), np.nan)
        self._next = np.zeros(n, np.int64)  # the ring slot the next interval takes

    def observe(self, ids: I64, interval_s: F64, declared_s: F64) -> None:
        """Take one applied frame of each of the (unique) streams ``ids``: the sample interval it closes over
        the frames since the stream's last (NaN: none, e.g. its first frame or a restart) and the period it
        declares (NaN: none).  A value that is not a plausible period (not in (0, MAX_PERIOD_S]) is ignored."""
        with np.errstate(invalid="ignore"):
            declared_ok = (declared_s > 0) & (declared_s <= MAX_PERIOD_S)
            learn = (interval_s > 0) & (interval_s <= MAX_PERIOD_S)
        self.declared_s[ids] = np.where(declared_ok, declared_s, np.nan)
        if learn.any():
            streams = ids[learn]
            slot = self._next[streams]
            self._intervals_s[streams, slot] = interval_s[learn]
            self._next[streams] = (slot + 1) % RING
            rows = np.sort(self._intervals_s[streams], axis=1)  # NaN (a slot not yet filled) sorts last
            count = np.count_nonzero(~np.isnan(rows), axis=1)
            self.learned_s[streams] = rows[np.arange(streams.size), count // 2]
        declared = self.declared_s[ids]
        self.period_s[ids] = np.where(np.isnan(declared), self.learned_s[ids], declared)
