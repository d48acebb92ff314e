"""Specification of the MQTT edge's client: every client the supervisor makes is one a stop always reaches,
and hands its messages to a handler as paho reads them.

The supervisor's behaviour against real brokers (fail-over, backoff, a
broker killed mid-session) is in tests/integration/test_failover.py, and a
real process's stop around its connect in tests/integration/test_stops.py;
the override that keeps a stop from being lost, with its canaries, in
tests/unit/mqtt/test_paho.py.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import aiomqtt
import pytest

from rainierd.mqtt._paho import Client
from rainierd.mqtt.broker import EmbeddedBroker
from rainierd.mqtt.config import Broker, MqttConfig
from rainierd.mqtt.supervisor import _client, deliver


def client_of(port: int, protocol: Literal["3.1.1", "5"] = "3.1.1") -> aiomqtt.Client:
    """Return a client as the supervisor makes it, for a broker on ``port`` (3.1.1 unless ``protocol`` says 5)."""
    config = MqttConfig(brokers=(Broker("127.0.0.1", port),), client_id="unit", protocol=protocol)
    return _client(config, config.brokers[0])


class TestClients:
    @pytest.mark.parametrize("protocol", ["3.1.1", "5"])
    async def test_every_client_waits_through_the_override_a_stop_reaches(
            self, protocol: Literal["3.1.1", "5"]) -> None:
        """The supervisor's clients, under either protocol, are ``_paho.Client``: their waits are cancellable."""
        assert isinstance(client_of(1, protocol), Client)


class TestDeliver:
    @pytest.mark.parametrize("protocol", ["3.1.1", "5"])
    async def test_every_message_reaches_the_handler_and_none_waits_in_aiomqtts_queue(
            self, protocol: Literal["3.1.1", "5"]) -> None:
        """Subscribed after ``deliver``: the retained message and each live one reach the handler, in order, as
        (topic, payload bytes, retained), and aiomqtt's queue holds none of them."""
        got: list[tuple[str, bytes, bool]] = []
        arrived = asyncio.Event()

        def handler(topic: str, payload: bytes, retained: bool) -> None:
            got.append((topic, payload, retained))
            if topic == "t/last":
                arrived.set()

        async with EmbeddedBroker() as broker, aiomqtt.Client("127.0.0.1", broker.port, identifier="pub") as pub:
            await pub.publish("t/kept", b"k", retain=True)
            async with client_of(broker.port, protocol) as sub:
                deliver(sub, handler)
                await sub.subscribe("t/#")
                for k in range(2_000):
                    await pub.publish(f"t/n{k % 8}", b"frame")
                await pub.publish("t/last", b"")
                async with asyncio.timeout(10):
                    await arrived.wait()
                assert len(sub.messages) == 0
        assert (got[0], got[1:-1], got[-1], {type(payload) for _, payload, _ in got}) == (
            ("t/kept", b"k", True), [(f"t/n{k % 8}", b"frame", False) for k in range(2_000)],
            ("t/last", b"", False), {bytes})

    @pytest.mark.parametrize("protocol", ["3.1.1", "5"])
    async def test_messages_of_qos_1_reach_the_handler_through_paho_in_order(
            self, protocol: Literal["3.1.1", "5"]) -> None:
        """Subscribed at QoS 1: each message, QoS 0 or 1 as published, reaches the handler in the order sent
        (a QoS 1 one through paho, which acknowledges it; a QoS 0 one read from the chunk)."""
        got: list[tuple[str, bytes, bool]] = []
        arrived = asyncio.Event()

        def handler(topic: str, payload: bytes, retained: bool) -> None:
            got.append((topic, payload, retained))
            if topic == "t/last":
                arrived.set()

        async with EmbeddedBroker() as broker, aiomqtt.Client("127.0.0.1", broker.port, identifier="pub") as pub:
            async with client_of(broker.port, protocol) as sub:
                deliver(sub, handler)
                await sub.subscribe("t/#", qos=1)
                for k in range(40):  # a QoS 1 publish waits for its PUBACK: few keep the test quick
                    await pub.publish(f"t/n{k}", b"frame", qos=k % 2)
                await pub.publish("t/last", b"", qos=1)
                async with asyncio.timeout(10):
                    await arrived.wait()
                assert len(sub.messages) == 0
        assert got == [(f"t/n{k}", b"frame", False) for k in range(40)] + [("t/last", b"", False)]

    async def test_a_client_the_supervisor_did_not_make_is_refused(self) -> None:
        """``deliver`` takes the supervisor's clients only: another has no hand-off, and would queue silently."""
        with pytest.raises(TypeError, match="supervise"):
            deliver(aiomqtt.Client("127.0.0.1", 1, identifier="unit"), lambda _t, _p, _r: None)
