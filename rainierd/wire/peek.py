"""What a telemetry payload says of itself, read before it is decoded: its
encoding, kind, entity, publishers and sample time, for a receiver that must
decide in a microsecond or two whose share a message is charged to
(``rainierd.admission``: the monitor's inbox, an aggregator).

A binary frame's header is checked whole (``binary.read_head``): what fails
it would fail decoding for the same reason, so it is refused at once.  A
JSON frame cannot be checked that cheaply (pydantic's validation is the
decoding), so only what its first ``JSON_PREFIX_BYTES`` bytes say plainly
is read: ``"publisher"``, ``"t_s"``, ``"node"``, ``"site"`` and ``"kind"``
as keys of the top-level object, with a plain string or number value.
rainierd's own encoder writes them first; a frame whose keys come later, or
whose publisher id is escaped, reads as unknown (its share is then the
unconfirmed one, never the node's).  Being read is not being believed: a
key found inside a nested object, or a payload that is not JSON at all past
its prefix, is refused by the decoding as before; what the peek can get
wrong costs a frame its place in the queue, never its judgement.
"""

from __future__ import annotations

import math
import re
from typing import Final, NamedTuple

from rainierd.errors import FrameError
from rainierd.wire.binary import KIND_BATCH, KIND_FACILITY, KIND_NODE, MAGIC, read_head

JSON_PREFIX_BYTES: Final = 512
"""How much of a JSON frame is read for its publisher and sample time (rainierd's encoder puts them in the first
~200 bytes: a 128-byte publisher id, its seq, tick and sample time)."""
_KINDS: Final = {KIND_NODE: "node", KIND_FACILITY: "facility", KIND_BATCH: "batch"}
# A key of the frame, then a plain string (no escapes, at most a publisher id's 128 bytes) or a number.
_JSON_FIELD: Final = re.compile(rb'"(publisher|t_s|node|site|kind)"[ \t\r\n]*:[ \t\r\n]*'
                                rb'(?:"([^"\\]{1,128})"|(-?[0-9][0-9.eE+-]{0,30}))')


_new_peek: Final = tuple.__new__


class Peek(NamedTuple):
    """What a payload says of itself (unknown: ``""``, ``-1``, ``()``, NaN)."""

    encoding: str  # "binary" or "json"
    kind: str  # "node", "facility", "batch", or "" (not read)
    entity: int  # the node (node frame) or the site (facility or batch frame); -1: not read
    publishers: tuple[str, ...]  # whose streams it carries: a frame's publisher, a batch's entries'; (): not read
    t_s: float  # its sample time (a batch's: when it was sent); NaN: not read


def peek(payload: bytes) -> Peek:
    """Return what ``payload`` says of itself, its binary header checked.

    Raises FrameError for an empty payload (``empty``), one that is neither
    JSON nor binary (``unknown_encoding``), and a binary header the decoder
    would refuse, by the decoder's reason (``binary.read_head``).
    """
    first = payload[:1]
    if first == MAGIC[:1]:
        kind, entity, publisher, _seq, t_s, publishers = read_head(payload)
        # tuple.__new__: a third of Peek(...)'s cost, and this runs for every message a receiver reads.
        return _new_peek(Peek, ("binary", _KINDS[kind], entity, publishers or (publisher,), t_s))
    if first == b"{":
        return _peek_json(payload)
    if not payload:
        raise FrameError("empty", "empty payload")
    raise FrameError("unknown_encoding", f"first byte {first!r} is neither '{{' nor 'R'")


def _peek_json(payload: bytes) -> Peek:
    """Return what a JSON frame's first bytes say plainly; never raises (the decoding judges it)."""
    found: dict[bytes, bytes] = {}
    for match in _JSON_FIELD.finditer(payload, 0, JSON_PREFIX_BYTES):
        key = match[1]
        if key in found:  # a key twice: the decoding refuses it (bad_json); nothing here is believed
            return Peek("json", "", -1, (), math.nan)
        found[key] = match[2] if match[2] is not None else match[3]
    kind = found.get(b"kind", b"").decode("ascii", "replace")
    entity = _integer(found.get(b"site" if kind == "facility" else b"node"))
    publisher = found.get(b"publisher")
    try:
        publishers = (publisher.decode(),) if publisher is not None else ()
    except UnicodeDecodeError:
        publishers = ()
    t_s = _number(found.get(b"t_s"))
    return Peek("json", kind if kind in ("node", "facility") else "", entity, publishers, t_s)


def _integer(text: bytes | None) -> int:
    return int(text) if text is not None and text.isdigit() and len(text) <= 10 else -1


def _number(text: bytes | None) -> float:
    if text is None:
        return math.nan
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan
