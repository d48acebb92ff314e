"""Topics and frame encodings of rainierd's telemetry: the one contract between
publishers and monitors.  ``decode_frame`` tells the encodings apart by their
first byte: a JSON frame is an object (``{``), a binary frame (node, facility
or batch) starts ``RNRW``.
"""

from __future__ import annotations

from typing import Literal, overload

from rainierd.errors import FrameError
from rainierd.wire.binary import MAGIC, RawBatch, decode_binary, encode_batch, encode_binary, finite_mask
from rainierd.wire.jsonform import decode_json, encode_json, json_schema
from rainierd.wire.records import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
    WIRE_VERSION,
    FacilityFrame,
    Frame,
    NodeBatch,
    NodeFrame,
)

__all__ = [
    "CHIP_DTYPE",
    "COOLING_DTYPE",
    "EFA_DTYPE",
    "FACILITY_DTYPE",
    "LINK_DTYPE",
    "WIRE_VERSION",
    "FacilityFrame",
    "Frame",
    "NodeBatch",
    "NodeFrame",
    "RawBatch",
    "decode_binary",
    "decode_frame",
    "decode_json",
    "encode_batch",
    "encode_binary",
    "encode_json",
    "finite_mask",
    "json_schema",
]


@overload
def decode_frame(
    payload: bytes, *, max_bytes: int, check_finite: bool = ..., columns: Literal[True] = ...,
) -> tuple[Frame, str]: ...
@overload
def decode_frame(
    payload: bytes, *, max_bytes: int, check_finite: bool = ..., columns: bool,
) -> tuple[Frame | RawBatch, str]: ...
def decode_frame(
    payload: bytes, *, max_bytes: int, check_finite: bool = True, columns: bool = True,
) -> tuple[Frame | RawBatch, str]:
    """Return the frame and its encoding name ("binary" or "json").

    ``check_finite=False`` defers the binary form's NaN check to the caller,
    ``columns=False`` a binary batch's columns (see ``decode_binary``); the
    JSON form always checks.

    Raises FrameError: oversize, empty, unknown_encoding, or the decoder's reason.
    """
    if len(payload) > max_bytes:
        raise FrameError("oversize", f"{len(payload)} bytes exceeds the {max_bytes}-byte limit")
    if not payload:
        raise FrameError("empty", "empty payload")
    if payload[:1] == b"{":
        return decode_json(payload), "json"
    if payload[:1] == MAGIC[:1]:
        return decode_binary(payload, check_finite=check_finite, columns=columns), "binary"
    raise FrameError("unknown_encoding", f"first byte {payload[:1]!r} is neither '{{' nor 'R'")
