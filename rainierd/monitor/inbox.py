"""The monitor's inbox: every MQTT message queued for the next analysis with
O(1) work (no decoding: at most its header read), so the event loop keeps
draining the socket however large the fleet, bounded in bytes with the
oldest dropped (and counted: the frames in them show up as sequence gaps)
when analysis falls behind.

Every message the MQTT client reads reaches ``put`` (``mqtt.deliver``), and
``put`` counts each under exactly one fate: queued, or refused by reason
before any decoding (``retained``: a replay of telemetry someone retained;
``oversize``; a header the decoding would refuse, by its reason; and
``over_share``, ``over_share_unconfirmed`` and ``too_many_topics``: its
share spent, ``admission``).  A queued message later dropped because the
backlog was full is counted there too.

Genuine frames first (``admission``): a topic's confirmed publisher's
frames wait in one queue, everything else in another, and a full backlog
drops the other queue's oldest first, so a flood of anyone else's frames
never pushes a node's own out.  A window takes both in the order they
arrived (a stream's frames may be in both: its numbering is judged in
order).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final

import structlog

from rainierd.admission import Admission
from rainierd.core.ingest import Message
from rainierd.errors import FrameError
from rainierd.fleet import Topology
from rainierd.monitor.clock import ReceiveClock
from rainierd.monitor.rejections import RejectionLog
from rainierd.monitor.snapshot import Receipts
from rainierd.wire import HEADER, NODE_FRAME_DTYPES

log = structlog.get_logger("rainierd.monitor")
_PUBLISHER_BYTES: Final = 32  # a publisher id in a frame (``rainierd-sim-ffe68dde``: 21)

BACKLOG_TICKS: Final = 4
"""Ticks of the fleet's frames the backlog holds by default: a window is half of it, so two ticks of frames
are analysed at once after a stall, while two more arrive (as many as the simulator's outbox holds)."""
_MIN_BACKLOG_BYTES: Final = 32 * 2**20


def backlog_bytes_for(topology: Topology, *, max_frame_bytes: int, ticks: int = BACKLOG_TICKS) -> int:
    """Return the default backlog bound: ``ticks`` of ``topology``'s binary frames, at least 32 MiB and 4 frames.

    A tick's frames are a node frame a node (header, publisher id, every
    record): at ``rainier`` 115.5 MB a tick, as measured from the
    simulator's batches (771 of them); at ``demo`` 30 kB, so the floor holds.
    """
    nodes = int(topology.node_present.sum())  # a shard's view keeps the fleet's numbering, its share present
    size = {kind: dtype.itemsize for kind, dtype in NODE_FRAME_DTYPES.items()}
    per_node = (topology.n_links * size["links"] + topology.n_efa * size["efa"]
                ) // topology.n_nodes + size["cooling"] + HEADER.size + _PUBLISHER_BYTES
    records = topology.n_present_chips * size["chips"] + nodes * per_node
    return max(ticks * records, _MIN_BACKLOG_BYTES, 4 * max_frame_bytes)


class Inbox:
    """Messages waiting for analysis, and the counts of what arrived and what overflow dropped.

    The only writer of its ``receipts`` and backlog counters.
    """

    def __init__(
        self, *, max_frame_bytes: int, max_backlog_bytes: int, listening_s: Callable[[], float],
        rejections: RejectionLog, admission: Admission | None = None,
        monotonic_s: Callable[[], float] = time.monotonic, receive_clock: ReceiveClock | None = None,
    ) -> None:
        self.max_frame_bytes, self.max_backlog_bytes = max_frame_bytes, max_backlog_bytes
        self._listening_s = listening_s
        self._rejections = rejections
        self.admission = admission  # None: no header check, no shares (a test's or a benchmark's inbox)
        self.monotonic_s = monotonic_s  # the shares' clock (a test's own)
        # Receipts are stamped on it, never on the wall clock itself: a step of this host's clock would
        # otherwise read as every publisher's frames arriving late (monitor/clock.py).
        self.receive_clock = receive_clock or ReceiveClock()
        self._overflowing = False  # in an episode of backlog overflow (logged once each)
        self.peak_bytes = 0  # the most payload bytes waiting since the last ``burst_over``
        self.peak_messages = 0
        self.overflow_episodes = 0
        # (arrival number, message): the topics' confirmed publishers' frames, and everything else admitted.
        self._queue: deque[tuple[int, Message]] = deque()
        self._unconfirmed: deque[tuple[int, Message]] = deque()
        self._arrivals = 0
        self.receipts = Receipts()
        self.bytes = 0  # payload bytes waiting
        self.dropped_messages = 0
        self.dropped_bytes = 0
        self.last_rx_s = 0.0  # loop clock (monotonic) of the latest message

    def __len__(self) -> int:
        return len(self._queue) + len(self._unconfirmed)

    def put(self, topic: str, payload: bytes, *, retained: bool = False) -> None:
        """Queue one message for the next analysis, or count why not (no decoding either way).

        ``retained`` is the MQTT retain flag as delivered: the broker replaying
        what a publisher retained, not a frame sent now.  Telemetry is never
        retained by a genuine publisher (docs/wire-format.md), so a replay
        is refused before it can be applied as new.
        """
        receipts = self.receipts
        size = len(payload)
        encoding = "json" if payload[:1] == b"{" else "binary"
        receipts.messages[encoding] += 1
        receipts.bytes[encoding] += size
        if retained:
            self._refuse("retained", topic, "a retained telemetry message (a replay, not a frame sent now)")
            return
        if size > self.max_frame_bytes:
            self._refuse("oversize", topic, f"{size} bytes exceeds the {self.max_frame_bytes}-byte limit")
            return
        now_s = self.monotonic_s()
        rx_wall_s = self.receive_clock.now()
        queue = self._queue
        shed = 0
        if self.admission is not None:
            try:
                fate = self.admission.admit(topic, payload, now_s=now_s, rx_wall_s=rx_wall_s)
            except FrameError as exc:  # its header alone refuses it: charged to nobody's share
                self._refuse(exc.reason, topic, exc.detail)
                return
            if fate == "unconfirmed":
                queue = self._unconfirmed
            elif fate != "confirmed":
                receipts.refused[fate] += 1  # logged once per episode by the shares themselves
                return
            shed = self.admission.shed
        self._arrivals += 1
        queue.append((self._arrivals, Message(self._listening_s(), topic, payload, rx_wall_s, shed)))
        self.last_rx_s = now_s
        self.bytes += size
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self.peak_messages = max(self.peak_messages, len(self))
        if self.bytes > self.max_backlog_bytes:
            self._overflow(topic)

    def _refuse(self, reason: str, topic: str, detail: str) -> None:
        self.receipts.refused[reason] += 1
        self._rejections.one(reason, topic=topic, detail=detail)

    def _overflow(self, topic: str) -> None:
        """Drop the oldest messages until the backlog fits again, anyone else's before the confirmed publishers';
        log the first drop of an episode."""
        dropped_before = self.dropped_messages
        for queue in (self._unconfirmed, self._queue):
            while self.bytes > self.max_backlog_bytes and queue:
                _, dropped = queue.popleft()
                self.bytes -= len(dropped.payload)
                self.dropped_messages += 1
                self.dropped_bytes += len(dropped.payload)
        if not self._overflowing:
            self._overflowing = True
            self.overflow_episodes += 1
            log.warning("backlog full; dropping the oldest messages (their frames count as lost)",
                        max_backlog_bytes=self.max_backlog_bytes, dropped=self.dropped_messages - dropped_before,
                        newest_topic=topic[:200], episodes=self.overflow_episodes)

    def take_window(self) -> list[Message]:
        """Take every message, or the oldest half of ``max_backlog_bytes`` when more wait, in arrival order.

        A window's joined columns live in buffers sized by the largest window
        seen, so capping a window caps that memory too; what is left waits for
        the next analysis, which then follows at once.
        """
        if self.admission is not None:
            self.admission.sweep(self.monotonic_s())
        limit = self.max_backlog_bytes // 2
        window: list[Message] = []
        size = 0
        confirmed, unconfirmed = self._queue, self._unconfirmed
        while (confirmed or unconfirmed) and (size < limit or not window):
            queue = unconfirmed if not confirmed or (unconfirmed and unconfirmed[0][0] < confirmed[0][0]) else confirmed
            _, message = queue.popleft()
            window.append(message)
            size += len(message.payload)
        self.bytes -= size
        if self._overflowing and self.bytes <= self.max_backlog_bytes // 2:
            self._overflowing = False  # caught up: the next overflow is a new episode
            log.info("backlog no longer full", dropped_messages=self.dropped_messages,
                     dropped_bytes=self.dropped_bytes)
        return window

    def burst_over(self, *, messages: int) -> bool:
        """Return True once, when the inbox is empty again after it held half its bound or ``messages`` messages.

        A genuine fleet's tick is a quarter of the default bound (``BACKLOG_TICKS``)
        and one message a stream, so only a burst (or a stall) gets there.
        """
        if len(self) or (self.peak_bytes < self.max_backlog_bytes // 2 and self.peak_messages < messages):
            return False
        self.peak_bytes = self.peak_messages = 0
        return True

    @property
    def full_window_waiting(self) -> bool:
        """Return whether a capped window left at least another full one behind."""
        return self.bytes >= self.max_backlog_bytes // 2
