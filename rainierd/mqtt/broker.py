"""A small in-process MQTT broker, so ``rainierd run`` needs no broker
installed.

Why not amqtt: it pins ``websockets`` to one exact version and brings seven
more dependencies (argon2, typer, psutil, ...) to serve what is here a
loopback pipe between the tasks of one process and the tools an operator
points at it (``rainierd jobs``, ``mosquitto_sub``).  This broker implements
the part of MQTT 3.1.1 and MQTT 5 that needs, and nothing that production
needs: CONNECT (3.1, 3.1.1 and 5, with MQTT 5's properties), PUBLISH at QoS
0/1/2 in, delivery at QoS 0 out (every subscription is granted QoS 0),
SUBSCRIBE/UNSUBSCRIBE with ``+`` and ``#`` (and MQTT 5's no-local,
retain-as-published and retain-handling options), retained messages, wills,
keep-alive and PING.  Every rainierd client speaks MQTT 5 by default
(``mqtt_protocol``), so this broker must too: one that refused it left
``rainierd jobs static`` retrying for a minute against the demo.

MQTT 5 features it does not offer, said in its CONNACK so a client does not
try them: shared subscriptions, subscription identifiers and topic aliases
(a client may not send one).  It keeps no session across connections
(``session present`` is always 0), and honours each client's Maximum Packet
Size by not sending it a larger message.  A message's own MQTT 5 properties
(content type, user properties, ...) reach MQTT 5 subscribers unchanged; an
expiry is not counted down.  It listens on loopback only, on a free port by
default, and never on a port another broker holds.  Production uses
Mosquitto or a clustered broker (deploy/).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self

import structlog

from rainierd.errors import BrokerError
from rainierd.mqtt._packets import (
    ASSIGNED_CLIENT_ID,
    AUTH,
    AUTHENTICATION_METHOD,
    CONNACK,
    CONNECT,
    DISCONNECT,
    MAXIMUM_PACKET_SIZE,
    MESSAGE_PROPERTIES,
    PINGREQ,
    PINGRESP,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SHARED_SUBSCRIPTIONS_AVAILABLE,
    SUBACK,
    SUBSCRIBE,
    SUBSCRIPTION_ID,
    SUBSCRIPTION_IDS_AVAILABLE,
    TOPIC_ALIAS,
    UNSUBACK,
    UNSUBSCRIBE,
    Properties,
    ProtocolError,
    Reader,
    block,
    encode,
    packet,
    u32,
    utf8,
    value,
)

log = structlog.get_logger("rainierd.mqtt.broker")

_LOOPBACK: Final = ("127.0.0.1", "::1", "localhost")
_PROTOCOLS: Final = {("MQIsdp", 3), ("MQTT", 4), ("MQTT", 5)}
# MQTT 5 reason codes (section 2.4) the broker sends.
_SUCCESS, _NO_SUBSCRIPTION, _BAD_AUTHENTICATION_METHOD, _FILTER_INVALID = 0x00, 0x11, 0x8C, 0x8F
_SHARED_NOT_SUPPORTED: Final = 0x9E
_DISCONNECT_WITH_WILL: Final = 0x04
# Subscription options (MQTT 5 section 3.8.3.1); a 3.1.1 subscription has none of them set.
_NO_LOCAL, _RETAIN_AS_PUBLISHED = 0x04, 0x08


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Return True if ``topic`` matches an MQTT ``topic_filter``."""
    if topic.startswith("$") and not topic_filter.startswith("$"):
        return False  # MQTT 4.7.2: wildcards at the first level skip $ topics
    f_parts, t_parts = topic_filter.split("/"), topic.split("/")
    for i, part in enumerate(f_parts):
        if part == "#":
            return True
        if i >= len(t_parts) or (part != "+" and part != t_parts[i]):
            return False
    return len(f_parts) == len(t_parts)


def _valid_filter(topic_filter: str) -> bool:
    parts = topic_filter.split("/")
    return bool(topic_filter) and all(
        p in ("+", "#") or ("+" not in p and "#" not in p) for p in parts
    ) and "#" not in parts[:-1]


