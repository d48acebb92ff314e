"""Whether the monitor is keeping up with its input, judged once a window.

Behind means: the inbox overflowed, the oldest message waited over two
ticks, the analysis took longer than a tick, or messages now reach the inbox
later than usual (they queue before it, in the socket or the broker).

Later than usual is judged per publisher, never against the fleet: each
frame's receive lag (its receipt on the monitor's receive clock minus its
sample time) is taken over its own stream's floor, the learned offset of
that node's publisher (``core/streams.py``), so a publisher's clock skew,
its sampling phase and its jitter never count, nor does a step of the
monitor's own clock (the receive clock is monotonic), and a sample time the
stream has not confirmed never reaches it (such frames are refused).
``receive_lag`` is raised when the window's median excess is over
``max(tick, LATE_AFTER_S)`` (1 s), and the frames over it come from at least
``LATE_STREAMS_SHARE`` of the most streams a window carried in the last
``RECEIVE_LAG_HISTORY`` windows (and at least two): queueing delays every
stream alike, while one node's frames, late or lying, never make the fleet
"overloaded".  While behind, ``/readyz`` says so; it ends after a few clean
windows, so it does not flap.

While behind, the monitor still judges silence, from what does arrive: the
listening clock is paced (``ListeningClock.pace``) and moves on by the
progress of the fleet's own sample clock, the median over the nodes heard
in a window of their newest sample time (``Confirmed.heard_t_s``: each
node once, so a flooder's frames weigh one node), taken as a running
maximum so a window of older frames never moves it back.  A backlog that
delays every stream alike delays the fleet's sample clock with it, so no
node is aged by the monitor's own lateness; a node whose frames stopped
falls behind the fleet it is part of and is judged lost in its usual span
of the fleet's time (issue 35: a node that went silent while a neighbour
flooded was never reported lost, the clock standing still for as long as
the flood kept the monitor behind).

It credits only what cannot age a node by the monitor's own backlog: a
frame waiting in the inbox keeps the stamp it arrived with while the clock
moves on, and its node would read as silent when it is applied.  So a
window credits nothing unless it took everything that waited (a capped
window leaves a backlog behind), nothing when the inbox overflowed
(``inbox_full``: what it dropped would read as a jump), and at most a tick:
frames that arrive while a window is analysed wait for the next one, a
tick at most when the monitor keeps up with what reaches it.  The clock
then lags the fleet's sample clock rather than leading it; a node whose
frames stopped is still found, later by what was not credited.  (Found
by ``benchmarks ingest``: an inbox backlog of several ticks, credited in
full, turned 1,300 healthy nodes ``lost``.)
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

import numpy as np
import structlog

from rainierd._types import F64, I64
from rainierd.monitor.clock import ListeningClock
from rainierd.monitor.snapshot import Backlog

log = structlog.get_logger("rainierd.monitor")

CLEAN_WINDOWS_TO_RECOVER: Final = 3  # analyses without a sign of overload before it ends
RECEIVE_LAG_HISTORY: Final = 300  # windows over which the usual number of streams a window carries is taken
LATE_STREAMS_SHARE: Final = 0.1  # of those, the share whose frames must come late for receive_lag
LATE_AFTER_S: Final = 1.0  # excess over a stream's floor that is late: this or a tick, whichever is longer


class LoadJudge:
    """Keeps the overload state from what each analysed window shows."""

    def __init__(self, *, tick_s: float, clock: ListeningClock) -> None:
        self._tick_s, self._clock = tick_s, clock
        self.overloaded = False
        self.episodes = 0
        self.reasons: tuple[str, ...] = ()
        self.oldest_s = 0.0
        self.receive_offset_s = (float("nan"), float("nan"))
        self._dropped_seen = 0
        self._clean_windows = 0
        self._streams: deque[int] = deque(maxlen=RECEIVE_LAG_HISTORY)
        self._heard_t_s = math.nan  # while behind: the fleet's sample clock as far as it was credited

    def judge(self, *, waited_s: float, elapsed_s: float, dropped_messages: int, receive_lag_s: F64,
              receive_excess_s: F64, receive_entity: I64, streams_heard: int, heard_t_s: float = math.nan,
              drained: bool = True) -> None:
        """Decide whether the monitor is behind, from one window's wait, analysis time and receive lags; while it
        is, move the listening clock on by what the window heard.

        ``receive_lag_s`` is the applied frames' raw lags (for the offset gauge); ``receive_excess_s`` each one's
        excess over its own stream's floor, with its node in ``receive_entity``; ``heard_t_s`` the fleet's sample
        clock after the window (``Confirmed.heard_t_s``; NaN: no node advanced); ``drained`` whether the window
        took everything that waited in the inbox.
        """
        self.oldest_s = waited_s
        reasons = []
        if dropped_messages > self._dropped_seen:
            reasons.append("inbox_full")
            self._dropped_seen = dropped_messages
        if waited_s > 2 * self._tick_s:
            reasons.append("backlog")
        if elapsed_s > self._tick_s:
            reasons.append("analysis_overrun")
        if receive_lag_s.size:
            self.receive_offset_s = (float(np.median(receive_lag_s)), float(np.abs(receive_lag_s).max()))
        # Messages that queue before the inbox (socket, broker) show as a
        # receive lag above each stream's own floor, in many streams at once.
        self._streams.append(streams_heard)
        bound = max(self._tick_s, LATE_AFTER_S)
        if receive_excess_s.size and float(np.median(receive_excess_s)) > bound:
            late = int(np.unique(receive_entity[receive_excess_s > bound]).size)
            if late >= max(2, LATE_STREAMS_SHARE * max(self._streams)):
                reasons.append("receive_lag")
        if reasons:
            self._clean_windows = 0
            if not self.overloaded:
                self.overloaded = True
                self.episodes += 1
                self._clock.pace("overloaded")
                self._heard_t_s = heard_t_s  # the clock ran up to this window; from here it follows what is heard
                log.warning("monitor falling behind; silence is judged by what still arrives",
                            reasons=reasons, waited_s=round(waited_s, 2), analysis_s=round(elapsed_s, 3),
                            dropped_messages=dropped_messages)
            else:
                self._credit(heard_t_s, creditable=drained and "inbox_full" not in reasons)
            self.reasons = tuple(reasons)
        elif self.overloaded:
            self._credit(heard_t_s, creditable=drained)
            self._clean_windows += 1
            if self._clean_windows >= CLEAN_WINDOWS_TO_RECOVER:
                self.overloaded, self.reasons = False, ()
                self._clock.unpace("overloaded")
                log.info("monitor caught up", dropped_messages=dropped_messages)

    def _credit(self, heard_t_s: float, *, creditable: bool) -> None:
        """Move the paced clock on by how far the fleet's sample clock advanced past the last mark, at most a tick,
        if the window is ``creditable``; the mark moves on either way."""
        if not heard_t_s > self._heard_t_s:  # NaN on either side, or no progress: nothing heard to go by
            if math.isnan(self._heard_t_s):
                self._heard_t_s = heard_t_s
            return
        if creditable:
            self._clock.credit(min(heard_t_s - self._heard_t_s, self._tick_s))
        self._heard_t_s = heard_t_s

    def backlog(self, *, messages: int, bytes_: int, dropped_messages: int, dropped_bytes: int) -> Backlog:
        """Return the backlog status: the inbox's figures with this judgement."""
        return Backlog(messages=messages, bytes=bytes_, oldest_s=self.oldest_s, dropped_messages=dropped_messages,
                       dropped_bytes=dropped_bytes, overloaded=self.overloaded, overload_episodes=self.episodes,
                       reasons=self.reasons, receive_offset_s=self.receive_offset_s)
