"""The simulator's own count of what it sent: every frame it made is published or dropped, exactly once,
whatever happens to a publish (the accounting tests hold the monitor to this count)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiomqtt
import pytest
from paho.mqtt.client import MQTT_ERR_NO_CONN

from rainierd.fleet.topology import build_topology
from rainierd.sim import publisher
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


class RunClient(Client):
    """A client taking runs as ``rainierd.mqtt.burst`` hands them over (``handing_over`` routes it here): connected
    or not, refusing the frames handed over one by one from ``refuse_at``."""

    def __init__(self, behaviour: str, *, connected: bool = True, refuse_at: int | None = None) -> None:
        super().__init__(behaviour)
        self.connected, self.refuse_at = connected, refuse_at
        self.writes: list[list[bytes]] = []  # the payloads of each publish_many, one write each
        self.handed: list[str] = []  # the topics handed over one by one (publish_nowait)
        self.awaited: list[str] = []

    def publish_many(self, topics: Sequence[str], payloads: Sequence[bytes]) -> None:
        if not self.connected:
            raise aiomqtt.MqttCodeError(MQTT_ERR_NO_CONN, "could not publish: not connected")
        self.writes.append(list(payloads))

    def publish_nowait(self, topic: str, payload: bytes, *, qos: int) -> None:
        if self.refuse_at is not None and len(self.handed) >= self.refuse_at:
            raise aiomqtt.MqttCodeError(MQTT_ERR_NO_CONN, "could not publish a node frame")
        self.handed.append(topic)

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool = False) -> None:
        self.awaited.append(topic)
        await super().publish(topic, payload, qos=qos, retain=retain)


@pytest.fixture
def handing_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route the simulator's unawaited hand-overs (``burst.publish_many``, ``burst.publish_nowait``) to the
    ``RunClient`` given them: what they do with a real client is tests/unit/mqtt/test_paho.py's."""
    monkeypatch.setattr(publisher, "publish_many",
                        lambda client, topics, payloads: client.publish_many(topics, payloads))
    monkeypatch.setattr(publisher, "publish_nowait",
                        lambda client, topic, payload, *, qos: client.publish_nowait(topic, payload, qos=qos))


def run_of(n: int) -> OutgoingRun:
    return OutgoingRun([f"t{i}" for i in range(n)], [b"x"] * n)


async def publish_one(sim: Simulator, client: RunClient) -> None:
    """Publish the outbox until it is empty, then stop the publisher."""
    task = asyncio.create_task(sim.publish(client))  # type: ignore[arg-type]
    await asyncio.wait_for(sim.outbox.join(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.usefixtures("handing_over")
class TestPublishRun:
    async def test_a_run_goes_out_as_one_write_then_waits_on_its_last_frame(self) -> None:
        """QoS 0: every frame of a run but the last in one write, the last awaited; all five count published."""
        sim = simulator()
        sim.outbox.put_nowait(run_of(5))
        client = RunClient("succeeds")
        await publish_one(sim, client)
        assert (client.writes, client.awaited) == ([[b"x"] * 4], ["t4"])
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
