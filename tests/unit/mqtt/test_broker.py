"""Specification of the embedded broker, spoken to by real aiomqtt clients."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from rainierd.errors import BrokerError
from rainierd.mqtt.broker import EmbeddedBroker, topic_matches
from rainierd.mqtt.config import Broker, MqttConfig
from rainierd.mqtt.supervisor import _client


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

    async def test_refuses_an_unknown_protocol_level(self) -> None:
        """A CONNECT of a protocol level it does not speak (MQTT 6) gets 3.1.1's refusal, then the socket closes."""
        async with EmbeddedBroker() as broker:
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            body = b"\x00\x04MQTT\x06\x02\x00\x3c\x00\x01x"
            writer.write(bytes([0x10, len(body)]) + body)
            assert await reader.read() == b"\x20\x02\x00\x01"
            writer.close()

    def test_loopback_only(self) -> None:
        """Binding anywhere but loopback is refused."""
        with pytest.raises(BrokerError, match="loopback"):
            EmbeddedBroker(host="0.0.0.0")

    async def test_free_port_by_default(self) -> None:
        """Two embedded brokers start side by side on different free ports, never 1883."""
        async with EmbeddedBroker() as a, EmbeddedBroker() as b:
            assert a.port != b.port
            assert 1883 not in (a.port, b.port)


def v5(port: int, identifier: str, **kwargs: object) -> aiomqtt.Client:
    """Return an MQTT 5 aiomqtt client of the embedded broker at ``port``."""
    return aiomqtt.Client("127.0.0.1", port, identifier=identifier, protocol=aiomqtt.ProtocolVersion.V5,
                          timeout=2, **kwargs)  # type: ignore[arg-type]


