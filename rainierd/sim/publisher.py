"""The simulator role: steps the fleet model on a drift-free schedule and hands
each tick's frames to an MQTT publishing session through a bounded outbox.

Production of ticks never waits on the broker: while the connection is down
(or the broker cannot take the rate) the outbox fills, then drops its oldest
messages (the frames in them counted, one log line a tick at most), and the
monitor sees the loss as sequence gaps.  Tick ``k`` is produced at
``start + k * tick_s`` on the event loop's monotonic clock (rainierd/runtime/schedule.py).

With the binary encoding the simulator publishes as an aggregation tier
would: one batch frame per ``batch_nodes`` nodes of a site (docs/performance.md
explains why), or one frame per node with ``batch_nodes`` 0 and always with JSON.

One binary frame per node is how a real fleet's agents publish, 31,200
messages a tick at ``rainier``, so that mode is built for rate: a tick's
node frames are encoded in one numpy pass (``sim/packed.py``) and go to the
outbox as runs of ``_RUN_FRAMES`` messages, which the publisher hands to the
MQTT client as one write and waits on once a run (``OutgoingRun``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TextIO

import aiomqtt
import numpy as np
import structlog

from rainierd.fleet import Topology
from rainierd.fleet.ids import entity_id
from rainierd.mqtt import publish_many, publish_nowait
from rainierd.runtime import DropOldestQueue, Schedule
from rainierd.sim.faults import Fault
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import batches_per_tick, tick_batches, tick_frames
from rainierd.sim.packed import BatchPacker, NodeFramePacker
from rainierd.sim.params import FleetParams
from rainierd.sim.profile import PROFILES, Profile
from rainierd.sim.sample import TickTruth
from rainierd.sim.scenarios import random_faults
from rainierd.sim.workload import JobAnnouncer, JobSpec, jobs_truth_document
from rainierd.wire import NODE_FRAME_DTYPES, Frame, NodeBatch, encode_binary, encode_json, truth_topic

log = structlog.get_logger("rainierd.sim")

_OUTBOX_TICKS: Final = 4  # ticks of frames the outbox holds before dropping
# ... but no more ticks than fit in this many bytes of records (never less than one): at rainier-1m a tick is
# 218 MiB, and four of them queued took the simulator past 1.5 GiB; it holds two there, four up to 128 MiB a tick.
_OUTBOX_BYTES: Final = 512 * 2**20
_RANDOM_CHUNK_TICKS: Final = 3_600  # random faults are drawn an hour of ticks at a time
_RUN_FRAMES: Final = 256  # node frames handed to the MQTT client between two waits for it


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One MQTT message to publish."""

    topic: str
    payload: bytes
    retain: bool = False
    frames: int = 0  # telemetry frames it carries (a batch carries many)


@dataclass(frozen=True, slots=True)
class OutgoingRun:
    """Node frames to publish back to back (QoS as configured, never retained): ``payloads[i]`` on
    ``topics[i]``, one frame each."""

    topics: Sequence[str]
    payloads: Sequence[bytes]

    @property
    def frames(self) -> int:
        """Return how many telemetry frames the run carries."""
        return len(self.payloads)


