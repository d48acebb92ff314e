"""Many QoS 0 messages queued as one write: a real Mosquitto delivers each, in order, under both protocols."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest

from harness.procs import Broker
from rainierd.mqtt.burst import publish_many, publish_packet_header


class TestPublishPacketHeader:
    def test_the_header_is_the_fixed_header_then_the_topic(self) -> None:
        """MQTT 3.1.1: 0x30, the remaining length (topic field + payload), the topic's length and bytes."""
        assert publish_packet_header("a/b", 10, v5=False) == bytes((0x30, 15, 0, 3)) + b"a/b"

    def test_mqtt_5_adds_an_empty_property_list(self) -> None:
        """MQTT 5: one more byte, a property length of 0, counted in the remaining length."""
        assert publish_packet_header("a/b", 10, v5=True) == bytes((0x30, 16, 0, 3)) + b"a/b" + b"\x00"

    def test_a_long_payload_takes_a_multi_byte_remaining_length(self) -> None:
        """A remaining length of 3,722 + 5 bytes is two digits of 7 bits, least significant first."""
        remaining = 5 + 3_722
        assert publish_packet_header("a/b", 3_722, v5=False)[:3] == bytes(
            (0x30, remaining % 128 | 0x80, remaining // 128))


@pytest.mark.parametrize("protocol", [aiomqtt.ProtocolVersion.V311, aiomqtt.ProtocolVersion.V5])
async def test_a_burst_arrives_message_by_message_in_order(mosquitto: Broker,
                                                          protocol: aiomqtt.ProtocolVersion) -> None:
    """Messages of 1 B to 300 KB queued as one write, then one awaited publish: the subscriber receives each
    on its own topic with its own payload, in order, the awaited one last."""
    sizes = [1, 127, 128, 16_383, 16_384, 3_722, 300_000]
    topics = [f"burst/{i}/n{size}" for i, size in enumerate(sizes)]
    payloads = [bytes([i]) * size for i, size in enumerate(sizes)]
    async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="sub", protocol=protocol) as sub:
        await sub.subscribe("burst/#")
        async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="pub", protocol=protocol) as pub:
            publish_many(pub, topics, payloads)
            await pub.publish("burst/last", b"end")
        got: list[tuple[str, bytes]] = []
        async with asyncio.timeout(10):
            async for message in sub.messages:
                got.append((message.topic.value, bytes(message.payload)))  # type: ignore[arg-type]
                if message.topic.value == "burst/last":
                    break
    assert got == [*zip(topics, payloads, strict=True), ("burst/last", b"end")]
