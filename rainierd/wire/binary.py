"""The compact binary frame: a versioned fixed header, the publisher id, then
the sample records as little-endian numpy arrays, back to back.

Layout (docs/wire-format.md has the table)::

    magic "RNRW" | version u8 | kind u8 | flags u16 | seq u64 | tick u64 |
    t_s f64 | entity u32 | n_chips u16 | n_links u16 | n_efa u16 | n_aux u16 |
    publisher_len u16 | publisher (UTF-8) | chips | links | efa | aux

``kind`` 1 is a node frame (``entity`` the node id, ``aux`` its cooling record),
2 a facility frame (``entity`` the site id, ``aux`` its facility record).

``kind`` 3 is a batch frame: many nodes of one site, column by column, so a
monitor turns a whole batch into arrays with a few ``frombuffer`` calls and
no Python per record (docs/wire-format.md has its layout)::

    magic | version u8 | kind u8 = 3 | flags u16 | seq u64 | tick u64 | t_s f64 |
    site u32 | n_nodes u32 | n_chips u32 | n_links u32 | n_efa u32 | n_cooling u32 |
    chip_fields u16 | link_fields u16 | efa_fields u16 | cooling_fields u16 |
    publisher_len u16 | publisher | pad to 8 |
    node u32[n] | node_seq u64[n] | node_tick u64[n] | node_t_s f64[n] |
    chips u16[n] | links u16[n] | efa u16[n] | cooling u8[n] |
    [node_publisher u16[n], with flag 1] |
    one column per present field of each record kind, in dtype order |
    [with flag 2, per record kind: known u16[records], bit i: the record's field i has a value] |
    [publisher table, with flag 1: count u16, then count x (length u8, UTF-8)]

Every column starts on a multiple of 8 bytes from the start of the payload.
Flag 1 (``FLAG_NODE_PUBLISHERS``) gives each entry its own publisher: an
aggregation tier batches many agents' frames, and each keeps the publisher
id its agent numbered it under, so the monitor's accounting per (publisher,
node) is the same as if the frame had come alone.
Flag 2 (``FLAG_RECORD_KNOWN``) marks fields unknown record by record: a
bridge whose source lacks one port's latency, or a GPU-style counter missing
on one chip, sends that record's bit clear (and a finite placeholder, 0, in
its column), as JSON leaves the key out.  Without it, a column's presence
(the batch's field masks) is every record's; batches without the flag decode
exactly as before it existed.
Decoding copies nothing: records and columns are read-only views of the payload.
``decode_binary(payload, columns=False)`` goes further for a batch: it checks
the header and returns a ``RawBatch`` (the header and where each column lies,
a layout shared by every batch of the same shape) with no per-column object
at all, so a monitor can copy each column of a whole window from the payloads
in one call (``core/ingest/_window.py``).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from rainierd.errors import FrameError
from rainierd.wire.records import (
    FACILITY_DTYPE,
    ID_FIELDS,
    NODE_FRAME_DTYPES,
    RECORD_DTYPES,
    RECORD_KINDS,
    WIRE_VERSION,
    FacilityFrame,
    Frame,
    NodeBatch,
    NodeFrame,
    column_dtypes,
    float_fields,
)

MAGIC: Final = b"RNRW"
HEADER: Final = struct.Struct("<4sBBHQQdIHHHHH")
BATCH_HEADER: Final = struct.Struct("<4sBBHQQdIIIIIIHHHHH")
KIND_NODE: Final = 1
KIND_FACILITY: Final = 2
KIND_BATCH: Final = 3
MAX_PUBLISHER_BYTES: Final = 128
MAX_BATCH_NODES: Final = 4_096
FLAG_NODE_PUBLISHERS: Final = 0x0001
FLAG_RECORD_KNOWN: Final = 0x0002
_FLAGS: Final = FLAG_NODE_PUBLISHERS | FLAG_RECORD_KNOWN
_KNOWN: Final = np.dtype("<u2")
_PUBLISHER_INDEX: Final = np.dtype("<u2")
_NODE_COLUMNS: Final[tuple[tuple[str, np.dtype[Any]], ...]] = (
    ("node", np.dtype("<u4")), ("node_seq", np.dtype("<u8")), ("node_tick", np.dtype("<u8")),
    ("node_t_s", np.dtype("<f8")),
)
_COUNT_DTYPES: Final[dict[str, np.dtype[Any]]] = {
    "chips": np.dtype("<u2"), "links": np.dtype("<u2"), "efa": np.dtype("<u2"), "cooling": np.dtype("u1"),
}
ENTRY_DTYPES: Final = dict(_NODE_COLUMNS)
"""A batch frame's per-entry columns and their wire dtypes."""
COUNT_DTYPES: Final = _COUNT_DTYPES
"""A batch frame's per-entry record counts, by record kind, and their wire dtypes."""
_COLUMNS: Final = {kind: column_dtypes(dtype) for kind, dtype in RECORD_DTYPES.items()}
# Upper bounds on record counts in one frame: a node has 16 chips, 48 links
# and at most 64 EFA ports; the slack admits other node shapes, not garbage.
_MAX_COUNTS: Final = {KIND_NODE: (64, 256, 64, 1), KIND_FACILITY: (0, 0, 0, 1)}
# A node or facility frame's records are wire version 1's layouts (NODE_FRAME_DTYPES): fields added to a
# record since travel in JSON and batch frames only.
_NODE_DTYPES: Final[tuple[np.dtype[Any], ...]] = tuple(NODE_FRAME_DTYPES[kind] for kind in RECORD_KINDS)
_FACILITY_DTYPES: Final[tuple[np.dtype[Any], ...]] = (*_NODE_DTYPES[:3], FACILITY_DTYPE)
_NODE_SIZES: Final = tuple(dt.itemsize for dt in _NODE_DTYPES)
_FACILITY_SIZES: Final = tuple(dt.itemsize for dt in _FACILITY_DTYPES)
MAX_NODE_COUNTS: Final = dict(zip(RECORD_KINDS, _MAX_COUNTS[KIND_NODE], strict=True))
"""Records of each kind one node entry may carry (a node frame's, or a batch entry's)."""
_FLOATS: Final = {
    dt.str: float_fields(dt) for dt in (*RECORD_DTYPES.values(), *NODE_FRAME_DTYPES.values(), FACILITY_DTYPE)
}