def outbox_ticks(topology: Topology) -> int:
    """Return how many ticks of frames the outbox holds: ``_OUTBOX_TICKS``, fewer where they would pass
    ``_OUTBOX_BYTES`` of binary records, at least one."""
    records = sum(count * NODE_FRAME_DTYPES[kind].itemsize for kind, count in (
        ("chips", topology.n_chips), ("links", topology.n_links), ("efa", topology.n_efa),
        ("cooling", topology.n_nodes)))
    return max(1, min(_OUTBOX_TICKS, _OUTBOX_BYTES // max(1, records)))


def truth_document(truth: TickTruth, publisher: str) -> dict[str, Any]:
    """Return the ground truth of one tick as plain data."""
    return {
        "publisher": publisher, "tick": truth.tick, "t_s": truth.t_s, "chips": truth.chips,
        "peak_flops": truth.peak_flops, "delivered_flops": truth.delivered_flops,
        "effective_flops": truth.effective_flops, "lost_flops": truth.lost_flops,
        "active_faults": [
            f.as_dict() | {"lost_flops": lost}
            for f, lost in zip(truth.active_faults, truth.fault_lost_flops, strict=True)
        ],
    } | jobs_truth_document(truth)


def truth_payload(truth: TickTruth, publisher: str) -> bytes:
    """Return the JSON ground-truth message of one tick."""
    return json.dumps(truth_document(truth, publisher)).encode()


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
        batch_nodes: int = 0,
        faults: list[Fault] | None = None,
        fault_acceleration: float = 0.0,
        params: FleetParams | None = None,
        profile: Profile = PROFILES["ideal"],
        truth_file: Path | None = None,
        jobs: list[JobSpec] | None = None,
    ) -> None:
        self.topology = topology
        self.publisher_id = publisher_id
        self.tick_s, self.ticks, self.qos = tick_s, ticks, qos
        self._encode: Callable[[Any], bytes] = encode_json if encoding == "json" else encode_binary
        self.batch_nodes = batch_nodes if encoding == "binary" else 0
        self._seed = seed
        self._faults = list(faults or [])
        self._acceleration = fault_acceleration
        self._params = params
        self._profile = profile
        self._truth_file = truth_file
        self._truth_out: TextIO | None = None
        self._jobs = jobs
        self._announcer = JobAnnouncer(source=publisher_id)
        # Job documents and their removals: state, not samples, so never dropped, and published apart from the
        # telemetry (``publish_jobs``).
        self._jobs_out: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._stopping = False  # set by drain: no job is announced any more
        # Batches hold one topic bucket's nodes of a site each (sim/frames.py), so a tick is more of them
        # than the site's nodes over the batch size.
        self._packer = (NodeFramePacker(topology, publisher=publisher_id)
                        if encoding == "binary" and not self.batch_nodes else None)
        self._batch_packer = (BatchPacker(topology, publisher=publisher_id, nodes_per_batch=self.batch_nodes)
                              if encoding == "binary" and self.batch_nodes else None)
        if self.batch_nodes:
            node_messages = batches_per_tick(topology, self.batch_nodes)
        elif self._packer is not None:
            node_messages = -(-topology.n_nodes // _RUN_FRAMES)
        else:
            node_messages = topology.n_nodes
        per_tick = node_messages + topology.n_sites + 1
        self.outbox: DropOldestQueue[Outgoing | OutgoingRun] = DropOldestQueue(
            max(100, outbox_ticks(topology) * per_tick))
        self.dropped = 0  # frames dropped from the outbox, or taken from it by a publish the broker's loss failed
        self.published = 0  # messages published
        self.frames_published = 0
        self.ticks_produced = 0
        self.schedule = Schedule(tick_s, "simulator")

    def _produce_tick(
        self, model: FleetModel, tick: int, rng: np.random.Generator,
    ) -> list[Outgoing | OutgoingRun]:
        if self._acceleration > 0 and tick % _RANDOM_CHUNK_TICKS == 0:
            fresh = random_faults(self.topology, rng, ticks=_RANDOM_CHUNK_TICKS, tick_s=self.tick_s,
                                  acceleration=self._acceleration)
            model.faults = [f for f in model.faults if f.end_tick > tick]
            model.faults += [replace(f, start_tick=f.start_tick + tick, end_tick=f.end_tick + tick) for f in fresh]
        sample = model.step(tick)
        for fault in model.faults:
            if fault.start_tick == tick:
                # Named as the monitor's events will name what it hurts (docs/ids.md), so the two lines meet.
                kind = "neuronlink" if fault.target_kind == "link" else fault.target_kind
                log.info("fault injected", **fault.as_dict(), id=entity_id(self.topology, kind, fault.target))
        if self._truth_out is not None:
            self._truth_out.write(json.dumps(truth_document(sample.truth, self.publisher_id)) + "\n")
        out: list[Outgoing | OutgoingRun] = []
        frames: Iterator[tuple[str, Frame]]
        if self._packer is not None:
            packed = self._packer.pack(sample)
            out += [OutgoingRun(packed.topics[at:at + _RUN_FRAMES], packed.payloads[at:at + _RUN_FRAMES])
                    for at in range(0, len(packed.payloads), _RUN_FRAMES)]
            frames = tick_frames(self.topology, sample, publisher=self.publisher_id, nodes=())
        elif self._batch_packer is not None:  # its facility frames too
            out += [Outgoing(topic, payload, frames=held) for topic, payload, held in self._batch_packer.pack(sample)]
            frames = iter(())
        elif self.batch_nodes:
            frames = tick_batches(self.topology, sample, publisher=self.publisher_id, nodes_per_batch=self.batch_nodes)
        else:
            frames = tick_frames(self.topology, sample, publisher=self.publisher_id)
        out += [
            Outgoing(topic, self._encode(frame), frames=frame.n_nodes if isinstance(frame, NodeBatch) else 1)
            for topic, frame in frames
        ]
        out.append(Outgoing(truth_topic(self.publisher_id), truth_payload(sample.truth, self.publisher_id)))
        return out

    def _enqueue(self, messages: list[Outgoing | OutgoingRun], tick: int) -> None:
        dropped = 0
        for message in messages:
            oldest = self.outbox.offer(message)
            if oldest is not None:
                dropped += oldest.frames
        if dropped:
            self.dropped += dropped
            log.warning("simulator outbox full; dropped the oldest frames", tick=tick, dropped_frames=dropped,
                        dropped_total=self.dropped)

    async def produce(self, done: asyncio.Event) -> None:
        """Produce ticks on schedule; after ``ticks`` ticks, drain and set ``done``."""
        loop = asyncio.get_running_loop()
        seeds = np.random.SeedSequence(self._seed).spawn(2)
        model = FleetModel(
            self.topology, np.random.default_rng(seeds[0]), tick_s=self.tick_s, start_s=time.time(),
            params=self._params, faults=self._faults, profile=self._profile, jobs=self._jobs,
        )
        fault_rng = np.random.default_rng(seeds[1])
        if self._truth_file is not None:
            self._truth_out = self._truth_file.open("w", buffering=1)
        log.info("simulating fleet", topology=self.topology.name, chips=self.topology.n_present_chips,
                 tick_s=self.tick_s, publisher=self.publisher_id)
        # A worker of its own, left behind on a stop: asyncio.run joins the loop's default executor on the way
        # out, and one tick of per-node frames at rainier takes 2.5 s there, past the 2 s a stop is given.
        producer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-tick")
        try:
            async for tick in self.schedule.ticks(count=self.ticks):
                self._enqueue(await loop.run_in_executor(producer, self._produce_tick, model, tick, fault_rng), tick)
                self._announce_jobs(model)
                self.ticks_produced = tick + 1
        finally:
            producer.shutdown(wait=False, cancel_futures=True)
        # The simulated jobs end with the simulation: no retained document outlives its publisher's run.
        self._stopping = True
        self._announce(self._announcer.removals())
        try:
            async with asyncio.timeout(max(5.0, 2 * self.tick_s)):
                await self.outbox.join()
                await self._jobs_out.join()
        except TimeoutError:
            log.warning("simulator stopped with frames unpublished", pending=self.outbox.qsize())
        log.info("simulation finished", ticks=self.ticks_produced, messages_published=self.published,
                 frames_published=self.frames_published, frames_dropped=self.dropped, ticks_late=self.schedule.late)
        if self._truth_out is not None:
            self._truth_out.close()
        done.set()

    def _announce_jobs(self, model: FleetModel) -> None:
        """Queue the documents of the jobs that started this tick and the removals of those that ended."""
        if not self._stopping:
            self._announce(self._announcer.changes(model.training.running_jobs(),
                                                   restarting=model.training.restarting_jobs()))

    def _announce(self, changes: list[tuple[str, bytes]]) -> None:
        for topic, payload in changes:
            log.info("simulated job published" if payload else "simulated job ended", topic=topic)
            self._jobs_out.put_nowait((topic, payload))

    async def drain(self) -> None:
        """On a stop (a signal): remove the simulated jobs' retained documents, waiting at most 1 s for the broker.

        The ticks still run meanwhile, but announce no job.
        """
        self._stopping = True
        removals = self._announcer.removals()
        if not removals:
            return
        self._announce(removals)
        try:
            async with asyncio.timeout(1.0):
                await self._jobs_out.join()
        except TimeoutError:
            log.warning("simulator stopped before its jobs' removal was published", jobs=len(removals))

    async def session(self, client: aiomqtt.Client) -> None:
        """Publish the telemetry outbox and the job documents on a connected client until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.publish(client), name="sim-publish-telemetry")
            tg.create_task(self.publish_jobs(client), name="sim-publish-jobs")

    async def publish_jobs(self, client: aiomqtt.Client) -> None:
        """Publish the job documents and removals, retained at QoS 1, in order, until cancelled.

        One that the broker's loss failed is announced again the next tick (its
        document if the job still runs, else its removal).
        """
        while True:
            topic, payload = await self._jobs_out.get()
            published = False
            try:
                await client.publish(topic, payload, qos=1, retain=True)
                published = True
            finally:
                if not published:
                    self._announcer.undelivered.append(topic)
                self._jobs_out.task_done()

    async def publish(self, client: aiomqtt.Client) -> None:
        """Publish the outbox on a connected client until cancelled."""
        while True:
            message = await self.outbox.get()
            progress = _Progress()
            try:
                if isinstance(message, OutgoingRun):
                    await self._publish_run(client, message, progress)
                else:
                    await client.publish(message.topic, message.payload, qos=self.qos, retain=message.retain)
                    progress.messages, progress.frames = 1, message.frames
            finally:
                # Out of the outbox but not confirmed published, the broker gone mid-publish: counted with the
                # dropped frames, so published + dropped stays every frame made. The publish fails with MqttError
                # (seen in CI: a broker kill left 4 frames in neither count, while the monitor counted them lost),
                # or is cancelled: a QoS 0 publish that paho could not write at once waits for its on_publish, and
                # the supervisor cancels the session when the connection drops (mqtt.supervisor._until_disconnected).
                self.published += progress.messages
                self.frames_published += progress.frames
                self.dropped += message.frames - progress.frames
                self.outbox.task_done()

    async def _publish_run(self, client: aiomqtt.Client, run: OutgoingRun, progress: _Progress) -> None:
        """Publish a run of node frames, counting in ``progress`` each one handed to the client.

        Every frame but the last is handed to the client without waiting: at QoS 0 as one write of back to
        back PUBLISH packets (``burst.publish_many``: paho would make a ``send`` of each), at QoS 1 frame by
        frame (``burst.publish_nowait``: aiomqtt's publish would wait for each PUBACK).  The last goes through
        aiomqtt and is waited for: the client writes in order, so once it is out (at QoS 1: acknowledged) the
        whole run is, and the outbox is never more than a run ahead of the socket.  A frame handed to the client
        and then lost with the connection counts as published, and the monitor counts it lost by its sequence
        number, as any frame lost in transit.

        Raises aiomqtt.MqttError when the client refuses a frame (the connection is gone).
        """
        topics, payloads, qos = run.topics, run.payloads, self.qos
        last = len(payloads) - 1
        if qos == 0:
            publish_many(client, topics[:last], payloads[:last])
        else:
            for at in range(last):
                progress.messages = progress.frames = at
                publish_nowait(client, topics[at], payloads[at], qos=qos)
        progress.messages = progress.frames = last
        await client.publish(topics[last], payloads[last], qos=qos)
        progress.messages = progress.frames = len(payloads)


@dataclass(slots=True)
class _Progress:
    """How much of one outbox entry was handed to the MQTT client."""

    messages: int = 0
    frames: int = 0
