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
import random
import time

import aiomqtt
import paho.mqtt.client as paho
import pytest

from rainierd.mqtt import _paho
from rainierd.mqtt._packets import PINGRESP, PUBLISH, block, packet, utf8
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


class ChunkedSocket:
    """A socket whose reads return ``data`` cut at ``sizes`` (each read at most what is asked), then would block
    (or, ``closed``, read nothing: the peer's close); it writes nothing."""

    def __init__(self, data: bytes, sizes: list[int], *, closed: bool = False) -> None:
        self.data, self.sizes, self.pos, self.closed = data, sizes, 0, closed

    def recv(self, bufsize: int) -> bytes:
        if self.pos >= len(self.data):
            if self.closed:
                return b""
            raise BlockingIOError
        size = min(bufsize, self.sizes.pop(0) if self.sizes else bufsize)
        self.pos += size
        return self.data[self.pos - size:self.pos]

    def close(self) -> None:
        pass

    def fileno(self) -> int:
        return -1


def publish_packet(topic: str, payload: bytes, *, v5: bool, retain: bool = False, properties: bytes = b"") -> bytes:
    """Return a QoS 0 PUBLISH packet (an MQTT 5 one with ``properties`` in its block)."""
    return packet(PUBLISH, int(retain), utf8(topic) + (block(properties) if v5 else b"") + payload)


def reading(protocol: aiomqtt.ProtocolVersion, stream: bytes, sizes: list[int], *, handing: bool = True,
            closed: bool = False) -> tuple[aiomqtt.Client, list[tuple[str, bytes, bool]]]:
    """Return a client reading ``stream`` in chunks of ``sizes`` (``read_in_chunks``), and what its handler got."""
    client = aiomqtt.Client(*UNCONNECTED, identifier="unit", protocol=protocol)
    got: list[tuple[str, bytes, bool]] = []
    _paho.read_in_chunks(client, lambda: (lambda t, p, r: got.append((t, p, r))) if handing else None)
    client._client._sock = ChunkedSocket(stream, sizes, closed=closed)
    return client, got


def read_all(client: aiomqtt.Client) -> list[paho.MQTTErrorCode]:
    """Return the codes of the reads it took ``client`` to read its whole socket."""
    sock = client._client._sock
    codes = []
    while sock.pos < len(sock.data):
        codes.append(client._client.loop_read())
    return codes


V5, V311 = aiomqtt.ProtocolVersion.V5, aiomqtt.ProtocolVersion.V311


