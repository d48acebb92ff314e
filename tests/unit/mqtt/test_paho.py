"""Canaries for what ``rainierd.mqtt._paho`` borrows of aiomqtt's and paho's
internals: one class per private attribute, asserting that the installed
libraries still have it and still behave as the borrowing function relies on,
so that an upgrade fails here, in the unit tier, naming what moved.

The connected behaviours run against the embedded broker (in process, MQTT
3.1.1); tests/unit/mqtt/test_burst.py and tests/integration/test_failover.py
hold the same functions to a real Mosquitto.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect

import aiomqtt
import paho.mqtt.client as paho
import pytest

from rainierd.mqtt import _paho
from rainierd.mqtt.broker import EmbeddedBroker
from rainierd.mqtt.burst import publish_many, publish_nowait

UNCONNECTED = ("127.0.0.1", 1)  # a port nothing listens on: these clients never connect


def moved(what: str) -> str:
    """Return the message of a failed canary: what moved, and what to do about it."""
    return (f"{what} is not as rainierd.mqtt._paho relies on (checked against aiomqtt "
            f"{_paho.CHECKED_AGAINST['aiomqtt']}, paho-mqtt {_paho.CHECKED_AGAINST['paho-mqtt']}): rework the "
            "function that borrows it before moving the pin in pyproject.toml")


async def received(client: aiomqtt.Client, count: int) -> list[tuple[str, bytes]]:
    """Return the next ``count`` messages ``client`` takes from aiomqtt's queue."""
    got = []
    async with asyncio.timeout(5):
        async for message in client.messages:
            got.append((message.topic.value, bytes(message.payload)))  # type: ignore[arg-type]
            if len(got) == count:
                return got
    return got


class TestTheVersions:
    @pytest.mark.parametrize("package", ["aiomqtt", "paho-mqtt"])
    def test_the_installed_minor_version_is_the_one_checked(self, package: str) -> None:
        """Each library's installed minor version is the one _paho was read against (and pyproject.toml pins)."""
        installed = importlib.metadata.version(package)
        assert installed.startswith(_paho.CHECKED_AGAINST[package] + "."), moved(f"{package} {installed}")


class TestAiomqttsPahoClient:
    """``aiomqtt.Client._client``: every function of _paho reaches paho through it."""

    async def test_aiomqtt_keeps_its_paho_client_as_client(self) -> None:
        """An aiomqtt client holds its paho client as ``_client``."""
        client = aiomqtt.Client(*UNCONNECTED, identifier="unit")
        assert isinstance(getattr(client, "_client", None), paho.Client), moved("aiomqtt.Client._client")

    @pytest.mark.parametrize(("protocol", "v5"), [(aiomqtt.ProtocolVersion.V5, True),
                                                  (aiomqtt.ProtocolVersion.V311, False)])
    async def test_the_paho_client_says_its_protocol(self, protocol: aiomqtt.ProtocolVersion, v5: bool) -> None:
        """``speaks_v5`` reads the protocol aiomqtt gave paho (``paho.Client.protocol``)."""
        assert _paho.speaks_v5(aiomqtt.Client(*UNCONNECTED, identifier="unit", protocol=protocol)) is v5


class TestWaitFor:
    """``aiomqtt.Client._wait_for``: ``_paho.Client`` overrides it so that a stop is never lost."""

    def test_aiomqtt_waits_in_one_method_of_this_signature(self) -> None:
        """aiomqtt's ``_wait_for(fut, timeout)`` exists with the signature the override keeps."""
        method = getattr(aiomqtt.Client, "_wait_for", None)
        assert method is not None, moved("aiomqtt.Client._wait_for")
        assert list(inspect.signature(method).parameters) == ["self", "fut", "timeout"], moved(
            "aiomqtt.Client._wait_for's signature")

    @pytest.mark.parametrize("method", ["__aenter__", "__aexit__", "publish", "subscribe", "unsubscribe"])
    def test_every_aiomqtt_wait_goes_through_the_overridden_method(self, method: str) -> None:
        """aiomqtt's connect, disconnect, publish and (un)subscribe wait through ``_wait_for``: if an upgrade
        waits some other way, the override no longer covers it and this fails."""
        assert "self._wait_for(" in inspect.getsource(getattr(aiomqtt.Client, method)), moved(
            f"aiomqtt.Client.{method}'s wait")

    async def test_a_cancel_that_lands_with_the_acknowledgement_is_not_lost(self) -> None:
        """A stop in the loop iteration that also brings the awaited acknowledgement still cancels the waiter
        (aiomqtt's own wait, ``asyncio.wait_for`` on 3.11, returned the acknowledgement and dropped the stop)."""
        client = _paho.Client(*UNCONNECTED, identifier="unit")
        acknowledged = asyncio.Event()
        waiting = asyncio.create_task(client._wait_for(acknowledged.wait(), timeout=None))
        await asyncio.sleep(0)  # the task now waits for the acknowledgement
        acknowledged.set()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    async def test_a_wait_past_its_timeout_raises_mqtt_error(self) -> None:
        """The overridden wait keeps aiomqtt's contract: a timeout is an ``MqttError``."""
        client = _paho.Client(*UNCONNECTED, identifier="unit")
        with pytest.raises(aiomqtt.MqttError, match="timed out"):
            await client._wait_for(asyncio.Event().wait(), timeout=0.01)


