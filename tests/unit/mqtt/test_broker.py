"""Specification of the embedded broker, spoken to by real aiomqtt clients."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rainierd.errors import BrokerError
from rainierd.mqtt.broker import EmbeddedBroker, topic_matches


async def next_message(client: aiomqtt.Client, timeout_s: float = 2.0) -> aiomqtt.Message:
    async with asyncio.timeout(timeout_s):
        return await anext(aiter(client.messages))


class TestTopicMatching:
    @pytest.mark.parametrize(
        ("topic_filter", "topic", "expected"),
        [
            ("rainier/v1/+/+/+", "rainier/v1/s0/u1/n2", True),
            ("rainier/v1/+/+/+", "rainier/v1/s0/facility", False),
            ("rainier/v1/#", "rainier/v1", True),
            ("rainier/v1/#", "rainier/v1/s0/u1/n2", True),
            ("rainier/+/s0", "rainier/v1/s1", False),
            ("#", "$SYS/broker/load", False),
            ("a/b", "a/b/c", False),
        ],
    )
    def test_cases(self, topic_filter: str, topic: str, expected: bool) -> None:
        """Wildcards match as MQTT 3.1.1 section 4.7 says."""
        assert topic_matches(topic_filter, topic) is expected

    @given(st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=5))
    def test_a_topic_matches_itself_and_hash(self, levels: list[str]) -> None:
        """Every topic matches itself, '#', and itself with any level replaced by '+'."""
        topic = "/".join(levels)
        assert topic_matches(topic, topic)
        assert topic_matches("#", topic)
        for i in range(len(levels)):
            assert topic_matches("/".join([*levels[:i], "+", *levels[i + 1:]]), topic)


class TestBroker:
    async def test_publish_subscribe_and_retained(self) -> None:
        """A subscriber gets retained messages first, then live ones at any publish QoS."""
        async with EmbeddedBroker() as broker:
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="pub") as pub:
                await pub.publish("t/status", b"online", retain=True)
                async with aiomqtt.Client("127.0.0.1", broker.port, identifier="sub") as sub:
                    await sub.subscribe("t/#")
                    first = await next_message(sub)
                    for qos in (0, 1, 2):
                        await pub.publish("t/data", f"q{qos}".encode(), qos=qos)
                    live = [await next_message(sub) for _ in range(3)]
        assert (first.topic.value, first.payload, first.retain) == ("t/status", b"online", True)
        assert [m.payload for m in live] == [b"q0", b"q1", b"q2"]

    async def test_will_on_abrupt_disconnect(self) -> None:
        """A client that vanishes without DISCONNECT has its will published."""
        async with EmbeddedBroker() as broker:
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="watcher") as watcher:
                await watcher.subscribe("status/#")
                reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
                # CONNECT, MQTT 3.1.1, will flag, will topic status/x, will payload "offline".
                body = (b"\x00\x04MQTT\x04\x04\x00\x3c" + b"\x00\x01x"
                        + b"\x00\x08status/x" + b"\x00\x07offline")
                writer.write(bytes([0x10, len(body)]) + body)
                assert await reader.readexactly(4) == b"\x20\x02\x00\x00"
                writer.transport.abort()
                message = await next_message(watcher)
        assert (message.topic.value, message.payload) == ("status/x", b"offline")

    async def test_garbage_does_not_disturb_other_clients(self) -> None:
        """A client sending garbage is dropped; other sessions keep working."""
        async with EmbeddedBroker() as broker:
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="good") as good:
                await good.subscribe("x")
                for garbage in (b"\xff\xff\xff\xff\xff", b"\x10\x02\x00", b"\x30\xff\xff\xff\x7f"):
                    _reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
                    writer.write(garbage)
                    await writer.drain()
                    writer.close()
                await good.publish("x", b"still here")
                message = await next_message(good)
        assert message.payload == b"still here"

    async def test_refuses_mqtt5(self) -> None:
        """An MQTT 5 client is refused at CONNECT (the broker speaks 3.1.1)."""
        async with EmbeddedBroker() as broker:
            with pytest.raises(aiomqtt.MqttError):
                async with aiomqtt.Client(
                    "127.0.0.1", broker.port, protocol=aiomqtt.ProtocolVersion.V5, timeout=2,
                ):
                    pass

    def test_loopback_only(self) -> None:
        """Binding anywhere but loopback is refused."""
        with pytest.raises(BrokerError, match="loopback"):
            EmbeddedBroker(host="0.0.0.0")

    async def test_free_port_by_default(self) -> None:
        """Two embedded brokers start side by side on different free ports, never 1883."""
        async with EmbeddedBroker() as a, EmbeddedBroker() as b:
            assert a.port != b.port
            assert 1883 not in (a.port, b.port)
