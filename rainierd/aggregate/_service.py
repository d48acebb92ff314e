"""The aggregator role on the event loop: one MQTT session that hears its
share's node frames and publishes batch frames, and a tick that turns what
was heard into batches in a worker thread.

Messages reach ``hear`` straight from the client's read callback
(``mqtt.deliver``), O(1) each: a retained or oversize one is counted and
dropped; then each is admitted as the monitor admits it
(``rainierd.admission``): a broken header is dropped at once as
``malformed`` (``decode_errors_total`` by the decoding's reason), the next
frame of a node's stream is charged to its topic's confirmed share and
anything else to the topic's unconfirmed share, and what a share refuses is
dropped (``over_share``, ``over_share_unconfirmed``).  So one agent flooding
its own topic (with the ACL) or anyone flooding any topic (without it)
costs its own share, never another node's frame (issue 35: a junk flood on
one node's topic filled the tick's list and cost the others 168 frames, and
a flood of valid frames of one node raised events on others).  What is
admitted waits for the tick, in the order it arrived, each kind up to a
bound (four ticks of its share's nodes, two for the unconfirmed), beyond
which it is counted ``backlog_full``.  Once a
tick (drift-free, ``start + k * tick_s``) the list is swapped for an empty
one and handed to the ``Batcher`` in a worker thread; its batches go to a
bounded outbox that drops its oldest batch when full (the broker away), each
dropped frame counted ``outbox_full``.  Nothing is dropped uncounted: every
message received is batched or dropped for one reason, every batched frame
published or dropped, and each drop is a gap in a node's sequence that the
monitor counts lost.

On a stop it drains: the frames heard so far are batched and the outbox
published for up to ``DRAIN_S`` before the tasks are cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import aiomqtt
import numpy as np
import structlog

from rainierd.admission import Admission, SharePolicy
from rainierd.aggregate._batcher import Batcher, NodeHead, Outgoing, TickResult, head_of, said_of
from rainierd.errors import FrameError
from rainierd.fleet import Topology, shard_view
from rainierd.mqtt import Connection, ConnectionState, deliver, publish_many, publish_nowait
from rainierd.runtime import DropOldestQueue, Schedule, Verdict
from rainierd.wire import Shard, node_filters

log = structlog.get_logger("rainierd.aggregate")

DRAIN_S: Final = 1.0  # on a stop, how long the last batches may take to publish
_BACKLOG_TICKS: Final = 4
_OUTBOX_TICKS: Final = 4
_WRITE_BYTES: Final = 1 << 19  # batches queued on the client as one packet, at most about this much
_FILTERS_PER_SUBSCRIBE: Final = 512  # a share at rainier is 7,800 / N UltraServers: a few SUBSCRIBEs
BATCH_NODE_BUCKETS: Final = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 4096)


@dataclass(frozen=True, slots=True)
class AggregatorStatus:
    """The aggregator's counters as of one instant (what /metrics reads; built on the loop, read in a thread)."""

    shard: str = "0/1"
    ultraservers: int = 0
    received: int = 0
    batched: int = 0
    published_frames: int = 0
    published_batches: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    decode_errors: dict[str, int] = field(default_factory=dict)
    narrowed: int = 0
    batches_made: int = 0
    batch_nodes_le: tuple[int, ...] = (0,) * len(BATCH_NODE_BUCKETS)  # batches of at most each bucket's entries
    # Median, p99 and largest age at batching of the last tick's frames; None when it batched none (no sample:
    # an age of nothing is not a number to graph or alert on).
    age_s: tuple[float, float, float] | None = None
    tick_duration_s: float = float("nan")  # decode, batch and encode of the last tick
    ticks: int = 0
    ticks_late: int = 0
    pending: int = 0
    outbox: int = 0
    connection: Connection = field(default_factory=Connection)