class TestDisconnected:
    """``aiomqtt.Client._disconnected``: the supervisor ends a session that only waits when it completes."""

    async def test_aiomqtt_keeps_a_future_of_the_connection(self) -> None:
        """A new aiomqtt client holds a pending future as ``_disconnected``, the one its iterator waits on."""
        client = aiomqtt.Client(*UNCONNECTED, identifier="unit")
        lost = getattr(client, "_disconnected", None)
        assert isinstance(lost, asyncio.Future), moved("aiomqtt.Client._disconnected")
        assert not lost.done()
        assert "self._client._disconnected" in inspect.getsource(aiomqtt.client.MessagesIterator), moved(
            "aiomqtt's message iterator's wait on _disconnected")

    async def test_it_fails_when_the_broker_goes_away(self) -> None:
        """The broker closing the connection completes the future with MqttCodeError."""
        async with EmbeddedBroker() as broker:
            client = aiomqtt.Client("127.0.0.1", broker.port, identifier="unit")
            await client.__aenter__()
        async with asyncio.timeout(5):
            with pytest.raises(aiomqtt.MqttCodeError):
                await _paho.disconnected(client)


class TestSockClose:
    """``paho.Client._sock_close``: a goodbye that overruns closes the socket without a DISCONNECT."""

    def test_paho_closes_its_socket_in_one_method_without_arguments(self) -> None:
        """paho's ``_sock_close()`` exists and takes no argument."""
        method = getattr(paho.Client, "_sock_close", None)
        assert method is not None, moved("paho.Client._sock_close")
        assert list(inspect.signature(method).parameters) == ["self"], moved("paho.Client._sock_close's signature")

    async def test_closing_a_client_never_connected_does_nothing(self) -> None:
        """A client refused before it had a socket is closed without error (the supervisor's connect path)."""
        _paho.close_unannounced(aiomqtt.Client(*UNCONNECTED, identifier="unit"))

    async def test_the_broker_publishes_the_will_of_a_client_closed_unannounced(self) -> None:
        """The socket closed with no DISCONNECT: the broker publishes the client's will to its subscribers."""
        async with EmbeddedBroker() as broker, aiomqtt.Client("127.0.0.1", broker.port, identifier="sub") as sub:
            await sub.subscribe("status/#")
            gone = aiomqtt.Client("127.0.0.1", broker.port, identifier="gone",
                                  will=aiomqtt.Will("status/gone", b"offline"))
            await gone.__aenter__()
            _paho.close_unannounced(gone)
            assert await received(sub, 1) == [("status/gone", b"offline")]


class TestPacketQueue:
    """``paho.Client._packet_queue``: ``publish_many`` queues many PUBLISH packets as one."""

    def test_paho_queues_a_packet_with_this_signature(self) -> None:
        """paho's ``_packet_queue(command, packet, mid, qos, info)`` exists with that signature."""
        method = getattr(paho.Client, "_packet_queue", None)
        assert method is not None, moved("paho.Client._packet_queue")
        assert list(inspect.signature(method).parameters) == ["self", "command", "packet", "mid", "qos", "info"], (
            moved("paho.Client._packet_queue's signature"))

    async def test_queued_packets_arrive_as_messages_in_order(self) -> None:
        """Three messages queued as one packet, then one awaited publish: a subscriber gets all four, in order."""
        async with EmbeddedBroker() as broker, aiomqtt.Client("127.0.0.1", broker.port, identifier="sub") as sub:
            await sub.subscribe("t/#")
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="pub") as pub:
                publish_many(pub, ["t/0", "t/1", "t/2"], [b"a", b"b" * 300, b"c"])
                await pub.publish("t/3", b"d")
            assert await received(sub, 4) == [("t/0", b"a"), ("t/1", b"b" * 300), ("t/2", b"c"), ("t/3", b"d")]

    async def test_a_client_not_connected_refuses_the_packet(self) -> None:
        """Not connected: MqttCodeError, nothing queued."""
        with pytest.raises(aiomqtt.MqttCodeError):
            publish_many(aiomqtt.Client(*UNCONNECTED, identifier="unit"), ["t"], [b"x"])


class TestPahoPublish:
    """paho's own ``publish`` under aiomqtt's (public on paho, reached through ``_client``)."""

    async def test_a_message_handed_over_unawaited_arrives(self) -> None:
        """QoS 1, not waiting for the PUBACK: the message still reaches a subscriber."""
        async with EmbeddedBroker() as broker, aiomqtt.Client("127.0.0.1", broker.port, identifier="sub") as sub:
            await sub.subscribe("t/#")
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="pub") as pub:
                publish_nowait(pub, "t/1", b"one", qos=1)
                assert await received(sub, 1) == [("t/1", b"one")]

    async def test_a_client_not_connected_refuses_it_with_pahos_code(self) -> None:
        """Not connected: MqttCodeError carrying paho's MQTT_ERR_NO_CONN."""
        with pytest.raises(aiomqtt.MqttCodeError) as refused:
            publish_nowait(aiomqtt.Client(*UNCONNECTED, identifier="unit"), "t", b"x", qos=1)
        assert refused.value.rc == paho.MQTT_ERR_NO_CONN
