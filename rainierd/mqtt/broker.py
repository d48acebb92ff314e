"""A small in-process MQTT 3.1.1 broker, so ``rainierd run`` needs no broker
installed.

Why not amqtt: it pins ``websockets`` to one exact version and brings seven
more dependencies (argon2, typer, psutil, ...) to serve what is here a
loopback pipe between two tasks of one process.  This broker implements the
part of MQTT 3.1.1 that pipe needs, and nothing that production needs: CONNECT
(3.1 and 3.1.1), PUBLISH at QoS 0/1/2 in, delivery at QoS 0 out (every
subscription is granted QoS 0), SUBSCRIBE/UNSUBSCRIBE with ``+`` and ``#``,
retained messages, wills, keep-alive and PING.  It listens on loopback only,
on a free port by default, and never on a port another broker holds.
Production uses Mosquitto or a clustered broker (deploy/).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self

import structlog

from rainierd.errors import BrokerError

log = structlog.get_logger("rainierd.mqtt.broker")

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14
_LOOPBACK: Final = ("127.0.0.1", "::1", "localhost")


class _ProtocolError(Exception):
    """The peer broke the protocol; its connection is closed."""


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


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packet(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([kind << 4 | flags]) + _varint(len(body)) + body


def _utf8(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("!H", len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def u8(self) -> int:
        if self.pos >= len(self.data):
            raise _ProtocolError("packet too short")
        self.pos += 1
        return self.data[self.pos - 1]

    def u16(self) -> int:
        return self.u8() << 8 | self.u8()

    def blob(self) -> bytes:
        n = self.u16()
        if self.pos + n > len(self.data):
            raise _ProtocolError("string overruns packet")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def text(self) -> str:
        try:
            return self.blob().decode()
        except UnicodeDecodeError:
            raise _ProtocolError("string is not UTF-8") from None

    def rest(self) -> bytes:
        return self.data[self.pos:]

    def more(self) -> bool:
        return self.pos < len(self.data)


@dataclass(eq=False)
class _Session:
    client_id: str
    writer: asyncio.StreamWriter
    outbox: asyncio.Queue[bytes]
    filters: set[str] = field(default_factory=set)
    will: tuple[str, bytes, bool] | None = None
    keepalive_s: int = 0
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
        self._retained: dict[str, bytes] = {}
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def port(self) -> int:
        """Return the port the broker listens on (known once started)."""
        if self._server is None:
            raise BrokerError("the embedded broker is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> Self:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self._port)
        except OSError as exc:
            raise BrokerError(f"cannot listen on {self.host}:{self._port}: {exc.strerror}") from exc
        log.info("embedded broker listening", host=self.host, port=self.port)
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
        except* (_ProtocolError, ConnectionError, asyncio.IncompleteReadError, TimeoutError) as group:
            log.debug("embedded broker dropped a client", error=str(group.exceptions[0]))
        finally:
            del self._connections[task]
            if session is not None and self._sessions.get(session.client_id) is session:
                del self._sessions[session.client_id]
                if not clean_exit and session.will is not None:
                    self._route(*session.will)
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
            raise _ProtocolError("malformed remaining length")
        if length > self.max_packet_bytes:
            raise _ProtocolError(f"packet of {length} bytes exceeds {self.max_packet_bytes}")
        return first >> 4, first & 0x0F, await reader.readexactly(length)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> _Session | None:
        async with asyncio.timeout(10.0):
            kind, _flags, body = await self._read_packet(reader)
        if kind != CONNECT:
            raise _ProtocolError("first packet is not CONNECT")
        r = _Reader(body)
        protocol, level = r.text(), r.u8()
        if (protocol, level) not in (("MQTT", 4), ("MQIsdp", 3)):
            writer.write(_packet(CONNACK, 0, b"\x00\x01"))  # unacceptable protocol version
            return None
        flags, keepalive = r.u8(), r.u16()
        client_id = r.text() or f"anonymous-{id(writer):x}"
        will = None
        if flags & 0x04:
            will = (r.text(), r.blob(), bool(flags & 0x20))
        if flags & 0x80:
            r.text()  # username: the loopback broker does not authenticate
        if flags & 0x40:
            r.blob()
        if (old := self._sessions.pop(client_id, None)) is not None:
            old.writer.close()  # MQTT 3.1.4-2: a second connection takes over the id
        session = _Session(
            client_id, writer, asyncio.Queue(self.outbox_messages), will=will, keepalive_s=keepalive,
        )
        self._sessions[client_id] = session
        writer.write(_packet(CONNACK, 0, b"\x00\x00"))
        return session

    async def _session_loop(self, session: _Session, reader: asyncio.StreamReader) -> bool:
        idle_limit = session.keepalive_s * 1.5 if session.keepalive_s else None
        async with asyncio.TaskGroup() as tg:
            sender = tg.create_task(self._send_loop(session), name=f"broker-send-{session.client_id}")
            try:
                while True:
                    async with asyncio.timeout(idle_limit):
                        kind, flags, body = await self._read_packet(reader)
                    if kind == DISCONNECT:
                        return True
                    self._handle(session, kind, flags, body)
            finally:
                sender.cancel()

    async def _send_loop(self, session: _Session) -> None:
        while True:
            session.writer.write(await session.outbox.get())
            while not session.outbox.empty():
                session.writer.write(session.outbox.get_nowait())
            await session.writer.drain()

    def _send(self, session: _Session, packet: bytes) -> None:
        try:
            session.outbox.put_nowait(packet)
        except asyncio.QueueFull:
            session.dropped += 1
            if session.dropped in (1, 1_000, 1_000_000):
                log.warning("embedded broker dropping for a slow client",
                            client=session.client_id, dropped=session.dropped)

    def _handle(self, session: _Session, kind: int, flags: int, body: bytes) -> None:
        r = _Reader(body)
        if kind == PUBLISH:
            self._on_publish(session, flags, r)
        elif kind == PUBREL:
            self._send(session, _packet(PUBCOMP, 0, struct.pack("!H", r.u16())))
        elif kind == SUBSCRIBE:
            self._on_subscribe(session, r)
        elif kind == UNSUBSCRIBE:
            pid = r.u16()
            while r.more():
                session.filters.discard(r.text())
            self._send(session, _packet(UNSUBACK, 0, struct.pack("!H", pid)))
        elif kind == PINGREQ:
            self._send(session, _packet(PINGRESP, 0, b""))
        elif kind not in (PUBACK, PUBREC, PUBCOMP):  # delivery is QoS 0: nothing awaits these
            raise _ProtocolError(f"unexpected packet type {kind}")

    def _on_publish(self, session: _Session, flags: int, r: _Reader) -> None:
        qos, retain = (flags >> 1) & 0x03, bool(flags & 0x01)
        topic = r.text()
        if not topic or "+" in topic or "#" in topic:
            raise _ProtocolError(f"invalid topic name {topic!r}")
        if qos == 1:
            self._send(session, _packet(PUBACK, 0, struct.pack("!H", r.u16())))
        elif qos == 2:
            self._send(session, _packet(PUBREC, 0, struct.pack("!H", r.u16())))
        self._route(topic, r.rest(), retain)

    def _on_subscribe(self, session: _Session, r: _Reader) -> None:
        pid, granted, new = r.u16(), bytearray(), []
        while r.more():
            topic_filter, _qos = r.text(), r.u8()
            ok = _valid_filter(topic_filter)
            granted.append(0x00 if ok else 0x80)
            if ok:
                session.filters.add(topic_filter)
                new.append(topic_filter)
        self._send(session, _packet(SUBACK, 0, struct.pack("!H", pid) + bytes(granted)))
        for topic, payload in self._retained.items():
            if any(topic_matches(f, topic) for f in new):
                self._send(session, _packet(PUBLISH, 0x01, _utf8(topic) + payload))

    def _route(self, topic: str, payload: bytes, retain: bool) -> None:
        if retain:
            if payload:
                self._retained[topic] = payload
            else:
                self._retained.pop(topic, None)
        packet = _packet(PUBLISH, 0, _utf8(topic) + payload)
        for session in self._sessions.values():
            if any(topic_matches(f, topic) for f in session.filters):
                self._send(session, packet)
