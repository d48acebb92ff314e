"""The compact binary frame: a versioned fixed header, the publisher id, then
the sample records as little-endian numpy arrays, back to back.

Layout (docs/wire-format.md has the table)::

    magic "RNRW" | version u8 | kind u8 | flags u16 | seq u64 | tick u64 |
    t_s f64 | entity u32 | n_chips u16 | n_links u16 | n_efa u16 | n_aux u16 |
    publisher_len u16 | publisher (UTF-8) | chips | links | efa | aux

``kind`` 1 is a node frame (``entity`` the node id, ``aux`` its cooling record),
2 a facility frame (``entity`` the site id, ``aux`` its facility record).
Decoding copies nothing: the record arrays are read-only views of the payload.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd.errors import FrameError
from rainierd.wire.records import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
    WIRE_VERSION,
    FacilityFrame,
    Frame,
    NodeFrame,
    float_fields,
)

__all__ = ["HEADER", "KIND_FACILITY", "KIND_NODE", "MAGIC", "decode_binary", "encode_binary", "finite_mask"]

MAGIC: Final = b"RNRW"
HEADER: Final = struct.Struct("<4sBBHQQdIHHHHH")
KIND_NODE: Final = 1
KIND_FACILITY: Final = 2
MAX_PUBLISHER_BYTES: Final = 128
# Upper bounds on record counts in one frame: a node has 16 chips, 48 links
# and at most 64 EFA ports; the slack admits other node shapes, not garbage.
_MAX_COUNTS: Final = {KIND_NODE: (64, 256, 64, 1), KIND_FACILITY: (0, 0, 0, 1)}
_FLOATS: Final = {
    dt.str: float_fields(dt) for dt in (CHIP_DTYPE, LINK_DTYPE, EFA_DTYPE, COOLING_DTYPE, FACILITY_DTYPE)
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


def encode_binary(frame: Frame) -> bytes:
    """Return the binary encoding of a frame."""
    publisher = frame.publisher.encode()
    if isinstance(frame, NodeFrame):
        kind, entity = KIND_NODE, frame.node
        parts = (frame.chips, frame.links, frame.efa, frame.cooling)
        dtypes = (CHIP_DTYPE, LINK_DTYPE, EFA_DTYPE, COOLING_DTYPE)
    else:
        kind, entity = KIND_FACILITY, frame.site
        empty = np.zeros(0, dtype=CHIP_DTYPE)
        parts = (empty, np.zeros(0, LINK_DTYPE), np.zeros(0, EFA_DTYPE), frame.facility)
        dtypes = (CHIP_DTYPE, LINK_DTYPE, EFA_DTYPE, FACILITY_DTYPE)
    header = HEADER.pack(
        MAGIC, WIRE_VERSION, kind, 0, frame.seq, frame.tick, frame.t_s, entity,
        *(len(p) for p in parts), len(publisher),
    )
    body = b"".join(np.ascontiguousarray(p, dtype=dt).tobytes() for p, dt in zip(parts, dtypes, strict=True))
    return header + publisher + body


def decode_binary(payload: bytes, *, check_finite: bool = True) -> Frame:
    """Return the frame a binary payload encodes.

    ``check_finite=False`` leaves the NaN/infinity check of the records to the
    caller: the monitor's ingest does it for a whole batch at once, which is
    many times cheaper than per frame.

    Raises FrameError with reason truncated, bad_magic, bad_version, bad_kind,
    bad_header, trailing_bytes or non_finite.
    """
    if len(payload) < HEADER.size:
        raise FrameError("truncated", f"{len(payload)} bytes is shorter than the {HEADER.size}-byte header")
    (magic, version, kind, _flags, seq, tick, t_s, entity,
     n_chips, n_links, n_efa, n_aux, pub_len) = HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise FrameError("bad_magic", f"magic {magic!r} is not {MAGIC!r}")
    if version != WIRE_VERSION:
        raise FrameError("bad_version", f"wire version {version} is not {WIRE_VERSION}")
    if kind not in _MAX_COUNTS:
        raise FrameError("bad_kind", f"frame kind {kind} is unknown")
    counts = (n_chips, n_links, n_efa, n_aux)
    if pub_len > MAX_PUBLISHER_BYTES or any(
        c > limit for c, limit in zip(counts, _MAX_COUNTS[kind], strict=True)
    ):
        raise FrameError("bad_header", f"counts {counts} or publisher length {pub_len} out of range")
    if not np.isfinite(t_s):
        raise FrameError("non_finite", "t_s is not finite")
    aux_dtype = COOLING_DTYPE if kind == KIND_NODE else FACILITY_DTYPE
    dtypes = (CHIP_DTYPE, LINK_DTYPE, EFA_DTYPE, aux_dtype)
    offset = HEADER.size + pub_len
    expected = offset + sum(c * dt.itemsize for c, dt in zip(counts, dtypes, strict=True))
    if len(payload) < expected:
        raise FrameError("truncated", f"{len(payload)} bytes, header announces {expected}")
    if len(payload) > expected:
        raise FrameError("trailing_bytes", f"{len(payload) - expected} bytes after the last record")
    try:
        publisher = payload[HEADER.size:offset].decode()
    except UnicodeDecodeError:
        raise FrameError("bad_header", "publisher id is not UTF-8") from None
    arrays = []
    for name, count, dtype in zip(("chips", "links", "efa", "aux"), counts, dtypes, strict=True):
        records = np.frombuffer(payload, dtype=dtype, count=count, offset=offset)
        if check_finite:
            _check_finite(name, records)
        arrays.append(records)
        offset += count * dtype.itemsize
    if kind == KIND_NODE:
        return NodeFrame(publisher, seq, tick, t_s, entity, *arrays)
    return FacilityFrame(publisher, seq, tick, t_s, entity, arrays[3])
