"""The monitor's two clocks of its own.

The listening clock: entities age only while the monitor can actually hear
them, so a broker outage, its own backlog or a stalled process never makes a
healthy fleet look silent.  While the monitor is behind (overloaded) it
still hears, only late: then the clock is *paced* by what arrives, moving on
as far as the fleet's own sample times have (``credit``), so a node whose
frames stopped still ages while the rest of the fleet is heard, and a
backlog that delays everyone ages no one (issue 35, "Overload never
blinds").

The receive clock: when each message arrived, in wall seconds, but moved on
by the monotonic clock only, so a step of the host's clock (NTP, an
operator) never reads as every publisher's frames arriving late or early
(their receive lags are judged against each one's floor: monitor/load.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class ListeningClock:
    """Seconds the monitor has been able to listen.

    It advances with the monotonic clock only while the monitor is connected
    and keeping up, and only as far as the process has been seen running:
    each ``now`` or ``observe`` moves it by at most ``max_step_s``, so a
    process that was stopped or starved of CPU for a minute gains half a
    second, not a minute.  Entities' ages are measured on it, so an entity
    turns silent only after the monitor has truly listened for its whole
    ``stale_after`` and heard nothing: a broker outage or a stalled process
    pauses the clock instead of ageing the fleet.

    Paced (``pace``: the monitor is behind), it stops following the
    monotonic clock and moves only by ``credit``: the progress of the fleet's
    sample times in what was analysed, never faster in all than the
    monotonic clock it would have followed since it was paced.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, *, max_step_s: float = 0.5) -> None:
        self._now = now
        self._max_step_s = max_step_s
        self._value = 0.0
        self._seen = now()
        self._deaf: set[str] = {"disconnected"}
        self._paced: set[str] = set()
        self._owed = 0.0  # seconds a paced clock would have run and was not credited

    def observe(self) -> float:
        """Move the clock on by the time since it was last seen (capped), if listening; return it."""
        now = self._now()
        step = min(max(now - self._seen, 0.0), self._max_step_s)
        self._seen = now
        if not self._deaf:
            if self._paced:
                self._owed += step
            else:
                self._value += step
        return self._value

    def now(self) -> float:
        """Return the listening time so far."""
        return self.observe()

    def deafen(self, why: str) -> None:
        """Stop the clock for ``why`` (it runs again once every reason is lifted)."""
        self.observe()
        self._deaf.add(why)

    def hear(self, why: str) -> None:
        """Lift ``why``; the clock runs again when no reason is left."""
        self.observe()
        self._deaf.discard(why)

    def pace(self, why: str) -> None:
        """Move the clock only by ``credit`` for ``why`` (it follows the monotonic clock again once lifted)."""
        self.observe()
        self._paced.add(why)

    def unpace(self, why: str) -> None:
        """Lift ``why``; the clock follows the monotonic clock again when no reason is left."""
        self.observe()
        self._paced.discard(why)
        if not self._paced:
            self._owed = 0.0

    def credit(self, seconds: float) -> float:
        """Move a paced, listening clock on by ``seconds`` of what was heard, at most as far as it would have run
        since it was paced less what it was credited; return how far it moved."""
        self.observe()
        if self._deaf or not self._paced:
            return 0.0
        step = min(max(seconds, 0.0), self._owed)
        self._value += step
        self._owed -= step
        return step

    @property
    def listening(self) -> bool:
        """Return True while the clock runs (not deaf, and following the monotonic clock)."""
        return not self._deaf and not self._paced

    async def keep(self, interval_s: float = 0.1) -> None:
        """Observe the clock every ``interval_s`` until cancelled, so it keeps time while nothing arrives."""
        while True:
            self.observe()
            await asyncio.sleep(interval_s)


class ReceiveClock:
    """Wall seconds as the wall clock read at the start, moved on by the monotonic clock since.

    Publishers' receive offsets and the monitor's load are measured on it: a
    step of the monitor's wall clock moves neither.  It drifts from the wall
    clock by the steps made since the start, which no judgement needs.
    """

    def __init__(
        self, *, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic
        self._base = wall() - monotonic()

    def now(self) -> float:
        """Return the receive clock's reading now."""
        return self._base + self._monotonic()
