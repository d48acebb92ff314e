"""The monitor's inbox: every MQTT message queued for the next analysis with
O(1) work (no decoding), so the event loop keeps draining the socket however
large the fleet, bounded in bytes with the oldest dropped (and counted: the
frames in them show up as sequence gaps) when analysis falls behind.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rainierd.core.ingest import Message
from rainierd.monitor.rejections import RejectionLog
from rainierd.monitor.snapshot import Receipts

__all__ = ["Inbox"]


class Inbox:
    """Messages waiting for analysis, and the counts of what arrived and what overflow dropped.

    The only writer of its ``receipts`` and backlog counters.
    """

    def __init__(
        self, *, max_frame_bytes: int, max_backlog_bytes: int, listening_s: Callable[[], float],
        rejections: RejectionLog,
    ) -> None:
        self.max_frame_bytes, self.max_backlog_bytes = max_frame_bytes, max_backlog_bytes
        self._listening_s = listening_s
        self._rejections = rejections
        self._queue: deque[Message] = deque()
        self.receipts = Receipts()
        self.bytes = 0  # payload bytes waiting
        self.dropped_messages = 0
        self.dropped_bytes = 0
        self.last_rx_s = 0.0  # loop clock (monotonic) of the latest message

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, topic: str, payload: bytes) -> None:
        """Queue one message for the next analysis (an oversize one is refused and counted at once)."""
        receipts = self.receipts
        encoding = "json" if payload[:1] == b"{" else "binary"
        receipts.messages[encoding] += 1
        receipts.bytes[encoding] += len(payload)
        if len(payload) > self.max_frame_bytes:
            receipts.oversize += 1
            self._rejections.one("oversize", topic=topic,
                                 detail=f"{len(payload)} bytes exceeds the {self.max_frame_bytes}-byte limit")
            return
        queue = self._queue
        queue.append(Message(self._listening_s(), topic, payload, time.time()))
        self.last_rx_s = time.monotonic()
        self.bytes += len(payload)
        while self.bytes > self.max_backlog_bytes and queue:
            dropped = queue.popleft()
            self.bytes -= len(dropped.payload)
            self.dropped_messages += 1
            self.dropped_bytes += len(dropped.payload)

    def take_window(self) -> list[Message]:
        """Take every message, or the oldest half of ``max_backlog_bytes`` when more wait.

        A window's joined columns live in buffers sized by the largest window
        seen, so capping a window caps that memory too; what is left waits for
        the next analysis, which then follows at once.
        """
        limit = self.max_backlog_bytes // 2
        window: list[Message] = []
        size = 0
        queue = self._queue
        while queue and (size < limit or not window):
            message = queue.popleft()
            window.append(message)
            size += len(message.payload)
        self.bytes -= size
        return window

    @property
    def full_window_waiting(self) -> bool:
        """Return whether a capped window left at least another full one behind."""
        return self.bytes >= self.max_backlog_bytes // 2
