"""The one module that touches aiomqtt's and paho's internals.

aiomqtt wraps a paho client and keeps it private; rainierd needs a few
things that neither library offers in public.  Each function here borrows
one of them, says why the public API cannot do it, and names the versions it
was checked against (``CHECKED_AGAINST``).  Each borrowed attribute has a
canary in tests/unit/mqtt/test_paho.py, so an upgrade that moves one fails
the unit tier by name; pyproject.toml pins both libraries to these minor
versions, and ruff's ``SLF`` rule keeps private access out of every other
module.

What is borrowed:

- aiomqtt's ``Client._client`` (its paho client), to reach paho's own
  ``_packet_queue``, ``_sock_close`` and ``publish``;
- aiomqtt's ``Client._disconnected`` (the future its message iterator waits on);
- aiomqtt's ``Client._wait_for`` (every wait of the client), overridden.

- paho's reading (``Client.loop_read``, replaced on the instance), with
  ``_sock``, ``_sock_recv``, ``_in_packet``, ``_packet_read``,
  ``_loop_rc_handle``, ``_msgtime_mutex`` and ``_last_bytes_received``
  (``read_in_chunks``).

Messages are received through aiomqtt's public ``queue_type=`` until a
handler is given (``supervisor.deliver``); from then on ``read_in_chunks``
hands each QoS 0 PUBLISH to it straight from the bytes read.  paho reads a
packet with three to four ``recv`` calls (its type, each byte of its length,
its body) and each packet costs an event-loop wake-up, its ``MQTTMessage``,
its MQTT 5 ``Properties``, paho's topic matcher and aiomqtt's ``Message``:
32 µs of CPU a 3.7 kB node frame, more than the aggregator's own work
(issue 39).  Replacing only paho's ``on_message`` had saved under a tenth,
which did not earn two borrowed internals (benchmarks/README.md,
``receive``); reading whole chunks is what the cost was.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode

# The releases every function below was read against; pyproject.toml pins these minor versions.
CHECKED_AGAINST: Final = {"aiomqtt": "2.5", "paho-mqtt": "2.2"}

_T = TypeVar("_T")


def _paho(client: aiomqtt.Client) -> paho.Client:
    # aiomqtt 2.5 keeps its paho client as ``_client`` and offers no accessor.
    inner: paho.Client = client._client
    return inner


class Client(aiomqtt.Client):
    """aiomqtt's client, but a cancel always reaches the task that waits on it.

    aiomqtt 2.5 waits for every acknowledgement (CONNACK, PUBACK, SUBACK, even
    a QoS 0 publish's write) in ``_wait_for``, through ``asyncio.wait_for``,
    which on Python 3.11 returns the result instead of raising when the cancel
    lands in the same loop iteration as the acknowledgement (CPython issue
    86296, fixed in 3.12): a stop is lost.  No public hook replaces the wait,
    so the private method is overridden whole, keeping aiomqtt's contract:
    ``None`` is the client's timeout, ``math.inf`` none, and a timeout raises
    MqttError.  Checked against aiomqtt 2.5.1.
    """

    async def _wait_for(self, fut: Awaitable[_T], timeout: float | None) -> _T:  # noqa: ASYNC109 (aiomqtt's signature)
        if timeout is None:
            timeout = self.timeout
        try:
            async with asyncio.timeout(None if timeout == math.inf else timeout):
                return await fut
        except TimeoutError:
            raise aiomqtt.MqttError("Operation timed out") from None


def close_unannounced(client: aiomqtt.Client) -> None:
    """Close the client's socket without a DISCONNECT (the broker then publishes its will).

    aiomqtt's only way out is ``__aexit__``, which sends a DISCONNECT and
    waits for it; a broker that stopped reading would hold a stop.  paho's
    own ``_sock_close`` also takes the socket off the event loop (aiomqtt's
    socket callbacks), which closing the socket by hand would not.  Checked
    against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    """
    _paho(client)._sock_close()


def disconnected(client: aiomqtt.Client) -> asyncio.Future[None]:
    """Return the future aiomqtt completes when the connection is lost (with MqttCodeError) or closed.

    aiomqtt has no public "connection lost" signal; its own message iterator
    waits on this future.  Checked against aiomqtt 2.5.1.
    """
    future: asyncio.Future[None] = client._disconnected
    return future


def speaks_v5(client: aiomqtt.Client) -> bool:
    """Return True if the client speaks MQTT 5 (aiomqtt does not say which protocol it was given).

    Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0 (``paho.Client.protocol``, public on paho).
    """
    return bool(_paho(client).protocol == paho.MQTTv5)


def queue_packet(client: aiomqtt.Client, packet: bytes) -> None:
    """Queue ``packet``, whole PUBLISH packets at QoS 0, for the client to write as one; return at once.

    paho (and so aiomqtt) frames each message it publishes as a packet of its
    own, written with a ``send`` of its own; paho's ``_packet_queue`` queues
    any bytes and writes them when aiomqtt's event-loop writer says the socket
    can take them.  A QoS 0 PUBLISH has no packet id, so many back to back are
    one packet to paho; its one ``on_publish`` (mid 0) is none of aiomqtt's,
    and paho marks the ``MQTTMessageInfo`` it is given published once written.
    An empty packet would read to paho as a stalled socket: the caller never
    queues one.  Raises aiomqtt.MqttCodeError when the client is not connected.
    Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    """
    inner = _paho(client)
    if not inner.is_connected():
        raise aiomqtt.MqttCodeError(paho.MQTT_ERR_NO_CONN, "could not publish: not connected")
    inner._packet_queue(paho.PUBLISH, packet, 0, 0, paho.MQTTMessageInfo(0))


def publish_nowait(client: aiomqtt.Client, topic: str, payload: bytes, *, qos: int) -> int:
    """Hand one message to the client without waiting for its write or acknowledgement; return paho's code
    (``paho.MQTT_ERR_SUCCESS``, 0, when queued).

    aiomqtt's ``publish`` waits for the write (QoS 0) or the PUBACK (QoS 1)
    of each message; paho's own ``publish`` (public on paho) only queues it.
    Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    """
    return int(_paho(client).publish(topic, payload, qos).rc)


Handler = Callable[[str, bytes, bool], None]
"""Takes (topic, payload, retained) of one message on the event loop; must not block."""

READ_BYTES: Final = 1 << 18
"""The most one ``recv`` takes: ~70 of rainier's 3.7 kB node frames, or a quarter of a large batch frame."""
_PUBLISH_QOS0_MASK: Final = 0xF6
_PUBLISH_QOS0: Final = 0x30  # packet type 3 with both QoS bits clear, under the mask (any DUP, any RETAIN)
_WILDCARDS: Final = (b"+", b"#")


def read_in_chunks(client: aiomqtt.Client, handler: Callable[[], Handler | None]) -> None:
    """Make ``client`` read its socket ``READ_BYTES`` at a time and hand each whole QoS 0 PUBLISH to
    ``handler()`` (when it returns one), leaving every other packet to paho as it would have read it.

    Call it on a client not yet connected: every byte of the connection
    then passes through the chunk reader (see the module docstring for why).
    """
    inner = _paho(client)
    reader = _ChunkReader(inner, handler)
    # aiomqtt's socket callback calls ``client.loop_read()`` on the paho client it was given: an instance
    # attribute is found before paho's method.  Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    inner.loop_read = reader.loop_read  # type: ignore[method-assign]


class _ChunkReader:
    """One connection's bytes, read in chunks and cut into packets (MQTT 5.0 section 2.1: a type byte, the
    remaining length as a variable byte integer, the body)."""

    def __init__(self, inner: paho.Client, handler: Callable[[], Handler | None]) -> None:
        self._inner, self._handler = inner, handler
        self._v5 = inner.protocol == paho.MQTTv5
        self._sock: object = None  # the socket the held bytes came from
        self._held: list[bytes] = []  # bytes read and not yet a whole packet
        self._held_bytes = 0
        self._need = 0  # bytes the first held packet needs, once its header is read (0: not known)

    def loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        """Read what the socket has and handle every whole packet in it; return paho's code, as its own does."""
        inner = self._inner
        sock = inner._sock
        if sock is None:
            return MQTTErrorCode.MQTT_ERR_NO_CONN
        if sock is not self._sock:  # a new connection: nothing of another one's bytes is kept
            self._sock, self._held, self._held_bytes, self._need = sock, [], 0, 0
        try:
            data = inner._sock_recv(READ_BYTES)
        except BlockingIOError:
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        except OSError as err:
            inner._easy_log(paho.MQTT_LOG_ERR, "failed to receive on socket: %s", err)
            return inner._loop_rc_handle(MQTTErrorCode.MQTT_ERR_CONN_LOST)
        if not data:
            return inner._loop_rc_handle(MQTTErrorCode.MQTT_ERR_CONN_LOST)
        with inner._msgtime_mutex:  # paho's keep-alive counts any byte heard as the broker alive
            inner._last_bytes_received = time.monotonic()
        self._held_bytes += len(data)
        if self._held_bytes < self._need:  # a large packet still arriving: joined once, when whole
            self._held.append(data)
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        buffer = b"".join((*self._held, data)) if self._held else data
        return self._packets(sock, buffer)

    def _packets(self, sock: object, buffer: bytes) -> MQTTErrorCode:
        """Handle every whole packet of ``buffer``; hold the rest."""
        inner, v5, handler = self._inner, self._v5, self._handler()
        pos, end = 0, len(buffer)
        try:
            while pos < end:
                command = buffer[pos]
                length, shift, at = 0, 0, pos + 1
                while at < end:
                    byte = buffer[at]
                    at += 1
                    length |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        break
                    shift += 7
                    if shift > 21:  # more than four length bytes: paho's read refuses it so
                        pos = end
                        return inner._loop_rc_handle(MQTTErrorCode.MQTT_ERR_PROTOCOL)
                else:
                    break  # its length not whole yet
                body_end = at + length
                if body_end > end:
                    self._need = body_end - pos
                    break
                if not (command & _PUBLISH_QOS0_MASK == _PUBLISH_QOS0 and handler is not None
                        and self._publish(handler, command, buffer, at, body_end, v5=v5)):
                    rc = self._to_paho(command, buffer[at:body_end], length)
                    if rc > 0:
                        pos = end
                        return inner._loop_rc_handle(rc)
                    if inner._sock is not sock:  # paho closed the connection (a DISCONNECT): its bytes are done
                        pos = end
                        return MQTTErrorCode.MQTT_ERR_SUCCESS
                pos = body_end
                self._need = 0
        finally:
            rest = buffer[pos:] if pos < end else b""
            self._held, self._held_bytes = ([rest] if rest else []), len(rest)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    @staticmethod
    def _publish(handler: Handler, command: int, buffer: bytes, at: int, end: int, *, v5: bool) -> bool:
        """Hand a QoS 0 PUBLISH to ``handler``; return False, having handed nothing, for one paho must judge
        (a topic alias, a topic that is not UTF-8 or holds a wildcard, a body its lengths overrun)."""
        topic_end = at + 2 + (buffer[at] << 8 | buffer[at + 1]) if at + 2 <= end else end + 1
        if topic_end > end or topic_end == at + 2:
            return False
        raw_topic = buffer[at + 2:topic_end]
        start = topic_end
        if v5:  # a properties block: nothing in it is the handler's (a topic alias comes with an empty topic)
            length, shift = 0, 0
            while True:
                if start >= end or shift > 21:
                    return False
                byte = buffer[start]
                start += 1
                length |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
            start += length
            if start > end:
                return False
        if _WILDCARDS[0] in raw_topic or _WILDCARDS[1] in raw_topic:
            return False
        try:
            topic = raw_topic.decode()
        except UnicodeDecodeError:
            return False
        handler(topic, buffer[start:end], bool(command & 1))
        return True

    def _to_paho(self, command: int, body: bytes, length: int) -> MQTTErrorCode:
        """Hand one whole packet to paho's own read, as if it had read it: its handling, acknowledgement and
        callbacks are paho's and aiomqtt's."""
        inner = self._inner
        if command >> 4 == 0:  # a reserved type; paho's read would take a zero type byte as none read yet
            return MQTTErrorCode.MQTT_ERR_PROTOCOL
        inner._in_packet = {"command": command, "have_remaining": 1, "remaining_count": [],
                            "remaining_mult": 1, "remaining_length": length, "packet": bytearray(body),
                            "to_process": 0, "pos": 0}
        rc: MQTTErrorCode = inner._packet_read()
        return rc