def finite_mask(records: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    """Return, per record, whether every float field is finite."""
    ok = np.ones(records.shape, dtype=bool)
    for field_name in _FLOATS[records.dtype.str]:
        ok &= np.isfinite(records[field_name])
    return ok


def _check_finite(name: str, records: npt.NDArray[np.void]) -> None:
    for field_name in _FLOATS[records.dtype.str]:
        if not np.isfinite(records[field_name]).all():
            raise FrameError("non_finite", f"{name}.{field_name} holds NaN or infinity")


def _padded(n: int) -> int:
    return -n % 8


def _field_mask(kind: str, present: Mapping[str, object]) -> int:
    return sum(1 << i for i, name in enumerate(_COLUMNS[kind]) if name in present)


def encode_batch(batch: NodeBatch) -> bytes:
    """Return the binary encoding of a batch frame (one copy of every column)."""
    publisher = batch.publisher.encode()
    totals = [int(batch.counts[kind].sum(dtype=np.int64)) for kind in RECORD_KINDS]
    flags = (0 if batch.node_publisher is None else FLAG_NODE_PUBLISHERS) | (
        0 if batch.known is None else FLAG_RECORD_KNOWN)
    masks = [_field_mask(kind, batch.columns[kind]) for kind in RECORD_KINDS]
    header = BATCH_HEADER.pack(
        MAGIC, WIRE_VERSION, KIND_BATCH, flags, batch.seq, batch.tick, batch.t_s, batch.site, batch.n_nodes,
        *totals, *masks, len(publisher),
    )
    parts: list[bytes | memoryview] = [header, publisher]
    size = len(header) + len(publisher)

    def column(values: npt.NDArray[Any], dtype: np.dtype[Any]) -> None:
        nonlocal size
        if pad := _padded(size):
            parts.append(bytes(pad))
            size += pad
        array = np.ascontiguousarray(values, dtype=dtype)
        parts.append(array.data.cast("B"))
        size += array.nbytes

    for name, dtype in _NODE_COLUMNS:
        column(getattr(batch, name), dtype)
    for kind in RECORD_KINDS:
        column(batch.counts[kind], _COUNT_DTYPES[kind])
    if batch.node_publisher is not None:
        column(batch.node_publisher, _PUBLISHER_INDEX)
    for kind in RECORD_KINDS:
        for name, dtype in _COLUMNS[kind].items():
            if name in batch.columns[kind]:
                column(batch.columns[kind][name], dtype)
    if batch.known is not None:
        for kind, mask, total in zip(RECORD_KINDS, masks, totals, strict=True):
            known = batch.known.get(kind)
            column(np.full(total, mask, _KNOWN) if known is None else np.asarray(known) & mask, _KNOWN)
    if batch.node_publisher is not None:
        names = [name.encode() for name in batch.publishers]
        parts.append(struct.pack("<H", len(names)))
        parts += [bytes((len(name),)) + name for name in names]
    return b"".join(parts)


_Placed = tuple[tuple[str, str, np.dtype[Any], int, int], ...]


@dataclass(frozen=True, eq=False)
class BatchLayout:
    """Where each column of a batch of one shape lies: ``spans[(group, name)]`` is its (start, end) byte.

    ``group`` is ``node`` (the entry columns), ``counts`` (``name`` a record
    kind), or a record kind; a column the field masks leave out has no span.
    """

    placed: _Placed  # (group, name, dtype, count, offset) in payload order
    end: int  # the payload's length
    spans: Mapping[tuple[str, str], tuple[int, int]]


class BatchHead(NamedTuple):
    """A batch frame's header, checked (``decode_binary(..., columns=False)``)."""

    publisher: str
    seq: int
    tick: int
    t_s: float
    site: int
    n_nodes: int
    totals: tuple[int, ...]  # records of each kind (RECORD_KINDS order) in the whole batch
    masks: tuple[int, ...]  # which fields each kind's columns carry
    layout: BatchLayout
    flags: int = 0
    publishers: tuple[str, ...] = ()  # with FLAG_NODE_PUBLISHERS: the table each entry's publisher indexes


@dataclass(frozen=True, eq=False, slots=True)
class RawBatch:
    """A batch frame whose header is checked and whose columns are still where they arrived, in ``payload``.

    Its per-node counts are not yet checked against the header's totals
    (``bad_header``): the reader of the columns does it for many batches at
    once.
    """

    head: BatchHead
    payload: bytes

    @property
    def n_nodes(self) -> int:
        """Return how many node frames the batch carries."""
        return self.head.n_nodes

    @property
    def publisher(self) -> str:
        """Return the batch's publisher (aggregator) id."""
        return self.head.publisher

    @property
    def site(self) -> int:
        """Return the site every node of the batch belongs to."""
        return self.head.site

    @property
    def publishers(self) -> tuple[str, ...]:
        """Return the publisher table of an aggregator's batch (empty: every entry is ``publisher``'s)."""
        return self.head.publishers

    def known(self, kind: str) -> npt.NDArray[np.uint16] | None:
        """Return each ``kind`` record's known bits (unchecked: ``check_known``), or None without flag 2."""
        if not self.head.flags & FLAG_RECORD_KNOWN:
            return None
        start, _stop = self.head.layout.spans["known", kind]
        return np.frombuffer(self.payload, _KNOWN, count=self.head.totals[RECORD_KINDS.index(kind)], offset=start)

    @property
    def node_publisher(self) -> npt.NDArray[np.uint16] | None:
        """Return each entry's publisher, an index into ``publishers`` (checked in range), or None."""
        if not self.head.flags & FLAG_NODE_PUBLISHERS:
            return None
        start, _stop = self.head.layout.spans["node", "node_publisher"]
        return np.frombuffer(self.payload, _PUBLISHER_INDEX, count=self.n_nodes, offset=start)


def _check_batch_header(n_nodes: int, totals: dict[str, int], masks: dict[str, int], pub_len: int) -> None:
    if pub_len > MAX_PUBLISHER_BYTES or n_nodes > MAX_BATCH_NODES:
        raise FrameError("bad_header", f"{n_nodes} nodes or publisher length {pub_len} out of range")
    for kind in RECORD_KINDS:
        if totals[kind] > MAX_NODE_COUNTS[kind] * n_nodes:
            raise FrameError("bad_header", f"{totals[kind]} {kind} records for {n_nodes} nodes")
        if masks[kind] >> len(_COLUMNS[kind]):
            raise FrameError("bad_header", f"{kind} field mask {masks[kind]:#x} names unknown fields")
        id_field = ID_FIELDS[kind]
        if id_field is not None and not masks[kind] & 1:
            raise FrameError("bad_header", f"{kind} records lack their {id_field} column")


@functools.lru_cache(maxsize=256)
def batch_layout(
    n_nodes: int, totals: tuple[int, ...], masks: tuple[int, ...], pub_len: int, flags: int = 0,
) -> BatchLayout:
    """Return where each column of a batch of this shape starts, and where its columns end (a publisher table
    may follow them).

    Cached: an aggregator sends batches of one shape tick after tick.
    """
    layout: list[tuple[str, str, np.dtype[Any], int]] = [("node", name, dt, n_nodes) for name, dt in _NODE_COLUMNS]
    layout += [("counts", kind, _COUNT_DTYPES[kind], n_nodes) for kind in RECORD_KINDS]
    if flags & FLAG_NODE_PUBLISHERS:
        layout.append(("node", "node_publisher", _PUBLISHER_INDEX, n_nodes))
    for kind, total, mask in zip(RECORD_KINDS, totals, masks, strict=True):
        layout += [(kind, name, dt, total) for i, (name, dt) in enumerate(_COLUMNS[kind].items()) if mask >> i & 1]
    if flags & FLAG_RECORD_KNOWN:
        layout += [("known", kind, _KNOWN, total) for kind, total in zip(RECORD_KINDS, totals, strict=True)]
    offset = BATCH_HEADER.size + pub_len
    placed = []
    spans = {}
    for group, name, dtype, count in layout:
        offset += _padded(offset)
        placed.append((group, name, dtype, count, offset))
        spans[group, name] = (offset, offset + count * dtype.itemsize)
        offset += count * dtype.itemsize
    return BatchLayout(tuple(placed), offset, spans)


def _publisher_table(payload: bytes, at: int, n_nodes: int) -> tuple[tuple[str, ...], int]:
    """Return the publisher table that starts at ``at``, and where it ends."""
    if len(payload) < at + 2:
        raise FrameError("truncated", f"{len(payload)} bytes, the publisher table starts at {at}")
    (count,) = struct.unpack_from("<H", payload, at)
    if not 1 <= count <= max(n_nodes, 1):
        raise FrameError("bad_header", f"a publisher table of {count} for {n_nodes} nodes")
    at += 2
    names: list[str] = []
    for _ in range(count):
        if len(payload) <= at:
            raise FrameError("truncated", f"{len(payload)} bytes, publisher table entry {len(names)} at {at}")
        length = payload[at]
        if not 1 <= length <= MAX_PUBLISHER_BYTES:
            raise FrameError("bad_header", f"publisher table entry {len(names)} is {length} bytes long")
        if len(payload) < at + 1 + length:
            raise FrameError("truncated", f"{len(payload)} bytes, publisher table entry {len(names)} at {at}")
        try:
            names.append(payload[at + 1:at + 1 + length].decode())
        except UnicodeDecodeError:
            raise FrameError("bad_header", "a publisher id of the table is not UTF-8") from None
        at += 1 + length
    return tuple(names), at


def _batch_head(payload: bytes) -> BatchHead:
    """Return a kind-3 payload's header, checked against the payload's length (no record column is read)."""
    if len(payload) < BATCH_HEADER.size:
        raise FrameError("truncated", f"{len(payload)} bytes is shorter than the {BATCH_HEADER.size}-byte header")
    (_magic, _version, _kind, flags, seq, tick, t_s, site, n_nodes, *rest) = BATCH_HEADER.unpack_from(payload)
    if flags & ~_FLAGS:
        raise FrameError("bad_header", f"batch flags {flags:#x} name unknown features")
    totals, masks, pub_len = tuple(rest[:4]), tuple(rest[4:8]), rest[8]
    _check_batch_header(n_nodes, dict(zip(RECORD_KINDS, totals, strict=True)),
                        dict(zip(RECORD_KINDS, masks, strict=True)), pub_len)
    if not math.isfinite(t_s):  # a Python float from the header: math's check, a numpy scalar call's fraction
        raise FrameError("non_finite", "t_s is not finite")
    try:
        publisher = payload[BATCH_HEADER.size:BATCH_HEADER.size + pub_len].decode()
    except UnicodeDecodeError:
        raise FrameError("bad_header", "publisher id is not UTF-8") from None
    layout = batch_layout(n_nodes, totals, masks, pub_len, flags)
    if len(payload) < layout.end:
        raise FrameError("truncated", f"{len(payload)} bytes, header announces {layout.end}")
    end = layout.end
    publishers: tuple[str, ...] = ()
    if flags & FLAG_NODE_PUBLISHERS:
        publishers, end = _publisher_table(payload, end, n_nodes)
        start, _stop = layout.spans["node", "node_publisher"]
        named = np.frombuffer(payload, _PUBLISHER_INDEX, count=n_nodes, offset=start)
        if named.size and int(named.max()) >= len(publishers):
            raise FrameError("bad_header", f"an entry names publisher {int(named.max())} of {len(publishers)}")
    if len(payload) > end:
        raise FrameError("trailing_bytes", f"{len(payload) - end} bytes after the last column")
    return BatchHead(publisher, seq, tick, t_s, site, n_nodes, totals, masks, layout, flags, publishers)


def _decode_batch(payload: bytes) -> NodeBatch:
    """Return the batch a kind-3 payload encodes (views of the payload)."""
    head = _batch_head(payload)
    groups: dict[str, dict[str, npt.NDArray[Any]]] = {group: {} for group in ("node", "counts", "known",
                                                                               *RECORD_KINDS)}
    for group, name, dtype, count, at in head.layout.placed:
        groups[group][name] = np.frombuffer(payload, dtype=dtype, count=count, offset=at)
    counts, nodes = groups["counts"], groups["node"]
    for kind, total in zip(RECORD_KINDS, head.totals, strict=True):
        if int(counts[kind].sum(dtype=np.int64)) != total or (counts[kind] > MAX_NODE_COUNTS[kind]).any():
            raise FrameError("bad_header", f"per-node {kind} counts disagree with the header")
    known = groups["known"] or None
    if known is not None:
        for kind, mask in zip(RECORD_KINDS, head.masks, strict=True):
            check_known(kind, known[kind], mask)
    return NodeBatch(head.publisher, head.seq, head.tick, head.t_s, head.site, nodes["node"], nodes["node_seq"],
                     nodes["node_tick"], nodes["node_t_s"], counts, {kind: groups[kind] for kind in RECORD_KINDS},
                     known=known, node_publisher=nodes.get("node_publisher"), publishers=head.publishers)


def check_known(kind: str, known: npt.NDArray[np.uint16], mask: int) -> None:
    """Check a batch's per-record known bits of ``kind`` against its field ``mask``.

    A bit may be set only for a column the batch carries, and a record must
    know its id.  Raises FrameError("bad_header") otherwise.
    """
    if not known.size:
        return
    id_bit = 1 if ID_FIELDS[kind] is not None else 0
    spare = int(np.bitwise_or.reduce(known)) & ~mask
    if spare or not bool((known & id_bit == id_bit).all()):
        what = f"names fields {spare:#x} the batch does not carry" if spare else "leaves a record's id unknown"
        raise FrameError("bad_header", f"{kind} per-record known bits {what}")


def _node_frame_records(frame: NodeFrame, kind: str) -> npt.NDArray[np.void]:
    """Return a node frame's records of ``kind`` in the binary node frame's layout (``NODE_FRAME_DTYPES``).

    Raises ValueError when a record lacks a field of that layout (zeros would claim values nobody sent) or
    carries one the layout has not (it would be lost).
    """
    records: npt.NDArray[np.void] = getattr(frame, kind)
    layout = NODE_FRAME_DTYPES[kind]
    names = layout.names or ()
    known = (frame.known or {}).get(kind)
    if known is not None and known.size:
        own = (1 << len(records.dtype.names or ())) - 1
        want = (1 << len(names)) - 1
        if not bool(((known & np.uint16(own)) == want).all()):
            raise ValueError(f"a binary node frame's {kind} records carry exactly the fields {', '.join(names)}: "
                             "send other telemetry as JSON or a batch frame")
    if records.dtype == layout:
        return records
    out = np.zeros(records.size, layout)
    for name in names:
        out[name] = records[name]
    return out


def encode_binary(frame: Frame) -> bytes:
    """Return the binary encoding of a frame.

    Raises ValueError for a node frame the binary layout cannot carry whole (``_node_frame_records``).
    """
    if isinstance(frame, NodeBatch):
        return encode_batch(frame)
    publisher = frame.publisher.encode()
    if isinstance(frame, NodeFrame):
        kind, entity = KIND_NODE, frame.node
        parts = tuple(_node_frame_records(frame, k) for k in RECORD_KINDS)
        dtypes = _NODE_DTYPES
    else:
        kind, entity = KIND_FACILITY, frame.site
        parts = (*(np.zeros(0, dt) for dt in _FACILITY_DTYPES[:3]), frame.facility)
        dtypes = _FACILITY_DTYPES
    header = HEADER.pack(
        MAGIC, WIRE_VERSION, kind, 0, frame.seq, frame.tick, frame.t_s, entity,
        *(len(p) for p in parts), len(publisher),
    )
    body = b"".join(np.ascontiguousarray(p, dtype=dt).tobytes() for p, dt in zip(parts, dtypes, strict=True))
    return header + publisher + body


@functools.lru_cache(maxsize=16)
def node_frame_dtype(publisher_bytes: int, n_chips: int, n_links: int, n_efa: int) -> np.dtype[np.void]:
    """Return a record dtype whose bytes are exactly one binary node frame of this shape (header, publisher,
    then the records), so a publisher can encode many nodes' frames in one numpy pass: fill an array of
    it field by field, then slice its buffer per node (``rainierd.sim.packed``).

    The header's fields carry ``HEADER``'s names in its order; ``publisher`` is ``publisher_bytes`` long.
    """
    names = ("magic", "version", "kind", "flags", "seq", "tick", "t_s", "entity", "n_chips", "n_links", "n_efa",
             "n_aux", "publisher_len")
    header = [(name, np.dtype(code)) for name, code in zip(names, ("S4", "u1", "u1", "<u2", "<u8", "<u8", "<f8",
                                                                    "<u4", "<u2", "<u2", "<u2", "<u2", "<u2"),
                                                          strict=True)]
    chips, links, efa, cooling = _NODE_DTYPES
    dtype = np.dtype([*header, ("publisher", f"S{publisher_bytes}"), ("chips", chips, (n_chips,)),
                      ("links", links, (n_links,)), ("efa", efa, (n_efa,)), ("cooling", cooling, (1,))])
    assert dtype.itemsize == (HEADER.size + publisher_bytes + n_chips * chips.itemsize
                              + n_links * links.itemsize + n_efa * efa.itemsize + cooling.itemsize)
    return dtype


def _check_preamble(payload: bytes) -> None:
    """Check the 8 bytes every binary frame starts with: magic, version, kind, flags."""
    if len(payload) < 8:
        raise FrameError("truncated", f"{len(payload)} bytes is shorter than the 8-byte preamble")
    if payload[:4] != MAGIC:
        raise FrameError("bad_magic", f"magic {payload[:4]!r} is not {MAGIC!r}")
    if payload[4] != WIRE_VERSION:
        raise FrameError("bad_version", f"wire version {payload[4]} is not {WIRE_VERSION}")


def _frame_layout(
    payload: bytes,
) -> tuple[int, int, int, float, int, str, tuple[int, ...], tuple[np.dtype[Any], ...], int]:
    """Check a node or facility frame's header and length; return (kind, seq, tick, t_s, entity, publisher,
    record counts, record dtypes, where the records start)."""
    if len(payload) < HEADER.size:
        raise FrameError("truncated", f"{len(payload)} bytes is shorter than the {HEADER.size}-byte header")
    (_magic, _version, kind, _flags, seq, tick, t_s, entity,
     n_chips, n_links, n_efa, n_aux, pub_len) = HEADER.unpack_from(payload)
    limits = _MAX_COUNTS.get(kind)
    if limits is None:
        raise FrameError("bad_kind", f"frame kind {kind} is unknown")
    if (pub_len > MAX_PUBLISHER_BYTES or n_chips > limits[0] or n_links > limits[1] or n_efa > limits[2]
            or n_aux > limits[3]):
        raise FrameError("bad_header", f"counts {(n_chips, n_links, n_efa, n_aux)} or publisher length {pub_len} "
                                       "out of range")
    if not math.isfinite(t_s):
        raise FrameError("non_finite", "t_s is not finite")
    node = kind == KIND_NODE
    sizes = _NODE_SIZES if node else _FACILITY_SIZES
    offset = HEADER.size + pub_len
    expected = offset + n_chips * sizes[0] + n_links * sizes[1] + n_efa * sizes[2] + n_aux * sizes[3]
    if len(payload) < expected:
        raise FrameError("truncated", f"{len(payload)} bytes, header announces {expected}")
    if len(payload) > expected:
        raise FrameError("trailing_bytes", f"{len(payload) - expected} bytes after the last record")
    try:
        publisher = payload[HEADER.size:offset].decode()
    except UnicodeDecodeError:
        raise FrameError("bad_header", "publisher id is not UTF-8") from None
    return (kind, seq, tick, t_s, entity, publisher, (n_chips, n_links, n_efa, n_aux),
            _NODE_DTYPES if node else _FACILITY_DTYPES, offset)


def node_frame_head(payload: bytes) -> tuple[str, int, int, float, int, tuple[int, ...], int]:
    """Return a binary node frame's (publisher, seq, tick, t_s, node, record counts, where its records start),
    checked as ``decode_binary`` checks it but for its floats; its records follow one kind after another
    (chips, links, EFA, cooling) in ``NODE_FRAME_DTYPES``' layouts.

    An aggregator moves records between frames whole, never by the record.

    Raises FrameError as ``decode_binary`` does, and bad_kind for anything but a node frame.
    """
    _check_preamble(payload)
    if payload[5] != KIND_NODE:
        raise FrameError("bad_kind", f"frame kind {payload[5]} is not a node frame")
    _kind, seq, tick, t_s, node, publisher, counts, _dtypes, offset = _frame_layout(payload)
    return publisher, seq, tick, t_s, node, counts, offset


class Head(NamedTuple):
    """What a binary frame's header says, checked as ``decode_binary`` checks it (``read_head``)."""

    kind: int  # KIND_NODE, KIND_FACILITY or KIND_BATCH
    entity: int  # the node (a node frame) or the site (a facility or batch frame)
    publisher: str  # the frame's publisher (a batch's: its aggregator)
    seq: int
    t_s: float
    publishers: tuple[str, ...] = ()  # a batch's entry publishers (FLAG_NODE_PUBLISHERS), else none


_new_head: Final = tuple.__new__


def read_head(payload: bytes) -> Head:
    """Return a binary frame's header, checked against the payload's length, reading no record.

    A receiver's admission reads it for every message before any decoding
    (``rainierd.admission``); what it refuses, ``decode_binary`` would refuse
    for the same reason.  Left to the decoding: the records' floats
    (``non_finite``), and a batch's per-node counts against its totals
    (``bad_header``).

    Raises FrameError with reason truncated, bad_magic, bad_version, bad_kind, bad_header, trailing_bytes, or
    non_finite (its sample time).
    """
    _check_preamble(payload)
    if payload[5] == KIND_BATCH:
        head = _batch_head(payload)
        return _new_head(Head, (KIND_BATCH, head.site, head.publisher, head.seq, head.t_s, head.publishers))
    kind, seq, _tick, t_s, entity, publisher, _counts, _dtypes, _offset = _frame_layout(payload)
    return _new_head(Head, (kind, entity, publisher, seq, t_s, ()))  # a third of Head(...)'s cost, every message


@overload
def decode_binary(payload: bytes, *, check_finite: bool = ..., columns: Literal[True] = ...) -> Frame: ...
@overload
def decode_binary(payload: bytes, *, check_finite: bool = ..., columns: bool) -> Frame | RawBatch: ...
def decode_binary(payload: bytes, *, check_finite: bool = True, columns: bool = True) -> Frame | RawBatch:
    """Return the frame a binary payload encodes.

    ``check_finite=False`` leaves the NaN/infinity check of the records to the
    caller: the monitor's ingest does it for a whole window at once, which is
    many times cheaper than per frame.  A batch frame's columns are never
    checked here, for the same reason.  ``columns=False`` returns a batch
    frame as a ``RawBatch``: its header checked, its columns left in the
    payload, and the check of its per-node counts against the header left to
    the caller.

    Raises FrameError with reason truncated, bad_magic, bad_version, bad_kind,
    bad_header, trailing_bytes or non_finite.
    """
    _check_preamble(payload)
    if payload[5] == KIND_BATCH:
        return _decode_batch(payload) if columns else RawBatch(_batch_head(payload), payload)
    kind, seq, tick, t_s, entity, publisher, counts, dtypes, offset = _frame_layout(payload)
    arrays = []
    for name, count, dtype in zip(("chips", "links", "efa", "aux"), counts, dtypes, strict=True):
        records = np.frombuffer(payload, dtype=dtype, count=count, offset=offset)
        if check_finite:
            _check_finite(name, records)
        arrays.append(records)
        offset += count * dtype.itemsize
    if kind == KIND_NODE:
        chips, links, efa, cooling = arrays
        return NodeFrame(publisher, seq, tick, t_s, entity, chips, links, efa, cooling)
    return FacilityFrame(publisher, seq, tick, t_s, entity, arrays[3])
