"""The monitor role: subscribes to telemetry, queues each message in a bounded
inbox, and once a tick hands the whole window to the core's analysis in a
worker thread, leaving a snapshot for the exporter.

Receiving does O(1) work a message (no decoding), so the event loop keeps
draining the socket however large the fleet; decoding, checks and detection
run over the whole window at once in the analysis thread.  When analysis
cannot keep up the inbox drops its oldest messages (counted; the frames in
them show up as sequence gaps), the monitor says it is overloaded (metric,
one log line per episode, ``/readyz``), and its listening clock stops, so
its own backlog never makes a healthy fleet look silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import aiomqtt
import numpy as np
import structlog

from rainierd.checkpoint import load_checkpoint, save_checkpoint
from rainierd.core.analysis import Analysis, MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.detect import Event
from rainierd.core.ingest import Message
from rainierd.exporter import Health, MonitorSnapshot
from rainierd.shards import shard_view
from rainierd.status import BacklogState, CheckpointState, ConnectionState, LagHistogram
from rainierd.topology import Topology
from rainierd.wire.topics import EVENTS_ROOT, WHOLE_FLEET, Shard, status_topic, telemetry_filters

__all__ = ["ListeningClock", "Monitor"]

log = structlog.get_logger("rainierd.monitor")

_LOG_FIRST: Final = 5  # rejections of a reason logged in full before sampling
_LOG_EVERY: Final = 1_000
_CLEAN_WINDOWS_TO_RECOVER: Final = 3  # analyses without a sign of overload before it ends
_RECEIVE_LAG_HISTORY: Final = 300  # windows over which the receive-lag floor is taken
# Events announced between yields to the event loop: ~25 us each (a log line,
# an outbox entry), and a probe waits out two batches, so ~7 ms of loop lag.
_ANNOUNCE_BATCH: Final = 128
_STOP_ANALYSIS_S: Final = 0.5  # the last window is analysed on a stop only if an analysis takes less (2 s grace)


class ListeningClock:
    """Seconds the monitor has been able to listen.

    It advances with the monotonic clock only while the monitor is connected
    and keeping up, and only as far as the process has been seen running:
    each ``now`` or ``observe`` moves it by at most ``max_step_s``, so a
    process that was stopped or starved of CPU for a minute gains half a
    second, not a minute.  Entities' ages are measured on it, so an entity
    turns silent only after the monitor has truly listened for its whole
    ``stale_after`` and heard nothing: a broker outage, the monitor's own
    backlog or a stalled process pauses the clock instead of ageing the fleet.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, *, max_step_s: float = 0.5) -> None:
        self._now = now
        self._max_step_s = max_step_s
        self._value = 0.0
        self._seen = now()
        self._deaf: set[str] = {"disconnected"}

    def observe(self) -> float:
        """Move the clock on by the time since it was last seen (capped), if listening; return it."""
        now = self._now()
        step = min(max(now - self._seen, 0.0), self._max_step_s)
        self._seen = now
        if not self._deaf:
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

    @property
    def listening(self) -> bool:
        """Return True while the clock runs."""
        return not self._deaf

    async def keep(self, interval_s: float = 0.1) -> None:
        """Observe the clock every ``interval_s`` until cancelled, so it keeps time while nothing arrives."""
        while True:
            self.observe()
            await asyncio.sleep(interval_s)


