"""A bounded asyncio queue that makes room by dropping its oldest item.

Every outbox in rainierd (the simulator's frames, the bridge's frames, the
monitor's events) must never block its producer when the MQTT session is
down, and must count what it lost: one class, so each counts the same way.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class DropOldestQueue(asyncio.Queue[T], Generic[T]):
    """An ``asyncio.Queue`` of at most ``maxsize`` items whose ``offer`` never blocks."""

    def __init__(self, maxsize: int) -> None:
        if maxsize <= 0:
            raise ValueError(f"a drop-oldest queue needs a bound, not {maxsize}")
        super().__init__(maxsize)
        self.dropped = 0  # items dropped to make room

    def offer(self, item: T) -> T | None:
        """Queue ``item``; when full, first drop the oldest item and return it (else None)."""
        dropped = None
        if self.full():
            dropped = self.get_nowait()
            self.task_done()
            self.dropped += 1
        self.put_nowait(item)
        return dropped
