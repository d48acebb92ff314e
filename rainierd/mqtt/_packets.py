"""The embedded broker's packet codec: MQTT's fixed header, strings and, for
MQTT 5, properties (OASIS MQTT 5.0, section 2.2.2).

Kept apart from the broker's sessions and routing (``broker.py``) because it
is the part a protocol version changes: MQTT 5 adds a properties block to
CONNECT, CONNACK, PUBLISH, the acknowledgements, SUBSCRIBE, UNSUBSCRIBE and
DISCONNECT, and reason codes to SUBACK and UNSUBACK.  Properties are kept as
raw ``(identifier, encoded value)`` pairs, so the broker can read the few it
acts on and pass a message's own on to its subscribers byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15

# MQTT 5 property identifiers the broker reads or writes (section 2.2.2.2).
MAXIMUM_PACKET_SIZE: Final = 0x27
ASSIGNED_CLIENT_ID: Final = 0x12
AUTHENTICATION_METHOD: Final = 0x15
TOPIC_ALIAS: Final = 0x23
SUBSCRIPTION_ID: Final = 0x0B
SUBSCRIPTION_IDS_AVAILABLE: Final = 0x29
SHARED_SUBSCRIPTIONS_AVAILABLE: Final = 0x2A
# What a PUBLISH carries from its sender to its subscribers (section 3.3.2.3): payload format, message expiry,
# content type, response topic, correlation data, user properties.  A will's properties hold these too, and a
# will delay, which is not passed on.
MESSAGE_PROPERTIES: Final = frozenset({0x01, 0x02, 0x03, 0x08, 0x09, 0x26})

# Each property's value type, which says how many bytes it takes.
_BYTE, _U16, _U32, _VARINT, _TEXT, _BINARY, _PAIR = range(7)
_PROPERTY_TYPES: Final[dict[int, int]] = {
    0x01: _BYTE, 0x02: _U32, 0x03: _TEXT, 0x08: _TEXT, 0x09: _BINARY, 0x0B: _VARINT, 0x11: _U32, 0x12: _TEXT,
    0x13: _U16, 0x15: _TEXT, 0x16: _BINARY, 0x17: _BYTE, 0x18: _U32, 0x19: _BYTE, 0x1A: _TEXT, 0x1C: _TEXT,
    0x1F: _TEXT, 0x21: _U16, 0x22: _U16, 0x23: _U16, 0x24: _BYTE, 0x25: _BYTE, 0x26: _PAIR, 0x27: _U32,
    0x28: _BYTE, 0x29: _BYTE, 0x2A: _BYTE,
}

Properties = tuple[tuple[int, bytes], ...]


class ProtocolError(Exception):
    """The peer broke the protocol; its connection is closed."""


def varint(n: int) -> bytes:
    """Return ``n`` as MQTT's variable byte integer."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def packet(kind: int, flags: int, body: bytes) -> bytes:
    """Return a whole packet: fixed header (type, flags, remaining length) and ``body``."""
    return bytes([kind << 4 | flags]) + varint(len(body)) + body


def utf8(s: str) -> bytes:
    """Return ``s`` as a length-prefixed UTF-8 string."""
    raw = s.encode()
    return struct.pack("!H", len(raw)) + raw


def encode(items: Iterable[tuple[int, bytes]]) -> bytes:
    """Return properties as a block's body: each identifier and its encoded value (section 2.2.2.2)."""
    return b"".join(bytes([identifier]) + value for identifier, value in items)


def block(body: bytes = b"") -> bytes:
    """Return an MQTT 5 properties block: its length, then ``body`` (``encode``'s)."""
    return varint(len(body)) + body


def u32(value: int) -> bytes:
    """Return ``value`` encoded as a four-byte integer property value."""
    return struct.pack("!I", value)


class Reader:
    """Reads one packet's body; every overrun is a ``ProtocolError``."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ProtocolError("packet too short")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def varint(self) -> int:
        value = 0
        for shift in range(0, 28, 7):
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise ProtocolError("malformed variable byte integer")

    def blob(self) -> bytes:
        return self.take(self.u16())

    def text(self) -> str:
        try:
            return self.blob().decode()
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8") from None

    def properties(self) -> Properties:
        """Return an MQTT 5 properties block as (identifier, encoded value) pairs."""
        block = Reader(self.take(self.varint()))
        found = []
        while block.more():
            identifier = block.varint()
            kind = _PROPERTY_TYPES.get(identifier)
            start = block.pos
            if kind is None:
                raise ProtocolError(f"unknown property {identifier:#04x}")
            if kind == _VARINT:
                block.varint()
            elif kind in (_TEXT, _BINARY):
                block.blob()
            elif kind == _PAIR:
                block.blob()
                block.blob()
            else:
                block.take({_BYTE: 1, _U16: 2, _U32: 4}[kind])
            found.append((identifier, block.data[start:block.pos]))
        return tuple(found)

    def rest(self) -> bytes:
        return self.data[self.pos:]

    def more(self) -> bool:
        return self.pos < len(self.data)


def value(found: Properties, identifier: int) -> int | None:
    """Return the integer value of property ``identifier`` (a byte, two- or four-byte integer), None if absent."""
    for key, raw in found:
        if key == identifier:
            return int.from_bytes(raw, "big")
    return None