class TestPahosReading:
    """paho's ``loop_read``, ``_sock``, ``_sock_recv``, ``_in_packet``, ``_packet_read``, ``_loop_rc_handle``,
    ``_msgtime_mutex`` and ``_last_bytes_received``: ``read_in_chunks`` reads in paho's place."""

    def test_aiomqtts_socket_callback_reads_through_the_paho_clients_loop_read(self) -> None:
        """aiomqtt's reader callback calls ``loop_read()`` on the paho client: the instance's replacement."""
        assert "client.loop_read()" in inspect.getsource(aiomqtt.Client._on_socket_open), moved(
            "aiomqtt's socket callback")

    @pytest.mark.parametrize(("method", "parameters"), [
        ("loop_read", ["self", "max_packets"]), ("_sock_recv", ["self", "bufsize"]), ("_packet_read", ["self"]),
        ("_loop_rc_handle", ["self", "rc"]), ("_easy_log", ["self", "level", "fmt", "args"])])
    def test_paho_has_each_method_with_this_signature(self, method: str, parameters: list[str]) -> None:
        """Each paho method the chunk reader calls exists with the parameters it passes."""
        found = getattr(paho.Client, method, None)
        assert found is not None, moved(f"paho.Client.{method}")
        assert list(inspect.signature(found).parameters) == parameters, moved(f"paho.Client.{method}'s signature")

    def test_paho_keeps_its_socket_read_state_and_clock_as_read(self) -> None:
        """A new paho client has ``_sock``, ``_in_packet`` with the keys the reader fills, and the keep-alive's
        ``_last_bytes_received`` under ``_msgtime_mutex``."""
        inner = paho.Client(paho.CallbackAPIVersion.VERSION2)
        assert inner._sock is None, moved("paho.Client._sock")
        assert set(inner._in_packet) == {"command", "have_remaining", "remaining_count", "remaining_mult",
                                         "remaining_length", "packet", "to_process", "pos"}, moved(
            "paho.Client._in_packet")
        assert isinstance(inner._last_bytes_received, float), moved("paho.Client._last_bytes_received")
        assert paho.time_func is time.monotonic, moved("paho's keep-alive clock")  # the reader stamps with it
        with inner._msgtime_mutex:
            pass

    async def test_pahos_read_handles_a_packet_already_read_without_reading(self) -> None:
        """paho's ``_packet_read`` handed a whole packet in ``_in_packet`` handles it without a ``recv`` and
        resets its state (here a PINGRESP: no ping is awaited any more)."""
        client, _ = reading(V311, b"", [])
        inner = client._client
        inner._ping_t = 5.0
        inner._in_packet = {"command": PINGRESP << 4, "have_remaining": 1, "remaining_count": [],
                            "remaining_mult": 1, "remaining_length": 0, "packet": bytearray(), "to_process": 0,
                            "pos": 0}
        assert (inner._packet_read(), inner._ping_t, inner._in_packet["command"]) == (0, 0, 0), moved(
            "paho.Client._packet_read")

    @pytest.mark.parametrize("protocol", [V311, V5])
    @pytest.mark.parametrize("seed", range(3))
    async def test_every_publish_reaches_the_handler_whole_however_the_stream_is_cut(
            self, protocol: aiomqtt.ProtocolVersion, seed: int) -> None:
        """QoS 0 PUBLISHes of 0 B to 300 kB, retained or not, with MQTT 5 properties or none, read in chunks cut
        anywhere (a byte at a time too): each reaches the handler whole, once, in order."""
        rng = random.Random(seed)
        v5 = protocol == V5
        sent = [(f"t/{k}", rng.randbytes(rng.choice([0, 1, 200, 3_700, 300_000])), k % 7 == 0) for k in range(40)]
        stream = b"".join(publish_packet(t, p, v5=v5, retain=r, properties=b"\x26" + utf8("k") + utf8("v") * (k % 2))
                          for k, (t, p, r) in enumerate(sent))
        sizes = [rng.choice([1, 2, 5, 100, 4_000, 70_000, 1 << 20]) for _ in range(3_000)]
        client, got = reading(protocol, stream, sizes)
        assert set(read_all(client)) == {paho.MQTTErrorCode.MQTT_ERR_SUCCESS}
        assert got == sent

    async def test_a_packet_not_a_qos_0_publish_is_handled_by_paho(self) -> None:
        """A PINGRESP between two messages is paho's (no ping awaited after it); the messages are the handler's."""
        stream = publish_packet("t/0", b"a", v5=False) + packet(PINGRESP, 0, b"") + publish_packet("t/1", b"b",
                                                                                                  v5=False)
        client, got = reading(V311, stream, [])
        client._client._ping_t = 5.0
        read_all(client)
        assert (got, client._client._ping_t) == ([("t/0", b"a", False), ("t/1", b"b", False)], 0)

    async def test_messages_before_a_handler_go_to_aiomqtts_queue(self) -> None:
        """With no handler yet, a PUBLISH goes through paho to aiomqtt's queue, as without the chunk reader."""
        client, got = reading(V5, publish_packet("t/0", b"a", v5=True), [], handing=False)
        read_all(client)
        assert (got, len(client.messages)) == ([], 1)

    async def test_a_topic_with_a_wildcard_is_left_to_paho_and_aiomqtt(self) -> None:
        """A topic no broker forwards (a wildcard in it) is not handed on: aiomqtt refuses it, as before."""
        client, got = reading(V311, publish_packet("t/+", b"a", v5=False), [])
        with pytest.raises(ValueError, match="Invalid topic"):
            read_all(client)
        assert got == []

    async def test_the_connection_closed_by_the_broker_is_lost(self) -> None:
        """A read of nothing (the broker closed the connection) is paho's connection lost: its socket closed."""
        client, got = reading(V311, publish_packet("t/0", b"a", v5=False)[:3], [], closed=True)
        inner = client._client
        codes = [inner.loop_read(), inner.loop_read()]
        assert (codes, inner._sock, got) == (
            [paho.MQTTErrorCode.MQTT_ERR_SUCCESS, paho.MQTTErrorCode.MQTT_ERR_CONN_LOST], None, [])