class Aggregator:
    """Hears ``shard``'s node frames of ``topology`` and republishes them as batch frames once a tick."""

    def __init__(
        self, topology: Topology, *, shard: Shard, name: str, tick_s: float, batch_nodes: int,
        max_frame_bytes: int, qos: int, share: SharePolicy | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        view = shard_view(topology, shard)
        self.ultraservers = [int(u) for u in np.flatnonzero(
            view.node_present.reshape(view.n_ultraservers, -1).any(axis=1))]
        n_nodes = int(view.node_present.sum())
        self.batcher = Batcher(topology, shard=shard, name=name, max_nodes=batch_nodes or 128,
                               max_frame_bytes=max_frame_bytes, tick_s=tick_s)
        self.shard, self.tick_s, self.qos, self.max_frame_bytes = shard, tick_s, qos, max_frame_bytes
        self.admission = Admission(share or SharePolicy(), tick_s=tick_s)
        self.monotonic_s = monotonic_s  # the shares' clock (a test's own)
        self._max_pending = max(1_000, _BACKLOG_TICKS * n_nodes)
        self._max_unconfirmed = max(500, _BACKLOG_TICKS * n_nodes // 2)
        batches_a_tick = max(1, -(-n_nodes // max(1, batch_nodes or 128)) + 3 * len(shard.buckets))
        self.outbox: DropOldestQueue[Outgoing] = DropOldestQueue(_OUTBOX_TICKS * batches_a_tick)
        self.connection = ConnectionState()
        self._pending: list[tuple[str, bytes]] = []  # in arrival order (a stream's frames may be of both kinds)
        self._heads: list[NodeHead | None] = []  # each pending message's head_of
        self._confirmed_pending = self._unconfirmed_pending = 0
        self.received = 0
        self.batched = 0
        self.published_frames = 0
        self.published_batches = 0
        self.dropped: Counter[str] = Counter()
        self.decode_errors: Counter[str] = Counter()
        self.narrowed = 0
        self.schedule = Schedule(tick_s, "aggregator")
        self.batches_made = 0
        self._batch_nodes_le = np.zeros(len(BATCH_NODE_BUCKETS), np.int64)
        self._last: TickResult | None = None
        self._last_duration_s = float("nan")
        self._progress = (-1, time.monotonic())
        self._ticking = asyncio.Lock()
        self.status = self._freeze()

    # -- input ---------------------------------------------------------------------------------------------
    def hear(self, topic: str, payload: bytes, retained: bool) -> None:
        """Take one message (from the client's read callback: O(1), never raises)."""
        self.received += 1
        if retained:
            self.dropped["retained"] += 1
            return
        if len(payload) > self.max_frame_bytes:
            self.dropped["oversize"] += 1
            return
        try:
            head = head_of(payload)  # read once: for the admission and for the tick
            fate = self.admission.admit(topic, payload, now_s=self.monotonic_s(), rx_wall_s=time.time(),
                                        said=None if head is None else said_of(head))
        except FrameError as exc:  # its header alone refuses it, unless its topic already does
            reason = self.batcher.topic_reason(topic)
            if reason is None:
                reason = "malformed"
                self.decode_errors[exc.reason] += 1
            self.dropped[reason] += 1
            return
        if fate == "confirmed":
            if self._confirmed_pending >= self._max_pending:
                self.dropped["backlog_full"] += 1
                return
            self._confirmed_pending += 1
        elif fate == "unconfirmed":
            if self._unconfirmed_pending >= self._max_unconfirmed:
                self.dropped["backlog_full"] += 1
                return
            self._unconfirmed_pending += 1
        else:
            self.dropped[fate] += 1
            return
        self._pending.append((topic, payload))
        self._heads.append(head)

    async def session(self, client: aiomqtt.Client) -> None:
        """Subscribe to the share's node topics and publish the outbox until cancelled (``mqtt.supervise``)."""
        deliver(client, self.hear)
        filters = node_filters(self.ultraservers)
        for first in range(0, len(filters), _FILTERS_PER_SUBSCRIBE):
            await client.subscribe([(f, self.qos) for f in filters[first:first + _FILTERS_PER_SUBSCRIBE]])
        log.info("aggregator subscribed", shard=str(self.shard), ultraservers=len(self.ultraservers),
                 filters=len(filters))
        while True:
            burst = [await self.outbox.get()]
            while not self.outbox.empty():
                burst.append(self.outbox.get_nowait())
            published = False
            try:
                await self._publish(client, burst)
                published = True
            finally:
                # A batch taken and not confirmed is counted, never forgotten.
                frames = sum(message.frames for message in burst)
                if published:
                    self.published_frames += frames
                    self.published_batches += len(burst)
                else:
                    self.dropped["unpublished"] += frames
                for _ in burst:
                    self.outbox.task_done()

    async def _publish(self, client: aiomqtt.Client, burst: list[Outgoing]) -> None:
        """Publish the batches waiting in the outbox, in order, as the simulator publishes a run of frames.

        Every batch but the last is handed to the client without waiting (at
        QoS 0 in writes of about ``_WRITE_BYTES``, ``mqtt.publish_many``; at
        QoS 1 each queued, ``mqtt.publish_nowait``); the last goes through
        aiomqtt and is waited for: the client writes in order, so once it is
        out (at QoS 1: acknowledged) they all are.  aiomqtt's publish of each
        batch cost ~100 µs of the event loop (its futures, a writer registered
        and removed, a wake-up through the loop's self-pipe, paho's copy),
        most of a frame's cost where a share's batches are small (issue 39:
        ``ingest --aggregators``, ~6 nodes a batch: 51 µs a frame in one run
        before, 33 the median of three after).

        Raises aiomqtt.MqttError when the connection is gone.
        """
        last = burst[-1]
        if self.qos == 0:
            # Queued in writes of at most _WRITE_BYTES: paho copies what is left of a packet at each partial
            # send, and a tick's batches are megabytes.
            group: list[Outgoing] = []
            size = 0
            for message in burst[:-1]:
                group.append(message)
                size += len(message.payload)
                if size >= _WRITE_BYTES:
                    publish_many(client, [m.topic for m in group], [m.payload for m in group])
                    group, size = [], 0
            publish_many(client, [m.topic for m in group], [m.payload for m in group])
        else:
            for message in burst[:-1]:
                publish_nowait(client, message.topic, message.payload, qos=self.qos)
        await client.publish(last.topic, last.payload, qos=self.qos)

    # -- ticks ---------------------------------------------------------------------------------------------
    async def run_ticks(self, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Batch what was heard once a tick, on the drift-free schedule, until cancelled.

        ``after`` is awaited after each tick (the /metrics route's refresh).
        """
        async for _ in self.schedule.ticks(first=1):
            await self.tick()
            if after is not None:
                await after()

    @property
    def ticks_late(self) -> int:
        """Return the ticks batched more than a tick after they were due."""
        return self.schedule.late

    async def tick(self) -> None:
        """Batch the messages heard since the last tick (in a worker thread) and queue the batches."""
        async with self._ticking:  # the drain's tick waits for the scheduled one: one batcher at a time
            await self._tick()

    async def _tick(self) -> None:
        messages, self._pending = self._pending, []
        heads, self._heads = self._heads, []
        self._confirmed_pending = self._unconfirmed_pending = 0
        self.admission.sweep(self.monotonic_s())
        started = time.perf_counter()
        result = await asyncio.to_thread(self.batcher.tick, messages, now_s=time.time(), heads=heads)
        self._last_duration_s = time.perf_counter() - started
        self._last = result
        self.admission.learn(result.confirmed)
        self.batched += result.frames
        self.dropped.update(result.dropped)
        self.decode_errors.update(result.decode_errors)
        self.narrowed += result.narrowed
        sizes = np.array([b.frames for b in result.batches], np.int64)
        self.batches_made += sizes.size
        self._batch_nodes_le += (sizes[:, None] <= np.array(BATCH_NODE_BUCKETS)).sum(axis=0)
        lost = 0
        for batch in result.batches:
            oldest = self.outbox.offer(batch)
            if oldest is not None:
                lost += oldest.frames
        if lost:
            self.dropped["outbox_full"] += lost
            log.warning("aggregator outbox full; dropped the oldest batches", dropped_frames=lost,
                        dropped_total=self.dropped["outbox_full"])
        self.status = self._freeze()

    async def drain(self) -> None:
        """Batch what is held and publish the outbox, for at most ``DRAIN_S`` (on a stop, before cancelling)."""
        try:
            async with asyncio.timeout(DRAIN_S):
                await self.tick()
                await self.outbox.join()
        except TimeoutError:
            log.warning("aggregator stopped with batches unpublished", pending=self.outbox.qsize())

    # -- what it reports -----------------------------------------------------------------------------------
    def _freeze(self) -> AggregatorStatus:
        last = self._last
        ages = last.ages_s if last is not None else np.zeros(0)
        age = ((float(np.median(ages)), float(np.quantile(ages, 0.99)), float(ages.max())) if ages.size
               else None)
        return AggregatorStatus(
            shard=str(self.shard), ultraservers=len(self.ultraservers), received=self.received,
            batched=self.batched, published_frames=self.published_frames,
            published_batches=self.published_batches, dropped=dict(self.dropped),
            decode_errors=dict(self.decode_errors), narrowed=self.narrowed,
            batches_made=self.batches_made, batch_nodes_le=tuple(self._batch_nodes_le.tolist()), age_s=age,
            tick_duration_s=self._last_duration_s, ticks=self.batcher.ticks, ticks_late=self.ticks_late,
            pending=len(self._pending), outbox=self.outbox.qsize(), connection=self.connection.frozen(),
        )

    def healthy(self) -> Verdict:
        """Return healthy unless its ticks have not advanced for ten ticks and 5 s."""
        ticks, now = self.batcher.ticks, time.monotonic()
        if ticks != self._progress[0]:
            self._progress = (ticks, now)
        elif now - self._progress[1] > 10 * self.tick_s + 5:
            return Verdict(False, f"aggregator stalled after {ticks} ticks")
        return Verdict(True, "ok")

    def ready(self) -> Verdict:
        """Return ready while its MQTT session is connected."""
        return Verdict(True, "ready") if self.connection.connected else Verdict(False, "mqtt not connected")
