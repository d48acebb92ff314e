"""Specification of per-record known bits in binary batch frames (flag 2,
docs/wire-format.md): a record can mark one field unknown, as JSON leaves a
key out; the bits round-trip, batches without the flag decode as before,
malformed bits are counted ``bad_header`` rejections, and an unknown field
reaches the fleet state exactly as JSON's ``null`` does."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.core import FleetState, Ingest, IngestStats, Received
from rainierd.errors import FrameError
from rainierd.fleet.topology import build_topology
from rainierd.wire import CHIP_DTYPE, NodeBatch, NodeFrame, decode_binary, decode_json, encode_json
from rainierd.wire.binary import BATCH_HEADER, FLAG_RECORD_KNOWN, RawBatch, encode_batch
from rainierd.wire.records import RECORD_DTYPES, RECORD_KINDS
from rainierd.wire.topics import batch_topic, node_topic, parse_topic
from tests.unit.wire.test_wire import a_node_frame, node_batches, same_batch

FULL = {kind: (1 << len(RECORD_DTYPES[kind].names or ())) - 1 for kind in RECORD_KINDS}
CHIP_BIT = {name: 1 << i for i, name in enumerate(CHIP_DTYPE.names or ())}
T0 = 1_796_000_000.0


def frame_at(node: int, seq: int, t_s: float) -> NodeFrame:
    """Node ``node``'s whole frame (valid for the demo fleet's ids) at ``t_s``."""
    frame = a_node_frame()
    records = {}
    for kind, base in (("chips", 16 * node), ("links", 48 * node), ("efa", 16 * node)):
        values = getattr(frame, kind).copy()
        values[{"chips": "chip", "links": "link", "efa": "port"}[kind]] = base + np.arange(values.size)
        records[kind] = values
    return dataclasses.replace(frame, publisher="agent", seq=seq, tick=seq, t_s=t_s, node=node, **records)


def batch_of(frame: NodeFrame, known: dict[str, np.ndarray] | None) -> NodeBatch:
    """``frame`` as a batch of one entry, with per-record ``known`` bits."""
    records = {"chips": frame.chips, "links": frame.links, "efa": frame.efa, "cooling": frame.cooling}
    return NodeBatch(
        "agg", 1, 1, frame.t_s, 0, np.array([frame.node], np.uint32), np.array([frame.seq], np.uint64),
        np.array([frame.tick], np.uint64), np.array([frame.t_s]),
        {k: np.array([len(records[k])], np.uint16) for k in RECORD_KINDS},
        {k: {n: np.ascontiguousarray(records[k][n]) for n in records[k].dtype.names or ()} for k in RECORD_KINDS},
        known=known,
    )


def chip_known(unknown: dict[int, str]) -> dict[str, np.ndarray]:
    """Known bits of 16 chips, every field known but ``unknown[chip]``'s."""
    bits = np.full(16, FULL["chips"], np.uint16)
    for chip, name in unknown.items():
        bits[chip] &= ~np.uint16(CHIP_BIT[name])
    return {"chips": bits}


class TestRoundTrip:
    @given(node_batches(), st.integers(0, 2**32 - 1))
    @settings(max_examples=40, deadline=None)
    def test_known_bits_round_trip(self, batch: NodeBatch, seed: int) -> None:
        """Any batch with any per-record bits (within its columns, ids known) decodes to the same bits, both
        as a decoded batch and as a raw one."""
        rng = np.random.default_rng(seed)
        known = {}
        for kind in RECORD_KINDS:
            mask = sum(1 << i for i, n in enumerate(RECORD_DTYPES[kind].names or ()) if n in batch.columns[kind])
            id_bit = 0 if kind == "cooling" else 1
            total = int(batch.counts[kind].sum())
            known[kind] = (rng.integers(0, 1 << 16, total).astype(np.uint16) & np.uint16(mask)) | np.uint16(id_bit)
        batch = dataclasses.replace(batch, known=known)
        payload = encode_batch(batch)
        decoded = decode_binary(payload)
        raw = decode_binary(payload, columns=False)
        assert isinstance(decoded, NodeBatch)
        assert isinstance(raw, RawBatch)
        assert same_batch(batch, decoded)
        assert decoded.known is not None
        for kind in RECORD_KINDS:
            assert decoded.known[kind].tolist() == known[kind].tolist()
            assert raw.known(kind).tolist() == known[kind].tolist()  # type: ignore[union-attr]

    def test_a_batch_without_bits_is_the_format_before_them(self) -> None:
        """Without per-record bits the flag is clear, no column is added, and it decodes with none: the bytes
        of every batch sent before flag 2 existed."""
        frame = frame_at(2, 3, T0)
        plain = encode_batch(batch_of(frame, None))
        marked = encode_batch(batch_of(frame, chip_known({})))
        assert BATCH_HEADER.unpack_from(plain)[3] == 0
        assert BATCH_HEADER.unpack_from(marked)[3] == FLAG_RECORD_KNOWN
        added = 2 * (16 + 48 + 16 + 1)  # a u16 a record
        assert added <= len(marked) - len(plain) < added + 4 * 8  # four columns, each padded to 8 bytes
        decoded = decode_binary(plain)
        assert isinstance(decoded, NodeBatch)
        assert decoded.known is None
        raw = decode_binary(plain, columns=False)
        assert isinstance(raw, RawBatch)
        assert raw.known("chips") is None


def tampered(payload: bytes, kind: str, record: int, bits: int) -> bytes:
    """Return ``payload`` with ``kind`` record ``record``'s known bits set to ``bits`` on the wire (the encoder
    masks them with the columns it writes, so a malformed batch is made by hand)."""
    raw = decode_binary(payload, columns=False)
    assert isinstance(raw, RawBatch)
    start, _ = raw.head.layout.spans["known", kind]
    out = bytearray(payload)
    out[start + 2 * record:start + 2 * record + 2] = bits.to_bytes(2, "little")
    return bytes(out)


