"""Specification of the wire format: topics, the binary and JSON frame forms."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.errors import FrameError
from rainierd.wire import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
    FacilityFrame,
    NodeBatch,
    NodeFrame,
    decode_binary,
    decode_frame,
    decode_json,
    encode_binary,
    encode_json,
    json_schema,
)
from rainierd.wire.binary import BATCH_HEADER, HEADER, encode_batch
from rainierd.wire.records import NODE_FRAME_DTYPES, RECORD_DTYPES, RECORD_KINDS
from rainierd.wire.topics import (
    TopicAddress,
    batch_topic,
    facility_topic,
    node_topic,
    parse_topic,
    status_topic,
    telemetry_filters,
    truth_topic,
)

ROOT = Path(__file__).parents[3]
MAX = 1 << 20


def random_records(rng: np.random.Generator, dtype: np.dtype[np.void], n: int) -> np.ndarray:
    """Records with valid values for every field (ratios in 0..1, finite, non-negative)."""
    out = np.zeros(n, dtype)
    assert dtype.names is not None
    for name in dtype.names:
        kind = dtype.fields[name][0].kind  # type: ignore[index]
        if name in ("util", "clock_ratio"):
            out[name] = rng.uniform(0, 1, n)
        elif name in {"throttled", "cooling_mode", "present", "port_active"}:
            out[name] = rng.integers(0, 2, n)
        elif kind == "u":
            top = np.iinfo(dtype.fields[name][0]).max  # type: ignore[index]
            out[name] = rng.integers(0, top, n, dtype=dtype.fields[name][0], endpoint=True)  # type: ignore[index]
        else:
            out[name] = rng.uniform(0, 1e6, n)
    return out


@st.composite
def node_frames(draw: st.DrawFn, *, binary: bool = False) -> NodeFrame:
    """Node frames with every field of their records: a binary node frame's layout, or every record field."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtypes = NODE_FRAME_DTYPES if binary else RECORD_DTYPES
    return NodeFrame(
        publisher=draw(st.text(min_size=1, max_size=30).filter(lambda s: len(s.encode()) <= 128)),
        seq=draw(st.integers(0, 2**64 - 1)),
        tick=draw(st.integers(0, 2**64 - 1)),
        t_s=draw(st.floats(allow_nan=False, allow_infinity=False)),
        node=draw(st.integers(0, 2**32 - 1)),
        chips=random_records(rng, dtypes["chips"], draw(st.integers(0, 64))),
        links=random_records(rng, dtypes["links"], draw(st.integers(0, 256))),
        efa=random_records(rng, dtypes["efa"], draw(st.integers(0, 64))),
        cooling=random_records(rng, dtypes["cooling"], draw(st.integers(0, 1))),
    )


publisher_ids = st.text(min_size=1, max_size=30).filter(lambda s: len(s.encode()) <= 128)


