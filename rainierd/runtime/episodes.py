"""Log lines for what an attacker can repeat a million times a minute: one
line when an episode starts and one when it ends (or one a minute while it
lasts), each saying how many it stands for, so a flood of refused requests
or failed accepts costs a few JSON lines, never a line (or a traceback) per
attempt.  The counting itself is the metrics' job; this only bounds the log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import structlog

__all__ = ["Episode"]

# While an episode lasts, a reminder this often, so a long one is visible in the log's recent past.
_REMIND_EVERY_S: Final = 60.0


class Episode:
    """Logs ``event`` at the first occurrence, a reminder at most once a minute, and ``ended`` once ``end()``
    is called after occurrences (or, without ``end()``, the next occurrence after a quiet minute)."""

    def __init__(self, logger: Any, event: str, *, ended: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log: structlog.typing.FilteringBoundLogger = logger
        self._event, self._ended, self._clock = event, ended, clock
        self._logged_at: float | None = None  # when the last line was written; None outside an episode
        self._unlogged = 0  # occurrences since that line

    def occurred(self, **fields: object) -> None:
        """Count one occurrence, logging it if it starts an episode or a minute has passed since the last line."""
        now = self._clock()
        self._unlogged += 1
        if self._logged_at is None or now - self._logged_at >= _REMIND_EVERY_S:
            self._log.warning(self._event, occurrences=self._unlogged, **fields)
            self._logged_at, self._unlogged = now, 0

    def end(self) -> None:
        """Close the episode if one is open, logging ``ended`` with the occurrences not yet logged."""
        if self._logged_at is None:
            return
        if self._ended is not None:
            self._log.info(self._ended, occurrences=self._unlogged)
        self._logged_at, self._unlogged = None, 0
