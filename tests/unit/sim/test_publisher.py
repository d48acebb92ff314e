"""The simulator's own count of what it sent: every frame it made is published or dropped, exactly once,
whatever happens to a publish (the accounting tests hold the monitor to this count)."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest

from rainierd.fleet.topology import build_topology
from rainierd.sim.publisher import Outgoing, OutgoingRun, Simulator, outbox_ticks


class Client:
    """A client whose publishes succeed, fail with MqttError, or wait for an acknowledgement that never comes."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.started = asyncio.Event()

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool) -> None:
        self.started.set()
        if self.behaviour == "fails":
            raise aiomqtt.MqttError("the broker went away")
        if self.behaviour == "hangs":
            await asyncio.Event().wait()


def simulator() -> Simulator:
    return Simulator(build_topology("demo"), publisher_id="sim", seed=0, tick_s=1.0, ticks=1, encoding="binary", qos=0)


class TestPublish:
    async def test_a_published_batch_counts_its_frames_published(self) -> None:
        """A publish that returns counts the message published and its frames."""
        sim = simulator()
        sim.outbox.put_nowait(Outgoing("t", b"x", frames=7))
        task = asyncio.create_task(sim.publish(Client("succeeds")))  # type: ignore[arg-type]
        await asyncio.wait_for(sim.outbox.join(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (sim.published, sim.frames_published, sim.dropped) == (1, 7, 0)

    async def test_a_publish_the_broker_failed_counts_its_frames_dropped(self) -> None:
        """MqttError mid-publish: the frames left the outbox unconfirmed, so they count dropped."""
        sim = simulator()
        sim.outbox.put_nowait(Outgoing("t", b"x", frames=7))
        with pytest.raises(aiomqtt.MqttError):
            await sim.publish(Client("fails"))  # type: ignore[arg-type]
        assert (sim.published, sim.frames_published, sim.dropped) == (0, 0, 7)

    async def test_a_publish_cancelled_mid_flight_counts_its_frames_dropped(self) -> None:
        """Cancelled while waiting for the publish (the session ended as the connection dropped): dropped too, not
        in neither count."""
        sim = simulator()
        sim.outbox.put_nowait(Outgoing("t", b"x", frames=7))
        client = Client("hangs")
        task = asyncio.create_task(sim.publish(client))  # type: ignore[arg-type]
        await asyncio.wait_for(client.started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (sim.published, sim.frames_published, sim.dropped, sim.outbox.qsize()) == (0, 0, 7, 0)


class _Info:
    def __init__(self, rc: int) -> None:
        self.rc = rc


class _Paho:
    """The paho client under aiomqtt's, as the simulator uses it: connected or not, refusing from ``refuse_at``."""

    protocol = 5

    def __init__(self, *, connected: bool, refuse_at: int | None) -> None:
        self.connected, self.refuse_at = connected, refuse_at
        self.topics: list[str] = []
        self.writes: list[bytes] = []

    def is_connected(self) -> bool:
        return self.connected

    def _packet_queue(self, command: int, packet: bytes, mid: int, qos: int, info: object) -> int:
        self.writes.append(packet)
        return 0

    def publish(self, topic: str, payload: bytes, qos: int) -> _Info:
        if self.refuse_at is not None and len(self.topics) >= self.refuse_at:
            return _Info(4)  # MQTT_ERR_NO_CONN
        self.topics.append(topic)
        return _Info(0)


class RunClient(Client):
    """A client with a paho client under it, as aiomqtt's."""

    def __init__(self, behaviour: str, *, connected: bool = True, refuse_at: int | None = None) -> None:
        super().__init__(behaviour)
        self._client = _Paho(connected=connected, refuse_at=refuse_at)
        self.awaited: list[str] = []

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool = False) -> None:
        self.awaited.append(topic)
        await super().publish(topic, payload, qos=qos, retain=retain)


def run_of(n: int) -> OutgoingRun:
    return OutgoingRun([f"t{i}" for i in range(n)], [b"x"] * n)


async def publish_one(sim: Simulator, client: RunClient) -> None:
    """Publish the outbox until it is empty, then stop the publisher."""
    task = asyncio.create_task(sim.publish(client))  # type: ignore[arg-type]
    await asyncio.wait_for(sim.outbox.join(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class TestPublishRun:
    async def test_a_run_goes_out_as_one_write_then_waits_on_its_last_frame(self) -> None:
        """QoS 0: every frame of a run but the last in one write, the last awaited; all five count published."""
        sim = simulator()
        sim.outbox.put_nowait(run_of(5))
        client = RunClient("succeeds")
        await publish_one(sim, client)
        assert (len(client._client.writes), client._client.writes[0].count(b"x"), client.awaited) == (1, 4, ["t4"])
        assert (sim.published, sim.frames_published, sim.dropped) == (5, 5, 0)

    async def test_a_run_on_a_lost_connection_is_dropped_whole(self) -> None:
        """The client no longer connected: MqttError, and all five frames count dropped."""
        sim = simulator()
        sim.outbox.put_nowait(run_of(5))
        with pytest.raises(aiomqtt.MqttError):
            await sim.publish(RunClient("succeeds", connected=False))  # type: ignore[arg-type]
        assert (sim.published, sim.frames_published, sim.dropped) == (0, 0, 5)

    async def test_a_run_cancelled_on_its_last_frame_drops_only_that_frame(self) -> None:
        """Cancelled waiting for the last frame: the frames handed to the client count published, the last
        dropped."""
        sim = simulator()
        sim.outbox.put_nowait(run_of(5))
        client = RunClient("hangs")
        task = asyncio.create_task(sim.publish(client))  # type: ignore[arg-type]
        await asyncio.wait_for(client.started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (sim.published, sim.frames_published, sim.dropped, sim.outbox.qsize()) == (4, 4, 1, 0)

    async def test_at_qos_1_a_frame_paho_refuses_drops_it_and_the_rest_of_the_run(self) -> None:
        """QoS 1, frame by frame: paho refusing the third frame leaves two published and three dropped."""
        sim = Simulator(build_topology("demo"), publisher_id="sim", seed=0, tick_s=1.0, ticks=1, encoding="binary",
                        qos=1)
        sim.outbox.put_nowait(run_of(5))
        with pytest.raises(aiomqtt.MqttError):
            await sim.publish(RunClient("succeeds", refuse_at=2))  # type: ignore[arg-type]
        assert (sim.published, sim.frames_published, sim.dropped) == (2, 2, 3)


class TestOutbox:
    def test_the_outbox_holds_four_ticks_or_as_many_as_fit_in_512_mib(self) -> None:
        """Four ticks of records up to 128 MiB a tick (rainier: 110 MiB), two at rainier-1m (218 MiB): the
        outbox never makes the simulator hold gigabytes."""
        sizes = {name: outbox_ticks(build_topology(name)) for name in ("demo", "rainier", "rainier-1m")}
        assert sizes == {"demo": 4, "rainier": 4, "rainier-1m": 2}