@st.composite
def node_batches(draw: st.DrawFn) -> NodeBatch:
    """Batches of 0-20 nodes with random per-node counts and a random subset of columns."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(0, 20))
    limits = {"chips": 64, "links": 256, "efa": 64, "cooling": 1}
    counts = {kind: rng.integers(0, limits[kind] + 1, n).astype(np.uint16) for kind in RECORD_KINDS}
    columns = {}
    for kind in RECORD_KINDS:
        records = random_records(rng, RECORD_DTYPES[kind], int(counts[kind].sum()))
        names = records.dtype.names or ()
        # Any subset of fields, but ids always (their column is required).
        keep = [name for i, name in enumerate(names) if (kind != "cooling" and i == 0) or rng.random() < 0.7]
        columns[kind] = {name: np.ascontiguousarray(records[name]) for name in keep}
    # Half of them carry each entry's own publisher, as an aggregator's do.
    table = tuple(draw(st.lists(publisher_ids, min_size=1, max_size=max(n, 1)))) if rng.random() < 0.5 else ()
    return NodeBatch(
        publisher=draw(st.text(min_size=1, max_size=30).filter(lambda s: len(s.encode()) <= 128)),
        seq=draw(st.integers(0, 2**64 - 1)), tick=draw(st.integers(0, 2**64 - 1)),
        t_s=draw(st.floats(allow_nan=False, allow_infinity=False)), site=draw(st.integers(0, 2**32 - 1)),
        node=rng.integers(0, 2**32, n, dtype=np.uint32), node_seq=rng.integers(0, 2**63, n, dtype=np.uint64),
        node_tick=rng.integers(0, 2**63, n, dtype=np.uint64), node_t_s=rng.uniform(0, 2e9, n),
        counts=counts, columns=columns,
        node_publisher=rng.integers(0, len(table), n).astype(np.uint16) if table else None, publishers=table,
    )


def same_batch(a: NodeBatch, b: NodeBatch) -> bool:
    head = ("publisher", "seq", "tick", "t_s", "site")
    arrays = ("node", "node_seq", "node_tick", "node_t_s")
    return (
        all(getattr(a, k) == getattr(b, k) for k in head)
        and all(np.array_equal(getattr(a, k), getattr(b, k)) for k in arrays)
        and all(np.array_equal(a.counts[k], b.counts[k]) for k in RECORD_KINDS)
        and all(a.columns[k].keys() == b.columns[k].keys() for k in RECORD_KINDS)
        and all(np.array_equal(a.columns[k][n], b.columns[k][n]) for k in RECORD_KINDS for n in a.columns[k])
        and a.entry_publishers() == b.entry_publishers()
    )


def a_batch() -> NodeBatch:
    frame = a_node_frame()
    records = {"chips": frame.chips, "links": frame.links, "efa": frame.efa, "cooling": frame.cooling}
    return NodeBatch(
        "agg-1", 5, 5, 1.7e9, 0, np.array([2], np.uint32), np.array([3], np.uint64), np.array([3], np.uint64),
        np.array([1.7e9]), {k: np.array([len(records[k])], np.uint16) for k in RECORD_KINDS},
        {k: {n: np.ascontiguousarray(records[k][n]) for n in records[k].dtype.names or ()} for k in RECORD_KINDS},
    )


def a_batch_of_agents() -> NodeBatch:
    """Three entries (nodes 2, 3 and 2's next frame) of two agents, batched by ``agg-1``."""
    one = a_batch()
    records = {k: {n: np.concatenate([c, c, c]) for n, c in cols.items()} for k, cols in one.columns.items()}
    return NodeBatch(
        "agg-1", 5, 5, 1.7e9, 0, np.array([2, 3, 2], np.uint32), np.array([3, 9, 4], np.uint64),
        np.array([3, 9, 4], np.uint64), np.array([1.7e9, 1.7e9, 1.7e9 + 1]),
        {k: np.repeat(c, 3) for k, c in one.counts.items()}, records,
        node_publisher=np.array([0, 1, 0], np.uint16), publishers=("n2-agent", "n3-agent"),
    )


def same_node_frame(a: NodeFrame, b: NodeFrame) -> bool:
    return (a.publisher, a.seq, a.tick, a.t_s, a.node) == (b.publisher, b.seq, b.tick, b.t_s, b.node) and all(
        getattr(a, k).tobytes() == getattr(b, k).tobytes() for k in ("chips", "links", "efa", "cooling")
    )


def a_node_frame() -> NodeFrame:
    rng = np.random.default_rng(7)
    return NodeFrame("sim-1", 3, 3, 1.7e9, 2, random_records(rng, CHIP_DTYPE, 16),
                     random_records(rng, LINK_DTYPE, 48), random_records(rng, EFA_DTYPE, 16),
                     random_records(rng, COOLING_DTYPE, 1))


class TestRoundTrip:
    @given(node_frames(binary=True))
    @settings(max_examples=60, deadline=None)
    def test_binary_node_frame(self, frame: NodeFrame) -> None:
        """Any valid node frame survives binary encoding bit for bit."""
        decoded = decode_binary(encode_binary(frame))
        assert isinstance(decoded, NodeFrame)
        assert same_node_frame(frame, decoded)

    @given(node_frames())
    @settings(max_examples=40, deadline=None)
    def test_json_node_frame(self, frame: NodeFrame) -> None:
        """Any valid node frame survives JSON encoding bit for bit."""
        decoded = decode_json(encode_json(frame))
        assert isinstance(decoded, NodeFrame)
        assert same_node_frame(frame, decoded)

    @given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
    @settings(max_examples=30, deadline=None)
    def test_facility_frame_both_encodings(self, site: int, seed: int) -> None:
        """A facility frame survives both encodings."""
        records = random_records(np.random.default_rng(seed), FACILITY_DTYPE, 1)
        frame = FacilityFrame("sim", 1, 2, 3.5, site, records)
        for encode in (encode_binary, encode_json):
            decoded, _ = decode_frame(encode(frame), max_bytes=MAX)
            assert isinstance(decoded, FacilityFrame)
            assert (decoded.site, decoded.facility.tobytes()) == (site, records.tobytes())

    def test_decode_frame_names_the_encoding(self) -> None:
        """decode_frame tells binary from JSON by the first byte."""
        frame = a_node_frame()
        assert decode_frame(encode_binary(frame), max_bytes=MAX)[1] == "binary"
        assert decode_frame(encode_json(frame), max_bytes=MAX)[1] == "json"


def reason(payload: bytes, max_bytes: int = MAX) -> str:
    with pytest.raises(FrameError) as info:
        decode_frame(payload, max_bytes=max_bytes)
    return info.value.reason


class TestBatchFrame:
    @given(node_batches())
    @settings(max_examples=60, deadline=None)
    def test_round_trip(self, batch: NodeBatch) -> None:
        """Any valid batch (any counts, any subset of columns) survives encoding exactly."""
        decoded = decode_binary(encode_batch(batch))
        assert isinstance(decoded, NodeBatch)
        assert same_batch(batch, decoded)

    def test_columns_start_on_8_byte_boundaries(self) -> None:
        """Every column of a decoded batch is an aligned view of the payload, not a copy."""
        payload = encode_batch(a_batch())
        decoded = decode_binary(payload)
        assert isinstance(decoded, NodeBatch)
        base = np.frombuffer(payload, np.uint8).ctypes.data
        views = [decoded.node, decoded.node_seq, *(c for k in RECORD_KINDS for c in decoded.columns[k].values())]
        assert all((v.ctypes.data - base) % 8 == 0 and not v.flags.owndata for v in views)

    def test_every_truncation_is_rejected(self) -> None:
        """Every proper prefix of a batch is rejected as truncated (or empty)."""
        payload = encode_batch(a_batch())
        assert {reason(payload[:n]) for n in range(len(payload))} == {"empty", "truncated"}

    def test_trailing_bytes(self) -> None:
        """Bytes after the last column are rejected."""
        assert reason(encode_batch(a_batch()) + b"\0" * 8) == "trailing_bytes"

    @pytest.mark.parametrize(("field", "value"), [
        (9, 5_000),  # n_nodes above the 4,096 a batch may carry
        (10, 10**6),  # chips: more than 64 a node
        (14, 0),  # chip field mask without the chip id column
        (14, 0xFFFF),  # chip field mask naming fields that do not exist
    ])
    def test_bad_headers(self, field: int, value: int) -> None:
        """A header announcing impossible counts or columns is rejected before any column is read."""
        payload = bytearray(encode_batch(a_batch()))
        unpacked = list(BATCH_HEADER.unpack_from(payload))
        unpacked[field] = value
        BATCH_HEADER.pack_into(payload, 0, *unpacked)
        assert reason(bytes(payload)) in {"bad_header"}

    def test_per_node_counts_must_add_up(self) -> None:
        """Per-node counts that disagree with the header's totals are rejected."""
        batch = a_batch()
        counts = dict(batch.counts) | {"chips": np.array([15], np.uint16)}
        lying = NodeBatch(batch.publisher, batch.seq, batch.tick, batch.t_s, batch.site, batch.node,
                          batch.node_seq, batch.node_tick, batch.node_t_s, counts, batch.columns)
        payload = bytearray(encode_batch(lying))
        unpacked = list(BATCH_HEADER.unpack_from(payload))
        unpacked[10] = 16  # the header still says 16 chips
        BATCH_HEADER.pack_into(payload, 0, *unpacked)
        assert reason(bytes(payload)) in {"bad_header", "trailing_bytes", "truncated"}

    def test_each_entry_keeps_its_own_publisher(self) -> None:
        """A batch with a publisher table (flag 1) gives every entry the publisher its agent numbered it under."""
        batch = a_batch_of_agents()
        decoded = decode_binary(encode_batch(batch))
        assert isinstance(decoded, NodeBatch)
        assert (decoded.publisher, decoded.entry_publishers()) == ("agg-1", ["n2-agent", "n3-agent", "n2-agent"])

    def test_every_truncation_of_a_publisher_table_is_rejected(self) -> None:
        """Every proper prefix of a batch with a publisher table is rejected as truncated (or empty)."""
        payload = encode_batch(a_batch_of_agents())
        assert {reason(payload[:n]) for n in range(len(payload))} == {"empty", "truncated"}

    @pytest.mark.parametrize(("edit", "why"), [
        (lambda p: p[:-18] + b"\x00" + p[-17:], "bad_header"),  # an entry of length 0
        (lambda p: p[:-20] + b"\x00\x00" + p[-18:], "bad_header"),  # a table of no publishers
        (lambda p: p + b"\x00", "trailing_bytes"),
    ])
    def test_a_malformed_publisher_table_is_rejected(self, edit: Callable[[bytes], bytes], why: str) -> None:
        """A table naming no publisher, an empty id, or bytes after the table are rejected."""
        payload = encode_batch(a_batch_of_agents())
        assert payload[-20:] == b"\x02\x00\x08n2-agent\x08n3-agent"  # (the table these edits cut into)
        assert reason(edit(payload)) == why

    def test_an_entry_naming_a_publisher_outside_the_table_is_rejected(self) -> None:
        """An index past the table's end is a bad header, not an IndexError."""
        batch = a_batch_of_agents()
        lying = dataclasses.replace(batch, node_publisher=np.array([0, 2, 0], np.uint16))
        assert reason(encode_batch(lying)) == "bad_header"

    def test_unknown_flags_are_rejected(self) -> None:
        """A batch announcing a feature this decoder does not know is refused, not misread."""
        payload = bytearray(encode_batch(a_batch()))
        payload[6] = 4  # bits 0 and 1 are known features; bit 2 is not
        assert reason(bytes(payload)) == "bad_header"

    @given(st.binary(max_size=2_000))
    @settings(max_examples=300, deadline=None)
    def test_arbitrary_bytes_raise_only_frame_error(self, tail: bytes) -> None:
        """No bytes after a batch preamble make the decoder raise anything but FrameError."""
        with pytest.raises(FrameError):
            decode_frame(b"RNRW\x01\x03" + tail, max_bytes=MAX)


class TestMalformedBinary:
    def test_every_truncation_is_rejected(self) -> None:
        """Every proper prefix of a frame is rejected as truncated (or empty)."""
        payload = encode_binary(a_node_frame())
        reasons = {reason(payload[:n]) for n in range(len(payload))}
        assert reasons == {"empty", "truncated"}

    def test_wrong_magic(self) -> None:
        """A frame that starts R but not RNRW is rejected as bad_magic."""
        payload = encode_binary(a_node_frame())
        assert reason(b"RXRW" + payload[4:]) == "bad_magic"

    def test_wrong_version(self) -> None:
        """A frame of another wire version is rejected as bad_version."""
        payload = bytearray(encode_binary(a_node_frame()))
        payload[4] = 2
        assert reason(bytes(payload)) == "bad_version"

    def test_unknown_kind(self) -> None:
        """A frame kind other than node or facility is rejected."""
        payload = bytearray(encode_binary(a_node_frame()))
        payload[5] = 9
        assert reason(bytes(payload)) == "bad_kind"

    def test_trailing_bytes(self) -> None:
        """Bytes after the last announced record are rejected."""
        assert reason(encode_binary(a_node_frame()) + b"\0") == "trailing_bytes"

    def test_absurd_counts(self) -> None:
        """A header announcing more records than any node has is rejected before reading them."""
        payload = bytearray(encode_binary(a_node_frame()))
        struct.pack_into("<H", payload, HEADER.size - 10, 60_000)
        assert reason(bytes(payload)) == "bad_header"

    @pytest.mark.parametrize("field", ["util", "temp_c", "fp8_flop_total"])
    def test_nan_in_a_chip_record(self, field: str) -> None:
        """NaN in any float field of any record is rejected as non_finite."""
        frame = a_node_frame()
        chips = frame.chips.copy()
        chips[5][field] = np.nan
        bad = NodeFrame(frame.publisher, 1, 1, 1.0, 2, chips, frame.links, frame.efa, frame.cooling)
        assert reason(encode_binary(bad)) == "non_finite"

    def test_oversize_is_rejected_before_decoding(self) -> None:
        """A payload over max_bytes is rejected as oversize."""
        assert reason(encode_binary(a_node_frame()), max_bytes=1_000) == "oversize"

    @given(st.binary(max_size=600))
    @settings(max_examples=300, deadline=None)
    def test_arbitrary_bytes_raise_only_frame_error(self, payload: bytes) -> None:
        """No payload makes the decoder raise anything but FrameError."""
        try:
            decode_frame(b"RNRW" + payload, max_bytes=MAX)
            decode_frame(payload, max_bytes=MAX)
        except FrameError:
            pass


class TestMalformedJson:
    def document(self) -> dict[str, object]:
        return dict(json.loads(encode_json(a_node_frame())))

    def test_not_json(self) -> None:
        """A payload starting { that is not JSON is rejected as bad_json."""
        assert reason(b"{not json") == "bad_json"

    def test_wrong_version(self) -> None:
        """v other than 1 is rejected as bad_version."""
        doc = self.document() | {"v": 2}
        assert reason(json.dumps(doc).encode()) == "bad_version"

    def test_nan(self) -> None:
        """NaN (which Python's json accepts) is rejected as non_finite."""
        doc = self.document()
        doc["chips"][0]["temp_c"] = float("nan")  # type: ignore[index]
        assert reason(json.dumps(doc).encode()) == "non_finite"

    def test_missing_id_and_extra_fields(self) -> None:
        """A record without its id, or with a field the format does not have, is rejected as schema."""
        doc = self.document()
        del doc["chips"][0]["chip"]  # type: ignore[index]
        assert reason(json.dumps(doc).encode()) == "schema"
        doc = self.document()
        doc["links"][0]["colour"] = "blue"  # type: ignore[index]
        assert reason(json.dumps(doc).encode()) == "schema"


    def test_out_of_range(self) -> None:
        """A utilisation above 1 or a negative counter is rejected as schema."""
        doc = self.document()
        doc["chips"][0]["util"] = 1.5  # type: ignore[index]
        assert reason(json.dumps(doc).encode()) == "schema"
        doc = self.document()
        doc["efa"][0]["retrans_pkts_total"] = -1  # type: ignore[index]
        assert reason(json.dumps(doc).encode()) == "schema"

    def test_unknown_first_byte(self) -> None:
        """A payload that is neither JSON nor binary is rejected as unknown_encoding."""
        assert reason(b"hello") == "unknown_encoding"


class TestStrictJson:
    @pytest.mark.parametrize(("path", "value"), [
        (("node",), "3"), (("seq",), "12"), (("seq",), 1.0), (("chips", 0, "util"), True),
        (("chips", 0, "throttled"), 1), (("links", 0, "lanes_up"), "8"),
    ])
    def test_no_value_of_the_wrong_json_type_is_coerced(self, path: tuple[object, ...], value: object) -> None:
        """A string for a number, a float for a count, a boolean for a ratio: schema, not a silent conversion."""
        doc = dict(json.loads(encode_json(a_node_frame())))
        target: object = doc
        for step in path[:-1]:
            target = target[step]  # type: ignore[index]
        target[path[-1]] = value  # type: ignore[index]
        assert reason(json.dumps(doc).encode()) == "schema"

    def test_a_key_given_twice_is_refused(self) -> None:
        """JSON that names a key twice (which json.loads would resolve silently, last wins) is bad_json."""
        text = encode_json(a_node_frame()).replace(b'"seq":3,', b'"seq":3,"seq":4,', 1)
        assert b'"seq":4' in text
        assert reason(text) == "bad_json"

    def test_deep_nesting_is_refused_not_a_crash(self) -> None:
        """A payload nested a hundred thousand deep is bad_json."""
        assert reason(b"{" + b'"a":[' * 50_000 + b"]" * 50_000 + b"}") == "bad_json"


class TestPartialJson:
    def test_a_field_left_out_is_unknown_not_zero(self) -> None:
        """A chip without util or temp_c decodes with those bits clear in its known mask."""
        doc = dict(json.loads(encode_json(a_node_frame())))
        del doc["chips"][0]["util"]  # type: ignore[index]
        doc["chips"][1]["temp_c"] = None  # type: ignore[index]
        frame = decode_json(json.dumps(doc).encode())
        assert isinstance(frame, NodeFrame)
        assert frame.known is not None
        names = list(CHIP_DTYPE.names or ())
        missing = [[n for i, n in enumerate(names) if not int(frame.known["chips"][r]) >> i & 1] for r in range(3)]
        assert missing == [["util"], ["temp_c"], []]
        assert not frame.complete()

    def test_partial_frames_round_trip_in_json(self) -> None:
        """Encoding leaves unknown fields out, so they stay unknown after a round trip."""
        doc = dict(json.loads(encode_json(a_node_frame())))
        for link in doc["links"]:  # type: ignore[union-attr]
            del link["latency_us"]
        frame = decode_json(json.dumps(doc).encode())
        again = decode_json(encode_json(frame))  # type: ignore[arg-type]
        assert isinstance(again, NodeFrame)
        assert again.known is not None
        assert frame.known is not None
        assert np.array_equal(again.known["links"], frame.known["links"])
        assert "latency_us" not in json.loads(encode_json(again))["links"][0]

    def test_binary_node_frames_refuse_partial_records(self) -> None:
        """A node frame with unknown fields cannot be sent as binary, where they would read as zeros."""
        doc = dict(json.loads(encode_json(a_node_frame())))
        del doc["efa"][0]["latency_us"]  # type: ignore[index]
        with pytest.raises(ValueError, match="carry exactly the fields"):
            encode_binary(decode_json(json.dumps(doc).encode()))

    def test_a_binary_node_frame_keeps_wire_v1s_records(self) -> None:
        """A binary node frame's records are wire version 1's layout whatever fields were added to a record
        since: a JSON frame with exactly those fields encodes to it, one with an added field is refused, and
        the decoded records carry v1's fields only (the added ones are unknown, never zeros)."""
        doc = dict(json.loads(encode_json(a_node_frame())))
        for chip in doc["chips"]:  # type: ignore[union-attr]
            for name in ("sram_ecc_corrected_total", "sram_ecc_uncorrected_total", "exec_errors_total",
                         "exec_timeouts_total", "exec_latency_us", "present"):
                chip.pop(name, None)
        for port in doc["efa"]:  # type: ignore[union-attr]
            for name in ("rx_drops_total", "rdma_wr_errors_total", "keep_alive_total", "port_active", "present"):
                port.pop(name, None)
        v1 = decode_json(json.dumps(doc).encode())
        decoded = decode_binary(encode_binary(v1))
        assert isinstance(decoded, NodeFrame)
        assert (decoded.chips.dtype, decoded.efa.dtype) == (NODE_FRAME_DTYPES["chips"], NODE_FRAME_DTYPES["efa"])
        assert decoded.chips.dtype.itemsize == 53
        assert decoded.chips.tobytes() == np.asarray(v1.chips[list(NODE_FRAME_DTYPES["chips"].names or ())]
                                                     ).astype(NODE_FRAME_DTYPES["chips"]).tobytes()
        doc["chips"][0]["exec_errors_total"] = 3  # type: ignore[index]
        with pytest.raises(ValueError, match="carry exactly the fields"):
            encode_binary(decode_json(json.dumps(doc).encode()))


class TestTopics:
    def test_telemetry_topics_parse_back(self) -> None:
        """Topics built for a node, a site and a batch parse back to their address."""
        assert node_topic(2, 5_000, 3) == "rainier/v1/telemetry/s2/b136/u5000/n3"  # 5,000 % 256 = 136
        assert parse_topic(node_topic(2, 5_000, 3)) == TopicAddress("node", 2, 5_000, 3, 136)
        assert parse_topic(facility_topic(1)) == TopicAddress("facility", 1)
        assert parse_topic(batch_topic(4, 9, "agg-7.a_b")) == TopicAddress("batch", 4, bucket=9)

    def test_topics_without_a_bucket_still_parse(self) -> None:
        """The layout before shards (no bucket level) is still telemetry, for an unsharded monitor."""
        assert parse_topic("rainier/v1/telemetry/s2/u5000/n3") == TopicAddress("node", 2, 5_000, 3)
        assert parse_topic("rainier/v1/telemetry/s4/batch/agg") == TopicAddress("batch", 4)

    @pytest.mark.parametrize("topic", [
        "rainier/v2/telemetry/s0/u0/n0", "rainier/v1/s0/u0/n0", "rainier/v1/telemetry/s0/u0",
        "rainier/v1/telemetry/s0/batch/", "rainier/v1/telemetry/s0/batch/a/b", "rainier/v1/events/chip/3", "x",
        "rainier/v1/telemetry/s0/b1/u0/n0", "rainier/v1/telemetry/s0/b07/u7/n28",
        "rainier/v1/telemetry/s0/b256/batch/a",
    ])
    def test_other_topics_are_not_telemetry(self, topic: str) -> None:
        """Topics outside the v1 telemetry tree (events among them), or naming a bucket not the UltraServer's
        (or not spelled as the shards subscribe to it), parse to None."""
        assert parse_topic(topic) is None

    def test_the_telemetry_filter_never_matches_other_kinds(self) -> None:
        """The monitor's subscription covers telemetry only: never events, status or truth."""
        (telemetry,) = telemetry_filters()
        prefix = telemetry.removesuffix("#")
        for topic in ("rainier/v1/events/chip/3", status_topic("rainierd-monitor-1"), truth_topic("sim")):
            assert not topic.startswith(prefix)


class TestSchema:
    def test_checked_in_schema_is_current(self) -> None:
        """docs/wire-format.schema.json is what `rainierd schema` generates from the models."""
        checked_in = json.loads((ROOT / "docs" / "wire-format.schema.json").read_text())
        assert checked_in == json_schema()


class TestDocumentation:
    def test_every_record_field_is_documented(self) -> None:
        """docs/wire-format.md names every field of every record dtype."""
        doc = (ROOT / "docs" / "wire-format.md").read_text()
        for dtype in (CHIP_DTYPE, LINK_DTYPE, EFA_DTYPE, COOLING_DTYPE, FACILITY_DTYPE):
            assert dtype.names is not None
            missing = [name for name in dtype.names if f"`{name}`" not in doc]
            assert missing == []

    def test_documented_node_frame_size(self) -> None:
        """The worked frame size in the doc is what the encoder produces."""
        frame = a_node_frame()
        frame = NodeFrame("rainierd-sim-ffe68dde", 1, 1, 1.0, 0, frame.chips, frame.links, frame.efa, frame.cooling)
        assert len(encode_binary(frame)) == 3_731
        assert "3,731 bytes" in (ROOT / "docs" / "wire-format.md").read_text()