async def exchange(port: int, *packets: bytes, answers: int) -> list[bytes]:
    """Send raw packets on one connection; return the first ``answers`` packets the broker sends back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(packets))
    got = []
    async with asyncio.timeout(2):
        for _ in range(answers):
            head = await reader.readexactly(2)  # every answer here is under 128 bytes: a one-byte length
            got.append(head + await reader.readexactly(head[1]))
    writer.close()
    return got


# CONNECT, MQTT 5, clean start, keep-alive 60, no properties, client id "raw".
CONNECT_V5 = b"\x10\x10\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x03raw"


class TestMqtt5:
    """What every rainierd client speaks by default (``mqtt_protocol`` 5): the demo's tools reach its broker."""

    async def test_the_packets_have_mqtt5_shapes(self) -> None:
        """CONNACK carries a properties block (its maximum packet size, no subscription ids, no shared
        subscriptions); SUBACK has properties before its reason codes, QoS 0 granted and 0x8F for a bad filter;
        PUBACK of a QoS 1 publish is the packet id alone (success); UNSUBACK has a reason code per filter."""
        async with EmbeddedBroker(max_packet_bytes=4096) as broker:
            subscribe = b"\x82\x0d\x00\x07\x00\x00\x01t\x00\x00\x03a#b\x00"
            publish = b"\x32\x07\x00\x01t\x00\x09\x00p"
            unsubscribe = b"\xa2\x09\x00\x08\x00\x00\x01t\x00\x01u"
            connack, suback, puback, message, unsuback = await exchange(
                broker.port, CONNECT_V5, subscribe, publish, unsubscribe, answers=5)
        assert connack == b"\x20\x0c\x00\x00\x09\x27\x00\x00\x10\x00\x29\x00\x2a\x00"
        assert suback == b"\x90\x05\x00\x07\x00\x00\x8f"
        assert puback == b"\x40\x02\x00\x09"
        assert message == b"\x30\x05\x00\x01t\x00p"  # QoS 0, an empty properties block, the payload
        assert unsuback == b"\xb0\x05\x00\x08\x00\x00\x11"

    async def test_a_shared_subscription_is_refused_as_not_supported(self) -> None:
        """$share/... gets reason 0x9E (shared subscriptions not supported, as the CONNACK said), not a grant."""
        async with EmbeddedBroker() as broker:
            subscribe = b"\x82\x10\x00\x07\x00\x00\x0a$share/g/t\x00"
            _connack, suback = await exchange(broker.port, CONNECT_V5, subscribe, answers=2)
        assert suback == b"\x90\x04\x00\x07\x00\x9e"

    async def test_a_client_without_an_id_is_assigned_one(self) -> None:
        """An MQTT 5 CONNECT with an empty client id gets its assigned id in the CONNACK (property 0x12)."""
        async with EmbeddedBroker() as broker:
            (connack,) = await exchange(broker.port, b"\x10\x0d\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x00",
                                        answers=1)
        assert connack[4:].count(b"\x12\x00") == 1
        assert b"anonymous-" in connack

    async def test_v5_and_311_clients_exchange_messages_with_their_properties(self) -> None:
        """Retained and live messages at every publish QoS reach an MQTT 5 and a 3.1.1 subscriber; the MQTT 5 one
        also gets the message's user property and content type."""
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.UserProperty = ("node", "s0/u1/n4")
        props.ContentType = "application/json"
        async with EmbeddedBroker() as broker, v5(broker.port, "pub") as pub:
            await pub.publish("t/status", b"online", qos=1, retain=True, properties=props)
            async with v5(broker.port, "sub5") as sub5, aiomqtt.Client("127.0.0.1", broker.port,
                                                                           identifier="sub3") as sub3:
                await sub5.subscribe("t/#", qos=1)
                await sub3.subscribe("t/#")
                kept = [await next_message(sub5), await next_message(sub3)]
                for qos in (0, 1, 2):
                    await pub.publish("t/data", f"q{qos}".encode(), qos=qos, properties=props)
                live5 = [await next_message(sub5) for _ in range(3)]
                live3 = [await next_message(sub3) for _ in range(3)]
        assert [(m.topic.value, m.payload, m.retain) for m in kept] == [("t/status", b"online", True)] * 2
        assert [m.payload for m in live5] == [m.payload for m in live3] == [b"q0", b"q1", b"q2"]
        shown = live5[0].properties
        assert shown is not None
        assert (shown.UserProperty, shown.ContentType) == ([("node", "s0/u1/n4")], "application/json")

    async def test_subscription_options_are_honoured(self) -> None:
        """No-local keeps a client's own messages from it; retain handling 2 sends no retained message at
        subscribe; retain-as-published keeps the retain flag on live delivery."""
        async with EmbeddedBroker() as broker, v5(broker.port, "a") as a, v5(broker.port, "b") as b:
            await b.publish("kept", b"old", retain=True)
            await a.subscribe("own", options=SubscribeOptions(noLocal=True))
            await a.subscribe("kept", options=SubscribeOptions(retainHandling=2, retainAsPublished=True))
            await a.publish("own", b"mine")
            await b.publish("own", b"theirs")
            await b.publish("kept", b"new", retain=True)
            got = [await next_message(a), await next_message(a)]
        assert [(m.topic.value, m.payload, m.retain) for m in got] == [("own", b"theirs", False),
                                                                       ("kept", b"new", True)]

    async def test_a_message_over_the_clients_maximum_packet_size_is_not_sent_to_it(self) -> None:
        """The monitor tells the broker the largest packet it takes; a larger message is skipped for it alone."""
        async with EmbeddedBroker() as broker, v5(broker.port, "pub") as pub:
            config = MqttConfig(brokers=(Broker("127.0.0.1", broker.port),), client_id="monitor", protocol="5",
                                max_packet_bytes=200)
            async with _client(config, config.brokers[0]) as small, v5(broker.port, "big") as big:
                await small.subscribe("t")
                await big.subscribe("t")
                await pub.publish("t", b"x" * 500)
                await pub.publish("t", b"y" * 50)
                assert (await next_message(small)).payload == b"y" * 50
                assert [(await next_message(big)).payload for _ in range(2)] == [b"x" * 500, b"y" * 50]

    async def test_a_disconnect_with_will_publishes_the_will(self) -> None:
        """MQTT 5's DISCONNECT reason 0x04 asks for the will; a plain DISCONNECT discards it."""
        async with EmbeddedBroker() as broker, v5(broker.port, "watcher") as watcher:
            await watcher.subscribe("status/#")
            # CONNECT, MQTT 5, will flag, empty will properties, will topic status/x, the client id as will payload.
            for client, reason in ((b"w1", b"\x00"), (b"w2", b"\x04")):
                body = (b"\x00\x04MQTT\x05\x06\x00\x3c\x00" + b"\x00\x02" + client + b"\x00"
                        + b"\x00\x08status/x" + b"\x00\x02" + client)
                (connack,) = await exchange(broker.port, bytes([0x10, len(body)]) + body,
                                            b"\xe0\x02" + reason + b"\x00", answers=1)
                assert connack[3] == 0x00
            message = await next_message(watcher)
        assert (message.topic.value, message.payload) == ("status/x", b"w2")
