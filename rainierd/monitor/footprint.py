"""When the monitor hands freed memory back, beyond the end of a burst: the
C heap keeps every page it ever held (``rainierd/runtime/malloc.py``: a tick's
temporaries are reused, not faulted in again), so input that makes an
analysis allocate more than an ordinary tick's leaves the process at that
size for good.  Hostile input does exactly that without ever being a burst:
tests/integration/test_fuzz.py's 11,190 malformed payloads (deep JSON,
frames of 64 KiB, lying headers) at 8,000 a second, every one decoded (the
shares opened), took a demo monitor from 69.5 to 93.5 MiB, every window
under the burst mark, and it stayed there (issue 35); now it is back at
74.9-76.0 MiB (five runs) within a check.  What a release cannot hand back is fragmentation:
heap pages and Python's small-object arenas held by live objects between
freed ones.

So once every ``check_every_s`` the monitor's resident memory is read (one
read of /proc/self/statm) and compared with the lowest it has been at a
check, its floor: more than ``grown_ratio`` over it, the freed memory is
handed back.  A floor that was too low (the monitor genuinely grew: jobs
arrived, baselines filled) costs one release that brings nothing back;
the next check, finding it still grown with no message rejected or refused
since, takes the new size as the floor.  While rejections continue the
floor is never raised, so an attack that lasts across checks is released
again at each, and the floor stays what the fleet alone needs.  A release
costs the next analysis its page faults again (a tenth of an analysis at a
million chips), so once a check interval at most.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final

CHECK_EVERY_S: Final = 30.0
GROWN_RATIO: Final = 1.05


def rss_bytes() -> int | None:
    """Return this process's resident memory (Linux), or None where /proc does not say."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Footprint:
    """The resident memory the monitor settles at, and whether it has grown past it enough to release."""

    def __init__(self, *, check_every_s: float = CHECK_EVERY_S, grown_ratio: float = GROWN_RATIO,
                 rss: Callable[[], int | None] = rss_bytes, clock: Callable[[], float] = time.monotonic) -> None:
        self.check_every_s, self.grown_ratio = check_every_s, grown_ratio
        self._rss, self._clock = rss, clock
        self.floor_bytes: int | None = None
        self._next_check_s = float("-inf")
        self._refused_at_check = -1
        self._released = False  # the last check released

    def due(self, *, refused: int) -> bool:
        """Return whether to release freed memory now; ``refused`` is every message rejected or refused so far.

        Call it after each analysis; it reads the memory only once a check interval.
        """
        now = self._clock()
        if now < self._next_check_s:
            return False
        self._next_check_s = now + self.check_every_s
        quiet = refused == self._refused_at_check
        self._refused_at_check = refused
        rss = self._rss()
        if rss is None:
            return False
        released, self._released = self._released, False
        if self.floor_bytes is None or rss < self.floor_bytes:
            self.floor_bytes = rss
            return False
        if rss <= self.floor_bytes * self.grown_ratio:
            return False
        if released and quiet:  # the last release brought nothing back, and the input was clean since: in use
            self.floor_bytes = rss
            return False
        self._released = True
        return True
