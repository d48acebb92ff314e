"""The monitor role: subscribes to telemetry, admits frames into the numpy
state, and once a tick runs the core's analysis off the event loop, leaving a
snapshot for the exporter.

Every payload is either admitted or rejected with a counted reason; nothing a
publisher sends can raise out of ``on_message`` or touch another frame's state.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Final

import aiomqtt
import structlog

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import DetectionParams, Event
from rainierd.core.model import ModelParams
from rainierd.errors import FrameError
from rainierd.exporter import Health, MonitorSnapshot
from rainierd.mqtt import ConnectionState
from rainierd.topology import Topology
from rainierd.wire import decode_frame
from rainierd.wire.topics import EVENTS_ROOT, parse_topic, telemetry_filters

__all__ = ["Monitor"]

log = structlog.get_logger("rainierd.monitor")

_LOG_FIRST: Final = 5  # rejections of a reason logged in full before sampling
_LOG_EVERY: Final = 1_000


class Monitor:
    """Holds the fleet state and turns MQTT messages into snapshots."""

    def __init__(
        self,
        topology: Topology,
        *,
        tick_s: float,
        stale_after_ticks: int,
        max_frame_bytes: int,
        qos: int = 0,
        detection: DetectionParams | None = None,
        model: ModelParams | None = None,
    ) -> None:
        self.topology = topology
        self.tick_s = tick_s
        self.stale_after_ticks = stale_after_ticks
        self.max_frame_bytes = max_frame_bytes
        self.qos = qos
        self.core = MonitorCore(topology, stale_after_ticks=stale_after_ticks, detection=detection, model=model)
        self.state, self.stats, self.ingest = self.core.state, self.core.stats, self.core.ingest
        self.connection = ConnectionState()
        self.snapshot: MonitorSnapshot | None = None
        self.generation = 0
        self.detector = self.core.detector
        self.events: Counter[tuple[str, str]] = Counter()
        # Events wait here for the MQTT session; when it is down the oldest go.
        self.event_outbox: asyncio.Queue[Event] = asyncio.Queue(10_000)
        self.events_dropped = 0
        self._logged: Counter[str] = Counter()
        self._last_analysis: float | None = None
        self._latest_seen = -1
        self._latest_at = 0.0

    def on_message(self, topic: str, payload: bytes) -> None:
        """Admit one MQTT message, or count and log why it was rejected."""
        encoding = "json" if payload[:1] == b"{" else "binary"
        self.stats.frames[encoding] += 1
        self.stats.bytes[encoding] += len(payload)
        address = parse_topic(topic)
        if address is None:
            self._reject("bad_topic", topic, "not a telemetry topic")
            return
        try:
            # NaN checks run once per batch in Ingest.apply, not per frame.
            frame, _ = decode_frame(payload, max_bytes=self.max_frame_bytes, check_finite=False)
        except FrameError as exc:
            self._reject(exc.reason, topic, exc.detail)
            return
        if (reason := self.ingest.accept(frame, address)) is not None:
            self._note(reason, topic, f"frame from {frame.publisher!r} seq {frame.seq}")

    def _reject(self, reason: str, topic: str, detail: str) -> None:
        self.stats.reject(reason)
        self._note(reason, topic, detail)

    def _note(self, reason: str, topic: str, detail: str) -> None:
        self._logged[reason] += 1
        n = self._logged[reason]
        if n <= _LOG_FIRST or n % _LOG_EVERY == 0:
            log.warning("frame rejected", reason=reason, topic=topic[:200], detail=detail[:200],
                        occurrences=n)

    async def consume(self, client: aiomqtt.Client) -> None:
        """Subscribe to telemetry, admit messages and publish events until cancelled."""
        for topic_filter in telemetry_filters():
            await client.subscribe(topic_filter, qos=self.qos)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._publish_events(client), name="monitor-publish-events")
            async for message in client.messages:
                payload = message.payload
                if not isinstance(payload, bytes | bytearray):
                    payload = str(payload).encode()
                self.on_message(message.topic.value, bytes(payload))

    async def _publish_events(self, client: aiomqtt.Client) -> None:
        while True:
            event = await self.event_outbox.get()
            # Retained: a subscriber that connects later sees each entity's last change.
            await client.publish(
                f"{EVENTS_ROOT}/{event.entity}/{event.id}", json.dumps(event.as_dict()).encode(),
                qos=max(self.qos, 1), retain=True,
            )

    def _advance_clock(self) -> None:
        # Without new telemetry the monitor's idea of "now" keeps moving, so a
        # feed that stops altogether still turns chips stale.
        now = time.monotonic()
        if self.state.latest_tick > self._latest_seen:
            self._latest_seen, self._latest_at = self.state.latest_tick, now
        elif self._latest_seen >= 0:
            self.state.clock_tick = self._latest_seen + int((now - self._latest_at) / self.tick_s)

    async def analyse_once(self) -> MonitorSnapshot:
        """Apply what arrived since the last call, detect, and publish a new snapshot."""
        started = time.perf_counter()
        batch = self.ingest.take_batch()
        self._advance_clock()
        analysis = await asyncio.to_thread(self.core.analyse, batch)
        self._advance_clock()
        self.ingest.record(analysis.flush)
        for event in analysis.events:
            self._announce(event)
        analysed = self.snapshot.analysed_ticks + 1 if self.snapshot else 1
        self.generation += 1
        self.snapshot = MonitorSnapshot(
            generation=self.generation, throughput=analysis.throughput, chips_total=self.topology.n_chips,
            analysis_s=time.perf_counter() - started, analysed_ticks=analysed, lost=analysis.lost,
            health=analysis.health, events=self.events.copy(), lag_s=time.time() - self.state.latest_t_s,
        )
        self._last_analysis = time.monotonic()
        return self.snapshot

    def _announce(self, event: Event) -> None:
        self.events[event.entity, event.after] += 1
        fields = event.as_dict()
        if event.after == "healthy":
            log.info("health recovered", **fields)
        else:
            log.warning("health degraded", **fields)
        if self.event_outbox.full():
            self.event_outbox.get_nowait()
            self.events_dropped += 1
        self.event_outbox.put_nowait(event)

    async def analyse(self, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run ``analyse_once`` (then ``after``) every tick, on a drift-free schedule, until cancelled."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        tick = 1
        while True:
            delay = start + tick * self.tick_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                tick += int(-delay // self.tick_s)  # skip the ticks we overran
            await self.analyse_once()
            if after is not None:
                await after()
            tick += 1

    def healthy(self) -> Health:
        """Return healthy unless analysis has stalled for 10 ticks."""
        if self._last_analysis is not None and time.monotonic() - self._last_analysis > 10 * self.tick_s + 5:
            return Health(False, "analysis stalled")
        return Health(True, "ok")

    def ready(self) -> Health:
        """Return ready once connected to MQTT and a tick has been analysed."""
        if not self.connection.connected:
            return Health(False, "mqtt not connected")
        if self.snapshot is None or self.snapshot.throughput.tick < 0:
            return Health(False, "no telemetry analysed yet")
        return Health(True, "ready")
