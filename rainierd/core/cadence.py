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
        # Slot by stream, so each slot is one contiguous row; inf: not filled yet (sorts after every interval).
        self._intervals_s = np.full((RING, n), np.inf)
        self._next = np.zeros(n, np.int64)  # the ring slot the next interval takes
        self._kept = np.zeros(n, np.int64)  # intervals in the ring (at most RING)
        self._typical_s: float | None = None  # the streams' median period, computed at most once per change
        self._typical_known = False

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
            self._intervals_s[slot, streams] = interval_s[learn]
            self._next[streams] = (slot + 1) % RING
            kept = np.minimum(self._kept[streams] + 1, RING)
            self._kept[streams] = kept
            self.learned_s[streams] = _upper_median(self._intervals_s[:, streams], kept)
        declared = self.declared_s[ids]
        self.period_s[ids] = np.where(np.isnan(declared), self.learned_s[ids], declared)
        self._typical_known = False

    def typical_s(self) -> float | None:
        """Return the median period over the streams whose period is known (None: none is).

        What "one sample's worth of seconds" is for the detectors' persistence
        (``detect/_common.py``): a silence the whole fleet shared (a broker
        outage) leaves every interval as long as the outage, but moves no
        stream's period, which is a median of its last five intervals.
        """
        if not self._typical_known:
            known = self.period_s[~np.isnan(self.period_s)]
            self._typical_s = float(np.median(known)) if known.size else None
            self._typical_known = True
        return self._typical_s


# A sorting network of five (Knuth, TAOCP vol. 3, 5.3.4): nine compare-exchanges, each one vectorised pass
# over the streams; np.sort along an axis of five costs ~6 times as much at 31,200 streams.
_NETWORK: Final = ((0, 1), (3, 4), (2, 4), (2, 3), (0, 3), (0, 2), (1, 4), (1, 3), (1, 2))


def _upper_median(rows: F64, count: I64) -> F64:
    """Return the upper median of each column of ``rows`` (``RING`` rows), whose first ``count`` values (at least
    one) are filled and the rest inf."""
    a: list[F64] = [rows[i] for i in range(RING)]
    for i, j in _NETWORK:
        a[i], a[j] = np.minimum(a[i], a[j]), np.maximum(a[i], a[j])
    # The upper median of k sorted values is the (k // 2)-th: of 1, 2, 3, 4, 5 values, the 0th, 1st, 1st, 2nd, 2nd.
    if bool((count == RING).all()):
        return a[2]
    median: F64 = np.where(count >= 4, a[2], np.where(count >= 2, a[1], a[0]))
    return median
