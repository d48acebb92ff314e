"""Topics and frame encodings of rainierd's telemetry: the one contract between
publishers and monitors.  ``decode_frame`` tells the encodings apart by their
first byte: a JSON frame is an object (``{``), a binary frame (node, facility
or batch) starts ``RNRW``.
"""

from __future__ import annotations

from typing import Literal, overload

from rainierd.errors import FrameError
from rainierd.wire.binary import (
    BATCH_HEADER,
    COUNT_DTYPES,
    ENTRY_DTYPES,
    HEADER,
    KIND_BATCH,
    KIND_FACILITY,
    KIND_NODE,
    MAGIC,
    MAX_BATCH_NODES,
    MAX_NODE_COUNTS,
    BatchLayout,
    RawBatch,
    batch_layout,
    check_known,
    decode_binary,
    encode_batch,
    encode_binary,
    finite_mask,
    node_frame_dtype,
    node_frame_head,
)
from rainierd.wire.jobs import (
    JOB_REJECT_REASONS,
    JOB_VERSION,
    JOBS_FILTER,
    JOBS_ROOT,
    MAX_JOB_BYTES,
    MAX_JOB_NODES,
    MAX_JOB_ULTRASERVERS,
    JobBook,
    JobDocument,
    encode_job,
    job_id_of_topic,
    job_topic,
    jobs_schema,
    validation_message,
)
from rainierd.wire.jsonform import decode_json, encode_json, json_schema
from rainierd.wire.peek import Peek, peek
from rainierd.wire.records import (
    CHIP_DTYPE,
    CHIP_DTYPE_V1,
    COOLING_DTYPE,
    EFA_DTYPE,
    EFA_DTYPE_V1,
    FACILITY_DTYPE,
    ID_FIELDS,
    LINK_DTYPE,
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
from rainierd.wire.topics import (
    ACTIONS_ROOT,
    BUCKETS,
    EVENTS_ROOT,
    TELEMETRY_ROOT,
    WHOLE_FLEET,
    Shard,
    TopicAddress,
    batch_topic,
    bucket_of,
    facility_topic,
    node_filters,
    node_topic,
    parse_shard,
    parse_topic,
    status_topic,
    telemetry_filters,
    truth_topic,
)

__all__ = [
    "ACTIONS_ROOT",
    "BATCH_HEADER",
    "BUCKETS",
    "CHIP_DTYPE",
    "CHIP_DTYPE_V1",
    "COOLING_DTYPE",
    "COUNT_DTYPES",
    "EFA_DTYPE",
    "EFA_DTYPE_V1",
    "ENTRY_DTYPES",
    "EVENTS_ROOT",
    "FACILITY_DTYPE",
    "HEADER",
    "ID_FIELDS",
    "JOBS_FILTER",
    "JOBS_ROOT",
    "JOB_REJECT_REASONS",
    "JOB_VERSION",
    "KIND_BATCH",
    "KIND_FACILITY",
    "KIND_NODE",
    "LINK_DTYPE",
    "MAGIC",
    "MAX_BATCH_NODES",
    "MAX_JOB_BYTES",
    "MAX_JOB_NODES",
    "MAX_JOB_ULTRASERVERS",
    "MAX_NODE_COUNTS",
    "NODE_FRAME_DTYPES",
    "RECORD_DTYPES",
    "RECORD_KINDS",
    "TELEMETRY_ROOT",
    "WHOLE_FLEET",
    "WIRE_VERSION",
    "BatchLayout",
    "FacilityFrame",
    "Frame",
    "JobBook",
    "JobDocument",
    "NodeBatch",
    "NodeFrame",
    "Peek",
    "RawBatch",
    "Shard",
    "TopicAddress",
    "batch_layout",
    "batch_topic",
    "bucket_of",
    "check_known",
    "column_dtypes",
    "decode_binary",
    "decode_frame",
    "decode_json",
    "encode_batch",
    "encode_binary",
    "encode_job",
    "encode_json",
    "facility_topic",
    "finite_mask",
    "float_fields",
    "job_id_of_topic",
    "job_topic",
    "jobs_schema",
    "json_schema",
    "node_filters",
    "node_frame_dtype",
    "node_frame_head",
    "node_topic",
    "parse_shard",
    "parse_topic",
    "peek",
    "status_topic",
    "telemetry_filters",
    "truth_topic",
    "validation_message",
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