@dataclass(frozen=True, slots=True)
class _Message:
    """A message as routed; its MQTT 5 properties (``encode``'d) travel with it to MQTT 5 subscribers."""

    topic: str
    payload: bytes
    retain: bool
    sender: str | None = None  # the publishing client's id, for no-local subscriptions (None: a will)
    props: bytes = b""

    def packet(self, *, v5: bool, retain: bool) -> bytes:
        """Return the QoS 0 PUBLISH that delivers this message to a client of that protocol."""
        head = utf8(self.topic) + (block(self.props) if v5 else b"")
        return packet(PUBLISH, 0x01 if retain else 0x00, head + self.payload)


@dataclass(eq=False)
class _Session:
    client_id: str
    writer: asyncio.StreamWriter
    outbox: asyncio.Queue[bytes]
    v5: bool = False
    filters: dict[str, int] = field(default_factory=dict)  # topic filter -> its MQTT 5 subscription options
    will: _Message | None = None
    keepalive_s: int = 0
    max_packet_bytes: int | None = None  # the client's Maximum Packet Size (MQTT 5): larger messages are not sent
    dropped: int = 0


class EmbeddedBroker:
    """An MQTT broker on a loopback port, used as ``async with EmbeddedBroker()``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_packet_bytes: int = 1 << 20,
        outbox_messages: int = 50_000,
    ) -> None:
        if host not in _LOOPBACK:
            raise BrokerError(f"the embedded broker serves loopback only, not {host!r}")
        self.host, self._port = host, port
        self.max_packet_bytes = max_packet_bytes
        self.outbox_messages = outbox_messages
        self._server: asyncio.Server | None = None
        self._sessions: dict[str, _Session] = {}
        self._retained: dict[str, _Message] = {}
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def port(self) -> int:
        """Return the port the broker listens on (known once started)."""
        if self._server is None:
            raise BrokerError("the embedded broker is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """Return the ``mqtt://`` URL a client on this machine reaches the broker at (known once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mqtt://{host}:{self.port}"

    async def __aenter__(self) -> Self:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self._port)
        except OSError as exc:
            raise BrokerError(f"cannot listen on {self.host}:{self._port}: {exc.strerror}") from exc
        log.info("embedded broker listening", host=self.host, port=self.port, url=self.url)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.close()
        # Closing the sockets ends each handler through EOF; cancelling them
        # instead makes asyncio's stream callback log the CancelledError.
        for writer in self._connections.values():
            writer.close()
        if self._connections:
            _done, pending = await asyncio.wait(self._connections, timeout=1.0)
            for task in pending:
                task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        session: _Session | None = None
        clean_exit = False
        try:
            session = await self._handshake(reader, writer)
            if session is None:
                return
            clean_exit = await self._session_loop(session, reader)
        # except*: the session loop's own TaskGroup raises these inside an ExceptionGroup (a client that hung
        # up mid-session was logged with a traceback).
        except* (ProtocolError, ConnectionError, asyncio.IncompleteReadError, TimeoutError) as group:
            log.debug("embedded broker dropped a client", error=str(group.exceptions[0]))
        finally:
            del self._connections[task]
            if session is not None and self._sessions.get(session.client_id) is session:
                del self._sessions[session.client_id]
                if not clean_exit and session.will is not None:
                    self._route(session.will)
            writer.close()

    async def _read_packet(self, reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
        first = (await reader.readexactly(1))[0]
        length, shift = 0, 0
        for _ in range(4):
            byte = (await reader.readexactly(1))[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            raise ProtocolError("malformed remaining length")
        if length > self.max_packet_bytes:
            raise ProtocolError(f"packet of {length} bytes exceeds {self.max_packet_bytes}")
        return first >> 4, first & 0x0F, await reader.readexactly(length)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> _Session | None:
        async with asyncio.timeout(10.0):
            kind, _flags, body = await self._read_packet(reader)
        if kind != CONNECT:
            raise ProtocolError("first packet is not CONNECT")
        r = Reader(body)
        protocol, level = r.text(), r.u8()
        if (protocol, level) not in _PROTOCOLS:
            writer.write(packet(CONNACK, 0, b"\x00\x01"))  # 3.1.1's "unacceptable protocol version"
            return None
        v5 = level == 5
        flags, keepalive = r.u8(), r.u16()
        connect_props = r.properties() if v5 else ()
        given_id = r.text()
        client_id = given_id or f"anonymous-{id(writer):x}"
        will = None
        if flags & 0x04:
            will_props = r.properties() if v5 else ()
            will = _Message(r.text(), r.blob(), bool(flags & 0x20), props=_forwarded(will_props))
        if flags & 0x80:
            r.text()  # username: the loopback broker does not authenticate
        if flags & 0x40:
            r.blob()
        if any(key == AUTHENTICATION_METHOD for key, _ in connect_props):
            # Enhanced authentication (AUTH packets) is not offered.
            writer.write(packet(CONNACK, 0, bytes([0, _BAD_AUTHENTICATION_METHOD]) + block()))
            return None
        if (old := self._sessions.pop(client_id, None)) is not None:
            old.writer.close()  # MQTT 3.1.4-2: a second connection takes over the id
        session = _Session(client_id, writer, asyncio.Queue(self.outbox_messages), v5=v5, will=will,
                           keepalive_s=keepalive, max_packet_bytes=value(connect_props, MAXIMUM_PACKET_SIZE))
        self._sessions[client_id] = session
        if v5:
            granted = [(MAXIMUM_PACKET_SIZE, u32(self.max_packet_bytes)), (SUBSCRIPTION_IDS_AVAILABLE, b"\x00"),
                       (SHARED_SUBSCRIPTIONS_AVAILABLE, b"\x00")]
            if not given_id:
                granted.append((ASSIGNED_CLIENT_ID, utf8(client_id)))
            writer.write(packet(CONNACK, 0, b"\x00\x00" + block(encode(granted))))
        else:
            writer.write(packet(CONNACK, 0, b"\x00\x00"))
        return session

    async def _session_loop(self, session: _Session, reader: asyncio.StreamReader) -> bool:
        """Serve the session until it ends; return True for a DISCONNECT that discards the will."""
        idle_limit = session.keepalive_s * 1.5 if session.keepalive_s else None
        async with asyncio.TaskGroup() as tg:
            sender = tg.create_task(self._send_loop(session), name=f"broker-send-{session.client_id}")
            try:
                while True:
                    async with asyncio.timeout(idle_limit):
                        kind, flags, body = await self._read_packet(reader)
                    if kind == DISCONNECT:
                        # MQTT 5's reason 0x04 asks for the will to be published all the same.
                        return not (session.v5 and body[:1] == bytes([_DISCONNECT_WITH_WILL]))
                    self._handle(session, kind, flags, body)
            finally:
                sender.cancel()

    async def _send_loop(self, session: _Session) -> None:
        while True:
            session.writer.write(await session.outbox.get())
            while not session.outbox.empty():
                session.writer.write(session.outbox.get_nowait())
            await session.writer.drain()

    def _send(self, session: _Session, data: bytes) -> None:
        if session.max_packet_bytes is not None and len(data) > session.max_packet_bytes:
            # MQTT 5 section 3.1.2.11.4: a message larger than the client takes is discarded for it.
            log.debug("embedded broker skipped a packet over a client's maximum", client=session.client_id,
                      bytes=len(data), maximum=session.max_packet_bytes)
            return
        try:
            session.outbox.put_nowait(data)
        except asyncio.QueueFull:
            session.dropped += 1
            if session.dropped in (1, 1_000, 1_000_000):
                log.warning("embedded broker dropping for a slow client",
                            client=session.client_id, dropped=session.dropped)

    def _ack(self, session: _Session, kind: int, pid: int, reasons: bytes = b"") -> None:
        """Send a SUBACK or UNSUBACK: MQTT 5's has a properties block before its reason codes."""
        self._send(session, packet(kind, 0, struct.pack("!H", pid) + (block() if session.v5 else b"") + reasons))

    def _handle(self, session: _Session, kind: int, flags: int, body: bytes) -> None:
        r = Reader(body)
        if kind == PUBLISH:
            self._on_publish(session, flags, r)
        elif kind == PUBREL:
            # An acknowledgement of MQTT 5 without a reason code is a success (section 3.7.2.1).
            self._send(session, packet(PUBCOMP, 0, struct.pack("!H", r.u16())))
        elif kind == SUBSCRIBE:
            self._on_subscribe(session, r)
        elif kind == UNSUBSCRIBE:
            pid = r.u16()
            if session.v5:
                r.properties()
            reasons = bytearray()
            while r.more():
                existed = session.filters.pop(r.text(), None) is not None
                reasons.append(_SUCCESS if existed else _NO_SUBSCRIPTION)
            self._ack(session, UNSUBACK, pid, bytes(reasons) if session.v5 else b"")
        elif kind == PINGREQ:
            self._send(session, packet(PINGRESP, 0, b""))
        elif kind == AUTH:
            raise ProtocolError("AUTH without enhanced authentication")
        elif kind not in (PUBACK, PUBREC, PUBCOMP):  # delivery is QoS 0: nothing awaits these
            raise ProtocolError(f"unexpected packet type {kind}")

    def _on_publish(self, session: _Session, flags: int, r: Reader) -> None:
        qos, retain = (flags >> 1) & 0x03, bool(flags & 0x01)
        topic = r.text()
        if not topic or "+" in topic or "#" in topic:
            raise ProtocolError(f"invalid topic name {topic!r}")
        pid = r.u16() if qos else None
        props = r.properties() if session.v5 else ()
        if any(key in (TOPIC_ALIAS, SUBSCRIPTION_ID) for key, _ in props):
            raise ProtocolError("a topic alias or subscription identifier (the CONNACK offered neither)")
        if pid is not None:
            self._send(session, packet(PUBACK if qos == 1 else PUBREC, 0, struct.pack("!H", pid)))
        self._route(_Message(topic, r.rest(), retain, session.client_id, _forwarded(props)))

    def _on_subscribe(self, session: _Session, r: Reader) -> None:
        pid, granted, new = r.u16(), bytearray(), []
        if session.v5 and any(key == SUBSCRIPTION_ID for key, _ in r.properties()):
            raise ProtocolError("a subscription identifier (the CONNACK said they are not available)")
        while r.more():
            topic_filter, options = r.text(), r.u8()
            if topic_filter.startswith("$share/") or not _valid_filter(topic_filter):
                # Shared subscriptions are not offered (its CONNACK says so): refused, as a 3.1.1 broker must.
                shared = topic_filter.startswith("$share/")
                granted.append((_SHARED_NOT_SUPPORTED if shared else _FILTER_INVALID) if session.v5 else 0x80)
                continue
            granted.append(0x00)  # QoS 0 granted
            retain_handling = options >> 4 & 0x03 if session.v5 else 0
            existed = topic_filter in session.filters
            session.filters[topic_filter] = options if session.v5 else 0
            if retain_handling == 0 or (retain_handling == 1 and not existed):
                new.append(topic_filter)
        self._ack(session, SUBACK, pid, bytes(granted))
        for message in self._retained.values():
            if any(topic_matches(f, message.topic) for f in new):
                self._send(session, message.packet(v5=session.v5, retain=True))

    def _route(self, message: _Message) -> None:
        if message.retain:
            if message.payload:
                self._retained[message.topic] = message
            else:
                self._retained.pop(message.topic, None)
        packets: dict[tuple[bool, bool], bytes] = {}  # (v5, retain flag) -> the packet, built once
        for session in self._sessions.values():
            matched = [options for f, options in session.filters.items() if topic_matches(f, message.topic)
                       and not (options & _NO_LOCAL and session.client_id == message.sender)]
            if not matched:
                continue
            # Live delivery clears the retain flag, unless a subscription asked for it as published.
            retain = message.retain and any(options & _RETAIN_AS_PUBLISHED for options in matched)
            key = (session.v5, retain)
            if key not in packets:
                packets[key] = message.packet(v5=session.v5, retain=retain)
            self._send(session, packets[key])


def _forwarded(props: Properties) -> bytes:
    """Return the properties of a PUBLISH (or a will) that its subscribers receive, encoded."""
    return encode(item for item in props if item[0] in MESSAGE_PROPERTIES)
