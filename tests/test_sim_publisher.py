"""The simulator's own count of what it sent: every frame it made is published or dropped, exactly once,
whatever happens to a publish (the accounting tests hold the monitor to this count)."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest

from rainierd.sim.publisher import Outgoing, Simulator, outbox_ticks
from rainierd.topology import build_topology


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


class TestOutbox:
    def test_the_outbox_holds_four_ticks_or_as_many_as_fit_in_512_mib(self) -> None:
        """Four ticks of records up to 128 MiB a tick (rainier: 110 MiB), two at rainier-1m (218 MiB): the
        outbox never makes the simulator hold gigabytes."""
        sizes = {name: outbox_ticks(build_topology(name)) for name in ("demo", "rainier", "rainier-1m")}
        assert sizes == {"demo": 4, "rainier": 4, "rainier-1m": 2}