class Monitor:
    """Holds the fleet state (of its shard's share, when sharded) and turns MQTT messages into snapshots."""

    def __init__(
        self,
        topology: Topology,
        config: MonitorConfig,
        *,
        max_backlog_bytes: int = 512 * 2**20,
        qos: int = 0,
        clock: ListeningClock | None = None,
        checkpoint_file: Path | None = None,
        reconnect_grace_s: float = 0.0,
        shard: Shard = WHOLE_FLEET,
    ) -> None:
        self.shard = shard
        self.topology = topology = shard_view(topology, shard)
        self.config = config
        self.tick_s = config.tick_s
        self.max_frame_bytes = config.max_frame_bytes
        self.max_backlog_bytes = max_backlog_bytes
        self.qos = qos
        self.core = MonitorCore(topology, config)
        self.state, self.stats, self.ingest = self.core.state, self.core.stats, self.core.ingest
        self.detector = self.core.detector
        self.connection = ConnectionState()
        self.backlog = BacklogState()
        self.lag = LagHistogram()
        self.clock = clock or ListeningClock()
        self.snapshot: MonitorSnapshot | None = None
        # Held while an analysis mutates the state in its worker thread: a drill-down probe
        # (exporter/probe.py) reads one UltraServer's live state under it, never a half-applied tick.
        self.state_lock = asyncio.Lock()
        self.generation = 0
        self.events: Counter[tuple[str, str]] = Counter()
        # Events wait here for the MQTT session; when it is down the oldest go.
        self.event_outbox: asyncio.Queue[tuple[Event, float]] = asyncio.Queue(10_000)
        self.events_dropped = 0
        self._inbox: deque[Message] = deque()
        self._last_rx = 0.0  # loop clock (monotonic) of the latest message
        self._logged: Counter[str] = Counter()
        self._last_analysis: float | None = None
        self._dropped_seen = 0
        self._clean_windows = 0
        self._receive_lag_floor: deque[float] = deque(maxlen=_RECEIVE_LAG_HISTORY)
        self.checkpoint_file = checkpoint_file
        self.reconnect_grace_s = reconnect_grace_s
        self.checkpoint = CheckpointState()
        self._recorded = True  # the last analysis's counts are recorded (False while one runs)
        self._status_restore: asyncio.Task[None] | None = None
        self._fleet = f"{topology.name}: {topology.n_nodes} nodes, {topology.n_sites} sites"
        if not shard.whole:  # another shard's accounting is not this one's
            self._fleet += f", shard {shard}"

    # -- checkpoint -----------------------------------------------------------------

    def restore(self) -> bool:
        """Continue the sequence accounting of the checkpoint file, if there is a usable one.

        A missing, unreadable or foreign checkpoint is logged and ignored: the
        monitor starts afresh (and overwrites it after its first analysis).
        """
        if self.checkpoint_file is None:
            return False
        try:
            arrays = load_checkpoint(self.checkpoint_file, fleet=self._fleet)
            if arrays is None:
                log.info("no stream checkpoint yet; starting afresh", path=str(self.checkpoint_file))
                return False
            self.ingest.restore(arrays)
        except Exception as exc:  # whatever is wrong with the file, the monitor starts afresh
            log.warning("stream checkpoint not used; starting afresh", path=str(self.checkpoint_file),
                        error=str(exc)[:300], error_type=type(exc).__name__)
            return False
        stats = self.stats
        log.info("stream checkpoint restored", path=str(self.checkpoint_file), frames_applied=stats.frames_applied,
                 frames_lost=stats.frames_lost, frames_missing=stats.frames_missing)
        return True

    async def save_checkpoint_now(self) -> None:
        """Save the sequence accounting as of the analysis just finished (the write runs off the loop)."""
        path = self.checkpoint_file
        if path is None:
            return
        state = self.checkpoint
        try:
            arrays = self.ingest.checkpoint()  # copies, taken while no analysis runs
            writing = asyncio.ensure_future(asyncio.to_thread(save_checkpoint, path, arrays, fleet=self._fleet))
            try:
                await asyncio.shield(writing)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):  # a failed write: the save on the way out tries again
                    await writing  # the thread writes on: the save on the way out must not race it for the file
                raise
        except Exception as exc:  # a checkpoint that cannot be written must not stop the monitor
            state.failures += 1
            # An older checkpoint left behind would, after a restart, take back counters lower than those
            # already exported (a false reset to Prometheus) and count frames applied since as lost: remove it.
            try:
                path.unlink(missing_ok=True)
            except OSError as unlink_error:
                log.warning("stale stream checkpoint could not be removed", path=str(path), error=str(unlink_error))
            if state.failures <= _LOG_FIRST or state.failures % _LOG_EVERY == 0:
                log.warning("stream checkpoint not saved", path=str(path), error=str(exc)[:300],
                            error_type=type(exc).__name__, occurrences=state.failures)
        else:
            state.saves += 1
            state.last_save_wall_s = time.time()

    # -- receiving ----------------------------------------------------------------

    def on_message(self, topic: str, payload: bytes) -> None:
        """Queue one MQTT message for the next analysis (oversize ones are refused at once)."""
        encoding = "json" if payload[:1] == b"{" else "binary"
        self.stats.messages[encoding] += 1
        self.stats.bytes[encoding] += len(payload)
        if len(payload) > self.max_frame_bytes:
            self.stats.reject("oversize")
            self._note("oversize", topic, f"{len(payload)} bytes exceeds the {self.max_frame_bytes}-byte limit")
            return
        self._inbox.append(Message(self.clock.now(), topic, payload, time.time()))
        self._last_rx = time.monotonic()
        backlog = self.backlog
        backlog.messages += 1
        backlog.bytes += len(payload)
        while backlog.bytes > self.max_backlog_bytes and self._inbox:
            dropped = self._inbox.popleft()
            backlog.messages -= 1
            backlog.bytes -= len(dropped.payload)
            backlog.dropped_messages += 1
            backlog.dropped_bytes += len(dropped.payload)

    def note_rejections(self, rejected: Counter[str]) -> None:
        """Log rejections of a window, the first few of each reason in full, then sampled."""
        for reason, count in rejected.items():
            before = self._logged[reason]
            self._logged[reason] += count
            after = self._logged[reason]
            if before < _LOG_FIRST or after // _LOG_EVERY > before // _LOG_EVERY:
                log.warning("frames rejected", reason=reason, count=count, occurrences=after)

    def _note(self, reason: str, topic: str, detail: str) -> None:
        self._logged[reason] += 1
        n = self._logged[reason]
        if n <= _LOG_FIRST or n % _LOG_EVERY == 0:
            log.warning("frame rejected", reason=reason, topic=topic[:200], detail=detail[:200], occurrences=n)

    async def consume(self, client: aiomqtt.Client) -> None:
        """Subscribe to telemetry, queue messages and publish events until cancelled.

        It also watches its own retained status: while it serves, nothing but
        ``online`` may stand there, whoever wrote it (the broker's ACL should
        keep others out; docs/security.md).
        """
        filters = telemetry_filters(self.shard, n_sites=self.topology.n_sites)
        if len(filters) == 1:
            await client.subscribe(filters[0], qos=self.qos)
        else:  # a shard's filters (up to 129) in one SUBSCRIBE: one round trip, not one each
            await client.subscribe([(topic_filter, self.qos) for topic_filter in filters])
        own_status = status_topic(client.identifier)
        await client.subscribe(own_status, qos=1)
        self.clock.hear("disconnected")
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._publish_events(client), name="monitor-publish-events")
                tg.create_task(self._grace(), name="monitor-reconnect-grace")
                async for message in client.messages:
                    payload = message.payload
                    if not isinstance(payload, bytes | bytearray):
                        payload = str(payload).encode()
                    topic = message.topic.value
                    if topic == own_status:
                        if payload != b"online" and (self._status_restore is None or self._status_restore.done()):
                            self._status_restore = tg.create_task(self._restore_status(client, own_status, payload),
                                                                  name="monitor-restore-status")
                        continue
                    self.on_message(topic, bytes(payload))
        finally:
            self.clock.deafen("disconnected")

    async def _grace(self) -> None:
        """Judge no silence for ``reconnect_grace_s`` after connecting.

        When the broker comes back, every publisher reconnects on its own
        backoff (rainierd's back off up to 15 s): until they have, a node that
        is quiet is a node still reconnecting, not a lost one.
        """
        if self.reconnect_grace_s <= 0:
            return
        self.clock.deafen("publishers_reconnecting")
        try:
            await asyncio.sleep(self.reconnect_grace_s)
        finally:
            self.clock.hear("publishers_reconnecting")

    async def _restore_status(self, client: aiomqtt.Client, topic: str, payload: bytes) -> None:
        """Say online again.  Another client wrote here, or this id's previous session's will fired late."""
        self.connection.status_overwritten += 1
        log.warning("this monitor's status was overwritten while it serves; saying online again", topic=topic,
                    status=payload[:16].decode(errors="replace"), occurrences=self.connection.status_overwritten)
        await client.publish(topic, b"online", qos=1, retain=True)

    async def _publish_events(self, client: aiomqtt.Client) -> None:
        while True:
            event, t_s = await self.event_outbox.get()
            # Retained: a subscriber that connects later sees each entity's last change.
            await client.publish(
                f"{EVENTS_ROOT}/{event.entity}/{event.id}", json.dumps(event.as_dict() | {"t_s": t_s}).encode(),
                qos=max(self.qos, 1), retain=True,
            )

    # -- analysing ------------------------------------------------------------------

    def _take_window(self) -> list[Message]:
        """Take the inbox, or its oldest half of ``max_backlog_bytes`` when it holds more.

        A window's joined columns live in buffers sized by the largest window
        seen, so capping a window caps that memory too; what is left waits for
        the next analysis, which then follows at once.
        """
        limit = self.max_backlog_bytes // 2
        window: list[Message] = []
        size = 0
        inbox = self._inbox
        while inbox and (size < limit or not window):
            message = inbox.popleft()
            window.append(message)
            size += len(message.payload)
        self.backlog.messages -= len(window)
        self.backlog.bytes -= size
        return window

    async def analyse_once(self) -> MonitorSnapshot:
        """Analyse what arrived since the last call and publish a new snapshot."""
        started = time.perf_counter()
        window = self._take_window()
        waited_s = time.time() - window[0].rx_wall_s if window else 0.0
        # Events are numbered by the monitor's own analyses: publishers' ticks
        # are each their own and are never compared.
        job = asyncio.ensure_future(self._analyse_locked(window, tick=self.generation + 1))
        self._recorded = False
        try:
            analysis = await asyncio.shield(job)
        except asyncio.CancelledError:
            # A stop: the thread runs on regardless and advances the streams, so wait for it and record what it
            # applied and lost; a checkpoint saved on the way out then stays consistent (its frames counted once).
            self.ingest.record((await job).flush)
            self._recorded = True
            raise
        finished_wall = time.time()
        self.ingest.record(analysis.flush)
        self._recorded = True
        self.note_rejections(analysis.flush.rejected)
        self.lag.observe(finished_wall - analysis.flush.applied_t_s)
        elapsed = time.perf_counter() - started
        self._judge_load(analysis, waited_s=waited_s, elapsed_s=elapsed)
        for count, event in enumerate(analysis.events, 1):
            self._announce(event)
            if count % _ANNOUNCE_BATCH == 0:
                await asyncio.sleep(0)  # rainier falling silent is 31,200 node events: 0.8 s in one go
        analysed = self.snapshot.analysed_ticks + 1 if self.snapshot else 1
        self.generation += 1
        self.snapshot = MonitorSnapshot(
            generation=self.generation, throughput=analysis.throughput, chips_total=self.topology.n_present_chips,
            analysis_s=elapsed, analysed_ticks=analysed, lost=analysis.lost,
            health=analysis.health, events=self.events.copy(), lag_s=finished_wall - self.state.latest_t_s,
            detail=analysis.detail, aggregates=analysis.aggregates,
        )
        self._last_analysis = time.monotonic()
        return self.snapshot

    async def _analyse_locked(self, window: list[Message], *, tick: int) -> Analysis:
        # Its own task: the lock is held until the thread is done, even when the caller is cancelled.
        async with self.state_lock:
            return await asyncio.to_thread(self.core.analyse, window, now_s=self.clock.now(), tick=tick)

    def _judge_load(self, analysis: Analysis, *, waited_s: float, elapsed_s: float) -> None:
        """Decide whether the monitor is behind, from what this window shows."""
        backlog = self.backlog
        backlog.oldest_s = waited_s
        reasons = []
        if backlog.dropped_messages > self._dropped_seen:
            reasons.append("inbox_full")
            self._dropped_seen = backlog.dropped_messages
        if waited_s > 2 * self.tick_s:
            reasons.append("backlog")
        if elapsed_s > self.tick_s:
            reasons.append("analysis_overrun")
        # Messages that queue before the inbox (socket, broker) show as a
        # receive lag above its usual floor; the floor absorbs clock skew.
        receive_lag = analysis.flush.receive_lag_s
        if receive_lag.size:
            median = float(np.median(receive_lag))
            backlog.receive_offset_s = (median, float(np.abs(receive_lag).max()))
            self._receive_lag_floor.append(median)
            if median - min(self._receive_lag_floor) > max(self.tick_s, 1.0):
                reasons.append("receive_lag")
        if reasons:
            self._clean_windows = 0
            if not backlog.overloaded:
                backlog.overloaded = True
                backlog.overload_episodes += 1
                self.clock.deafen("overloaded")
                log.warning("monitor falling behind; silence is not judged until it catches up",
                            reasons=reasons, waited_s=round(waited_s, 2), analysis_s=round(elapsed_s, 3),
                            dropped_messages=backlog.dropped_messages)
            backlog.reasons = tuple(reasons)
        elif backlog.overloaded:
            self._clean_windows += 1
            if self._clean_windows >= _CLEAN_WINDOWS_TO_RECOVER:
                backlog.overloaded, backlog.reasons = False, ()
                self.clock.hear("overloaded")
                log.info("monitor caught up", dropped_messages=backlog.dropped_messages)

    def _announce(self, event: Event) -> None:
        self.events[event.entity, event.after] += 1
        t_s = time.time()
        fields = event.as_dict() | {"t_s": round(t_s, 3)}
        if event.after == "healthy":
            log.info("health recovered", **fields)
        else:
            log.warning("health degraded", **fields)
        if self.event_outbox.full():
            self.event_outbox.get_nowait()
            self.events_dropped += 1
        self.event_outbox.put_nowait((event, t_s))

    async def analyse(self, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run ``analyse_once`` (then ``after``) about once a tick until cancelled.

        An analysis runs a tick after the last one began, or earlier (but not
        before half a tick) once a burst of messages has ended: publishers that
        send a tick's frames together then wait ~0.1 s for analysis instead of
        up to a whole tick, however their clock's phase falls against ours.
        """
        loop = asyncio.get_running_loop()
        quiet_s = min(0.1, self.tick_s / 10)
        try:
            while True:
                began = loop.time()
                await self.analyse_once()
                await self.save_checkpoint_now()
                if after is not None:
                    await after()
                due, earliest = began + self.tick_s, began + self.tick_s / 2
                if self.backlog.bytes >= self.max_backlog_bytes // 2:
                    continue  # a capped window left a full one behind: take it at once
                while (now := loop.time()) < due:
                    if self._inbox and now >= earliest and now - self._last_rx >= quiet_s:
                        break
                    await asyncio.sleep(min(quiet_s / 2, due - now))
        except asyncio.CancelledError:
            await self._last_checkpoint()
            raise

    async def _last_checkpoint(self) -> None:
        """On a stop, account for the frames already received and save the checkpoint.

        Frames received but not analysed would otherwise be lost to the next
        run, and a stream first heard among them would be first heard by the
        next run, its earlier frames outside the accounting (nothing before a
        stream's first frame can be counted lost: it may predate the monitor).
        The stop stays within its grace: the last window is analysed only if
        the monitor is keeping up and its last analysis took under
        ``_STOP_ANALYSIS_S``.  An analysis left unrecorded leaves the last
        checkpoint as it is.
        """
        if self.checkpoint_file is None or not self._recorded:
            return
        last = self.snapshot.analysis_s if self.snapshot is not None else 0.0
        try:
            if self._inbox and not self.backlog.overloaded and last < _STOP_ANALYSIS_S:
                await self.analyse_once()
            await self.save_checkpoint_now()
        except asyncio.CancelledError:  # stopped again: keep the last checkpoint
            log.warning("stopped again while saving the last stream checkpoint; the previous one stands")

    # -- probes -------------------------------------------------------------------------

    def healthy(self) -> Health:
        """Return healthy unless analysis has stalled for 10 ticks."""
        if self._last_analysis is not None and time.monotonic() - self._last_analysis > 10 * self.tick_s + 5:
            return Health(False, "analysis stalled")
        return Health(True, "ok")

    def ready(self) -> Health:
        """Return ready once connected, a tick has been analysed, and while keeping up."""
        if not self.connection.connected:
            return Health(False, "mqtt not connected")
        if self.snapshot is None or self.snapshot.throughput.tick < 0:
            return Health(False, "no telemetry analysed yet")
        if self.backlog.overloaded:
            return Health(False, f"overloaded: {', '.join(self.backlog.reasons)}")
        return Health(True, "ready")