class TestTheDocumentedExample:
    def test_two_chips_the_second_s_temperature_unknown(self) -> None:
        """docs/wire-format.md's example: chip and temp_c columns (mask 0x11), the second chip's temperature
        unknown, give the chips' known column 11 00 01 00 and 4 bytes of padding."""
        chips = np.zeros(2, CHIP_DTYPE)
        chips["chip"] = [32, 33]
        batch = NodeBatch(
            "agg", 1, 1, T0, 0, np.array([2], np.uint32), np.array([3], np.uint64), np.array([3], np.uint64),
            np.array([T0]), {"chips": np.array([2], np.uint16), "links": np.zeros(1, np.uint16),
                             "efa": np.zeros(1, np.uint16), "cooling": np.zeros(1, np.uint8)},
            {"chips": {"chip": chips["chip"], "temp_c": chips["temp_c"]}, "links": {"link": np.zeros(0, np.uint32)},
             "efa": {"port": np.zeros(0, np.uint32)}, "cooling": {}},
            known={"chips": np.array([0x11, 0x01], np.uint16)},
        )
        payload = encode_batch(batch)
        assert BATCH_HEADER.unpack_from(payload)[13] == 0x11  # chip_fields
        raw = decode_binary(payload, columns=False)
        assert isinstance(raw, RawBatch)
        start, stop = raw.head.layout.spans["known", "chips"]
        assert payload[start:stop + 4] == bytes.fromhex("11000100") + bytes(4)


class TestMalformedBits:
    @pytest.mark.parametrize(("kind", "bits", "says"), [
        ("chips", FULL["chips"] & ~1, "id unknown"),  # the chip id's bit clear
        ("efa", 0xFFFF, "does not carry"),  # bits for fields that do not exist
        ("cooling", FULL["cooling"] << 1, "does not carry"),
    ])
    def test_decode_refuses(self, kind: str, bits: int, says: str) -> None:
        """Bits naming a field the batch does not carry, or a record whose id is unknown, are bad_header."""
        payload = tampered(encode_batch(batch_of(frame_at(2, 3, T0), chip_known({}))), kind, 0, bits)
        with pytest.raises(FrameError, match=says) as raised:
            decode_binary(payload)
        assert raised.value.reason == "bad_header"

    def test_a_bit_for_a_column_left_out_is_refused(self) -> None:
        """A batch without the temp_c column whose bits claim a chip's temp_c is bad_header."""
        batch = batch_of(frame_at(2, 3, T0), chip_known({}))
        columns = dict(batch.columns) | {"chips": {n: c for n, c in batch.columns["chips"].items() if n != "temp_c"}}
        payload = encode_batch(dataclasses.replace(batch, columns=columns))
        decoded = decode_binary(payload)
        assert isinstance(decoded, NodeBatch)
        assert decoded.known is not None
        assert not decoded.known["chips"][0] & CHIP_BIT["temp_c"]  # the encoder writes only what it carries
        with pytest.raises(FrameError, match="does not carry"):
            decode_binary(tampered(payload, "chips", 4, FULL["chips"]))


def ingest_one(frame: NodeFrame | RawBatch, topic: str) -> tuple[FleetState, Ingest]:
    state = FleetState(build_topology("demo"))
    ingest = Ingest(state, IngestStats())
    ingest.record(ingest.apply([Received(T0, parse_topic(topic), frame)]))
    return state, ingest


class TestIntoTheState:
    def test_an_unknown_field_lands_as_json_null_does(self) -> None:
        """Chip 3's temp_c and chip 5's fp8_flop_total marked unknown in a raw batch leave the state exactly
        as the same frame in JSON with those keys null: NaN gauge, known bit clear, no counter rate."""
        frame = frame_at(2, 3, T0)
        doc = json.loads(encode_json(frame))
        doc["chips"][3]["temp_c"] = None
        doc["chips"][5]["fp8_flop_total"] = None
        from_json = decode_json(json.dumps(doc).encode())
        assert isinstance(from_json, NodeFrame)
        raw = decode_binary(encode_batch(batch_of(frame, chip_known({3: "temp_c", 5: "fp8_flop_total"}))),
                            columns=False)
        by_json, _ = ingest_one(from_json, node_topic(0, 0, 2))
        by_batch, ingest = ingest_one(raw, batch_topic(0, 0, "agg"))  # type: ignore[arg-type]
        assert ingest.stats.frames_applied == 1
        chips = slice(32, 48)
        assert np.isnan(by_batch.chips.gauges["temp_c"][32 + 3])
        assert by_batch.chips.known[chips].tolist() == by_json.chips.known[chips].tolist()
        assert not by_batch.chips.has("fp8_flop_total")[32 + 5]
        for name, gauge in by_batch.chips.gauges.items():
            np.testing.assert_array_equal(gauge[chips], by_json.chips.gauges[name][chips], err_msg=name)

    def test_malformed_bits_are_a_counted_rejection_that_changes_nothing(self) -> None:
        """A raw batch whose bits leave a record's id unknown is refused whole as bad_header; the state is
        untouched."""
        frame = frame_at(2, 3, T0)
        payload = tampered(encode_batch(batch_of(frame, chip_known({}))), "chips", 7, 0)
        raw = decode_binary(payload, columns=False)
        state, ingest = ingest_one(raw, batch_topic(0, 0, "agg"))  # type: ignore[arg-type]
        assert ingest.stats.rejected == {"bad_header": 1}
        assert ingest.stats.frames_applied == 0
        assert not state.chips.reported().any()
