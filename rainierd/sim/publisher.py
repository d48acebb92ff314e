"""The simulator role: steps the fleet model on a drift-free schedule and hands
each tick's frames to an MQTT publishing session through a bounded outbox.

Production of ticks never waits on the broker: while the connection is down
the outbox fills, then drops its oldest frames (counted and logged), and the
monitor sees the loss as sequence gaps.  Tick ``k`` is produced at
``start + k * tick_s`` on the event loop's monotonic clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import aiomqtt
import numpy as np
import structlog

from rainierd.sim.fleet import FleetModel, TickTruth
from rainierd.sim.frames import tick_frames
from rainierd.topology import Topology
from rainierd.wire import encode_binary, encode_json
from rainierd.wire.records import Frame
from rainierd.wire.topics import truth_topic

__all__ = ["Outgoing", "Simulator", "truth_payload"]

log = structlog.get_logger("rainierd.sim")

_OUTBOX_TICKS: Final = 4  # ticks of frames the outbox holds before dropping


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One MQTT message to publish."""

    topic: str
    payload: bytes
    retain: bool = False


def truth_payload(truth: TickTruth, publisher: str) -> bytes:
    """Return the JSON ground-truth message of one tick."""
    return json.dumps({
        "publisher": publisher, "tick": truth.tick, "t_s": truth.t_s, "chips": truth.chips,
        "peak_flops": truth.peak_flops, "delivered_flops": truth.delivered_flops,
        "effective_flops": truth.effective_flops,
    }).encode()


class Simulator:
    """Produces ticks of a simulated fleet and publishes them."""

    def __init__(
        self,
        topology: Topology,
        *,
        publisher_id: str,
        seed: int,
        tick_s: float,
        ticks: int,
        encoding: str,
        qos: int,
    ) -> None:
        self.topology = topology
        self.publisher_id = publisher_id
        self.tick_s, self.ticks, self.qos = tick_s, ticks, qos
        self._encode: Callable[[Frame], bytes] = encode_json if encoding == "json" else encode_binary
        self._seed = seed
        per_tick = topology.n_nodes + topology.n_sites + 1
        self.outbox: asyncio.Queue[Outgoing] = asyncio.Queue(max(1_000, _OUTBOX_TICKS * per_tick))
        self.dropped = 0
        self.published = 0
        self.ticks_produced = 0

    def _produce_tick(self, model: FleetModel, tick: int) -> list[Outgoing]:
        sample = model.step(tick)
        out = [
            Outgoing(topic, self._encode(frame))
            for topic, frame in tick_frames(self.topology, sample, publisher=self.publisher_id)
        ]
        out.append(Outgoing(truth_topic(self.publisher_id), truth_payload(sample.truth, self.publisher_id)))
        return out

    def _enqueue(self, message: Outgoing) -> None:
        if self.outbox.full():
            self.outbox.get_nowait()
            self.outbox.task_done()
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10_000 == 0:
                log.warning("simulator outbox full; dropping oldest frames", dropped=self.dropped)
        self.outbox.put_nowait(message)

    async def produce(self, done: asyncio.Event) -> None:
        """Produce ticks on schedule; after ``ticks`` ticks, drain and set ``done``."""
        loop = asyncio.get_running_loop()
        model = FleetModel(
            self.topology, np.random.default_rng(self._seed), tick_s=self.tick_s, start_s=time.time(),
        )
        start = loop.time()
        log.info("simulating fleet", topology=self.topology.name, chips=self.topology.n_chips,
                 tick_s=self.tick_s, publisher=self.publisher_id)
        tick = 0
        while self.ticks == 0 or tick < self.ticks:
            delay = start + tick * self.tick_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            for message in await asyncio.to_thread(self._produce_tick, model, tick):
                self._enqueue(message)
            self.ticks_produced = tick + 1
            tick += 1
        try:
            async with asyncio.timeout(max(5.0, 2 * self.tick_s)):
                await self.outbox.join()
        except TimeoutError:
            log.warning("simulator stopped with frames unpublished", pending=self.outbox.qsize())
        log.info("simulation finished", ticks=tick, published=self.published, dropped=self.dropped)
        done.set()

    async def publish(self, client: aiomqtt.Client) -> None:
        """Publish the outbox on a connected client until cancelled."""
        while True:
            message = await self.outbox.get()
            try:
                await client.publish(message.topic, message.payload, qos=self.qos, retain=message.retain)
                self.published += 1
            finally:
                self.outbox.task_done()
