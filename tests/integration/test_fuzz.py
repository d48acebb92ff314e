"""A daemon-level fuzz: a real ``rainierd monitor`` behind a real Mosquitto
takes a healthy fleet's telemetry, then over ten thousand hostile payloads,
and refuses every one of them with the reason it was built to have, while
the fleet's figures stay exactly as they were and the next healthy tick
applies as if nothing had happened.

The payloads are random bytes; real frames truncated, padded or with header
bytes changed (magic, version, kind, counts, lengths, publisher); NaN and
infinity in float fields; integers at 2**63 and 2**64 - 1 (ticks, sequence
numbers, ids); sample times far in the future or past; sequence jumps; JSON
of the wrong types, with a key given twice, or nested 10,000 deep; unknown
node, chip, link and port ids; frames on another entity's topic or on no
valid topic; payloads just over ``max_frame_bytes``.  Each is invalid *by
construction* (a changed float could still be a valid frame, so nothing is
flipped at random where a valid value could come out) and carries the
reason docs/wire-format.md says it must be refused for.  A payload that
decodes to frames addresses one node or site (batches of one node), so one
payload is one count in ``rainier_ingest_decode_errors_total{reason}``.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import math
import random
import struct
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import aiomqtt
import numpy as np
import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values, sample_values, scrape
from harness.timing import TICK_S, within
from harness.waits import wait_until
from rainierd.exporter.selfstatus import DECODE_REASONS
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches, tick_frames
from rainierd.wire import (
    FACILITY_DTYPE,
    NodeBatch,
    decode_binary,
    encode_batch,
    encode_binary,
    encode_json,
)
from rainierd.wire.binary import BATCH_HEADER, HEADER
from rainierd.wire.records import NODE_FRAME_DTYPES, RECORD_DTYPES
from rainierd.wire.topics import batch_topic, facility_topic, node_topic

TOPO: Final = build_topology("demo")
PUBLISHER: Final = "fuzz-fleet"
APPLIED_TICKS: Final = 5  # ticks 0..4 are applied before the fuzz, tick 5 after it
MAX_FRAME_BYTES: Final = 65_536
SEED: Final = 20_260_101
HUGE: Final = (2**63, 2**64 - 1)
# The sequence-jump check (seq_jump) arrived after this test was written; until
# a checkout has it, its payloads are held back (they would be believed, and
# would make every later genuine frame stale) and the test ends xfail.
SEQ_JUMP: Final = "seq_jump" in DECODE_REASONS
SEQ_JUMPS: Final = 300

Json = dict[str, Any]
Made = tuple[str, bytes, str]  # topic, payload, the reason it must be refused for

# Where each record kind's fields sit in a binary node frame (docs/wire-format.md, "Records").
# A binary node frame's records are wire v1's (NODE_FRAME_DTYPES), as the simulator's batches' columns are.
_NODE_RECORDS: Final = tuple(NODE_FRAME_DTYPES.items())
_PER_NODE: Final = {"chips": TOPO.chips_per_node, "links": TOPO.links_per_node, "efa": TOPO.efa_ports_per_node,
                    "cooling": 1}
_ID_FIELD: Final = {"chips": "chip", "links": "link", "efa": "port"}
_STRUCT: Final = {("f", 4): "<f", ("f", 8): "<d", ("u", 1): "<B", ("u", 4): "<I", ("u", 8): "<Q"}
_NON_FINITE: Final = (math.nan, math.inf, -math.inf)


@dataclass(frozen=True)
class Tick:
    """One tick of the healthy fleet, in every form a publisher could send it."""

    number: int
    t_s: float
    nodes: list[tuple[str, bytes]]  # binary node frames, node by node
    facility: tuple[str, bytes]  # the site's binary facility frame
    json_nodes: list[tuple[str, Json]]
    json_facility: tuple[str, Json]
    singles: list[tuple[str, bytes]]  # a batch frame of one node, node by node
    batch: tuple[str, bytes]  # one batch frame of the whole site

    def published(self) -> list[tuple[str, bytes]]:
        """Return what the healthy publisher sends for this tick: a frame per node, then the site's."""
        return [*self.nodes, self.facility]


def fleet_ticks(start_s: float, count: int) -> list[Tick]:
    """Return the first ``count`` ticks of a seeded healthy demo fleet whose tick 0 is sampled at ``start_s``."""
    model = FleetModel(TOPO, np.random.default_rng(SEED), tick_s=TICK_S, start_s=start_s)
    ticks = []
    for k in range(count):
        sample = model.step(k)  # the model's arrays move on with the next step: encode everything now
        *nodes, facility = tick_frames(TOPO, sample, publisher=PUBLISHER)
        singles = list(tick_batches(TOPO, sample, publisher=PUBLISHER, nodes_per_batch=1))[:-1]
        batch = next(tick_batches(TOPO, sample, publisher=PUBLISHER, nodes_per_batch=TOPO.n_nodes))
        assert len(nodes) == len(singles) == TOPO.n_nodes  # a healthy fleet: every node speaks
        ticks.append(Tick(
            number=k, t_s=sample.t_s,
            nodes=[(topic, encode_binary(frame)) for topic, frame in nodes],
            facility=(facility[0], encode_binary(facility[1])),
            json_nodes=[(topic, json.loads(encode_json(frame))) for topic, frame in nodes],
            json_facility=(facility[0], json.loads(encode_json(facility[1]))),
            singles=[(topic, encode_binary(frame)) for topic, frame in singles],
            batch=(batch[0], encode_binary(batch[1])),
        ))
    return ticks


@dataclass(frozen=True)
class Hostile:
    """One hostile payload, where it goes, and why the monitor must refuse it."""

    category: str
    topic: str
    payload: bytes
    reason: str


def put(payload: bytes, offset: int, fmt: str, value: float) -> bytes:
    """Return ``payload`` with ``value`` packed (struct ``fmt``) at ``offset``."""
    out = bytearray(payload)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def dumps(doc: object) -> bytes:
    """Return a document as compact JSON, NaN and infinity written as Python's json writes them."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()


def publisher_len(payload: bytes) -> int:
    """Return the publisher length a binary node or facility frame announces."""
    return int(struct.unpack_from("<H", payload, HEADER.size - 2)[0])


def record_field(payload: bytes, kind: str, index: int, name: str) -> tuple[int, str]:
    """Return the offset and struct format of field ``name`` of record ``index`` of ``kind`` in a node frame."""
    at = HEADER.size + publisher_len(payload)
    for each, dtype in _NODE_RECORDS:
        if each == kind:
            assert dtype.fields is not None
            field_dtype, field_at = dtype.fields[name][:2]
            return at + index * dtype.itemsize + field_at, _STRUCT[field_dtype.kind, field_dtype.itemsize]
        at += _PER_NODE[each] * dtype.itemsize
    raise KeyError(kind)


def float_names(dtype: np.dtype[Any]) -> list[str]:
    """Return the float fields of a record dtype."""
    assert dtype.names is not None
    assert dtype.fields is not None
    return [name for name in dtype.names if dtype.fields[name][0].kind == "f"]


def batch_counts_offset(payload: bytes, kind: str) -> int:
    """Return where a batch frame's per-node ``kind`` count column starts (the layout of docs/wire-format.md)."""
    n_nodes = int(struct.unpack_from("<I", payload, 36)[0])
    at = BATCH_HEADER.size + int(struct.unpack_from("<H", payload, BATCH_HEADER.size - 2)[0])
    widths = {"node": 4, "node_seq": 8, "node_tick": 8, "node_t_s": 8, "chips": 2, "links": 2, "efa": 2, "cooling": 1}
    for name, width in widths.items():
        at += -at % 8
        if name == kind:
            return at
        at += width * n_nodes
    raise KeyError(kind)


def rebatch(payload: bytes, **changes: Any) -> bytes:
    """Return a batch frame re-encoded with ``changes`` (dataclass fields of NodeBatch)."""
    batch = decode_binary(payload)
    assert isinstance(batch, NodeBatch)
    return encode_batch(replace(batch, **changes))


def batch_column(payload: bytes, kind: str, name: str, index: int, value: float) -> bytes:
    """Return a batch frame with record ``index`` of ``kind`` given ``value`` for ``name``."""
    batch = decode_binary(payload)
    assert isinstance(batch, NodeBatch)
    columns = {each: dict(fields) for each, fields in batch.columns.items()}
    column = columns[kind][name].copy()
    column[index] = value
    columns[kind][name] = column
    return encode_batch(replace(batch, columns=columns))


def republish(payload: bytes, publisher: str) -> bytes:
    """Return a binary node or facility frame re-encoded under another publisher id."""
    frame = decode_binary(payload)
    assert not isinstance(frame, NodeBatch)
    return encode_binary(replace(frame, publisher=publisher))


def with_path(doc: Json, path: Sequence[str | int], value: object) -> Json:
    """Return a deep copy of ``doc`` with the value at ``path`` replaced (or added)."""
    out = copy.deepcopy(doc)
    target: Any = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


class Fuzzer:
    """Builds the hostile payloads, each with the reason it must be refused for, from a seeded generator.

    ``applied`` are ticks the monitor has applied (replays of them are stale);
    ``next_tick`` is one it has not seen: a frame of it would be applied, so
    every payload built from it is made invalid on purpose.
    """

    def __init__(self, rng: random.Random, applied: Sequence[Tick], next_tick: Tick, now_s: float) -> None:
        self.rng = rng
        self.applied = applied
        self.next = next_tick
        self.now_s = now_s
        self.last_seq = applied[-1].number
        self._jumps = itertools.count()

    # -- choosing -------------------------------------------------------------------

    def old(self) -> Tick:
        return self.rng.choice(self.applied)

    def any_tick(self) -> Tick:
        return self.rng.choice([*self.applied, self.next])

    def node(self, tick: Tick | None = None) -> tuple[int, str, bytes]:
        i = self.rng.randrange(TOPO.n_nodes)
        topic, payload = (tick or self.next).nodes[i]
        return i, topic, payload

    def single(self, tick: Tick | None = None) -> tuple[int, str, bytes]:
        i = self.rng.randrange(TOPO.n_nodes)
        topic, payload = (tick or self.next).singles[i]
        return i, topic, payload

    def json_node(self, tick: Tick | None = None) -> tuple[int, str, Json]:
        i = self.rng.randrange(TOPO.n_nodes)
        topic, doc = (tick or self.next).json_nodes[i]
        return i, topic, doc

    def binary(self, tick: Tick | None = None) -> tuple[str, bytes]:
        """Return any real binary payload: a node frame, the facility frame, a one-node or a whole-site batch."""
        tick = tick or self.any_tick()
        return self.rng.choice([*tick.nodes, tick.facility, *tick.singles, tick.batch])

    def json_any(self, tick: Tick | None = None) -> tuple[str, Json]:
        tick = tick or self.any_tick()
        return self.rng.choice([*tick.json_nodes, tick.json_facility])

    def forged(self, payload: bytes) -> bytes:
        """Return a node or facility frame, half the time under a made-up publisher id (refused all the same)."""
        if self.rng.random() < 0.5:
            return payload
        return republish(payload, f"forged-{self.rng.randrange(10**9)}")

    def topic(self) -> str:
        return self.rng.choice([*(t for t, _ in self.next.nodes), self.next.facility[0], batch_topic(0, 0, "fuzz")])

    def float_field(self, kind: str) -> tuple[int, str]:
        dtype = dict(_NODE_RECORDS)[kind]
        return self.rng.randrange(_PER_NODE[kind]), self.rng.choice(float_names(dtype))

    def skewed_t_s(self) -> float:
        """Return a sample time no monitor clock could believe: an hour to decades off, or absurd."""
        if self.rng.random() < 0.2:
            return self.rng.choice([0.0, 1e11 + 1.0, -1e11, 1e300, -1e300, 2.0**63, 2.0**64, 1e-300])
        return self.now_s + self.rng.choice((-1, 1)) * 10 ** self.rng.uniform(math.log10(3_600), 9)

    def jump_seq(self) -> int:
        """Return a sequence number far past the last applied one; any two are more than 16 apart."""
        if self.rng.random() < 0.3:
            return self.rng.choice(HUGE)
        return self.last_seq + 10**6 + 1_000 * next(self._jumps)

    # -- the categories -------------------------------------------------------------

    def random_bytes(self) -> Made:
        first = self.rng.choice([b for b in range(256) if b not in b"{R"])
        return self.topic(), bytes([first]) + self.rng.randbytes(self.rng.randrange(4_096)), "unknown_encoding"

    def random_after_first_byte(self) -> Made:
        if self.rng.random() < 0.5:
            # A nonzero second byte keeps json on UTF-8, where 0xff can never be.
            garbage = bytes([self.rng.randrange(1, 256)]) + self.rng.randbytes(self.rng.randrange(2_000))
            at = self.rng.randrange(len(garbage) + 1)
            return self.topic(), b"{" + garbage[:at] + b"\xff" + garbage[at:], "bad_json"
        magic = self.rng.randbytes(3)
        while magic == b"NRW":
            magic = self.rng.randbytes(3)
        return self.topic(), b"R" + magic + self.rng.randbytes(self.rng.randrange(4, 4_000)), "bad_magic"

    def empty(self) -> Made:
        return self.topic(), b"", "empty"

    def truncated_binary(self) -> Made:
        topic, payload = self.binary()
        return topic, payload[:self.rng.randrange(1, len(payload))], "truncated"

    def truncated_json(self) -> Made:
        topic, doc = self.json_any()
        payload = dumps(doc)
        return topic, payload[:self.rng.randrange(1, len(payload))], "bad_json"

    def wrong_magic(self) -> Made:
        topic, payload = self.binary()
        if self.rng.random() < 0.25:
            first = self.rng.choice([b for b in range(256) if b != ord("R")])
            # '{' then 'N' cannot be JSON; any other first byte is no encoding at all.
            return topic, bytes([first]) + payload[1:], "bad_json" if first == ord("{") else "unknown_encoding"
        magic = self.rng.randbytes(3)
        while magic == b"NRW":
            magic = self.rng.randbytes(3)
        return topic, b"R" + magic + payload[4:], "bad_magic"

    def wrong_version(self) -> Made:
        topic, payload = self.binary()
        return topic, put(payload, 4, "<B", self.rng.choice([v for v in range(256) if v != 1])), "bad_version"

    def wrong_kind(self) -> Made:
        roll = self.rng.random()
        if roll < 0.1:  # a node frame calling itself a facility frame: far too many records for one
            _, topic, payload = self.node(self.any_tick())
            return topic, put(payload, 5, "<B", 2), "bad_header"
        if roll < 0.2:  # a facility frame calling itself a node frame: its record is no cooling record
            topic, payload = self.any_tick().facility
            return topic, put(payload, 5, "<B", 1), "trailing_bytes"
        topic, payload = self.binary()
        return topic, put(payload, 5, "<B", self.rng.choice([0, *range(4, 256)])), "bad_kind"

    def wrong_counts(self) -> Made:  # noqa: PLR0912 - one case per way of lying about a length
        rng = self.rng
        _, topic, payload = self.node(self.any_tick())
        pub = publisher_len(payload)
        match rng.randrange(12):
            case 0:
                return topic, put(payload, 36, "<H", rng.randrange(65, 65_536)), "bad_header"  # chips > 64
            case 1:
                return topic, put(payload, 38, "<H", rng.randrange(257, 65_536)), "bad_header"  # links > 256
            case 2:
                return topic, put(payload, 40, "<H", rng.randrange(65, 65_536)), "bad_header"  # ports > 64
            case 3:
                return topic, put(payload, 42, "<H", rng.randrange(2, 65_536)), "bad_header"  # cooling > 1
            case 4:
                return topic, put(payload, 44, "<H", rng.randrange(129, 65_536)), "bad_header"  # publisher > 128
            case 5:
                return topic, put(payload, 36, "<H", 16 - rng.randrange(1, 17)), "trailing_bytes"
            case 6:
                return topic, put(payload, 36, "<H", 16 + rng.randrange(1, 49)), "truncated"
            case 7:
                return topic, put(payload, 38, "<H", 48 + rng.randrange(1, 209)), "truncated"
            case 8:
                return topic, put(payload, 44, "<H", pub - rng.randrange(1, pub + 1)), "trailing_bytes"
            case 9:
                return topic, put(payload, 44, "<H", pub + rng.randrange(1, 129 - pub)), "truncated"
            case 10:
                at = HEADER.size
                return topic, payload[:at] + b"\xff" * pub + payload[at + pub:], "bad_header"  # not UTF-8
            case _:
                topic, payload = self.any_tick().facility
                no_record = put(payload, 42, "<H", 0)
                if rng.random() < 0.5:  # a facility frame without its record, consistently so
                    return topic, no_record[:HEADER.size + publisher_len(payload)], "bad_header"
                return topic, no_record, "trailing_bytes"

    def wrong_batch_header(self) -> Made:
        rng = self.rng
        topic, payload = rng.choice([*self.any_tick().singles, self.any_tick().batch])
        n_nodes = int(struct.unpack_from("<I", payload, 36)[0])
        match rng.randrange(9):
            case 0:
                return topic, put(payload, 36, "<I", rng.randrange(4_097, 2**32)), "bad_header"
            case 1:
                return topic, put(payload, 40, "<I", 64 * n_nodes + rng.randrange(1, 10**6)), "bad_header"
            case 2:  # the EFA field mask naming a field beyond the record's (a chip's 16 fill the u16 mask)
                mask = struct.unpack_from("<H", payload, 60)[0]
                spare = len(RECORD_DTYPES["efa"].names or ())
                return topic, put(payload, 60, "<H", mask | 1 << rng.randrange(spare, 16)), "bad_header"
            case 3:
                mask = struct.unpack_from("<H", payload, 58)[0]
                return topic, put(payload, 58, "<H", mask | 1 << rng.randrange(7, 16)), "bad_header"
            case 4:
                mask = struct.unpack_from("<H", payload, 62)[0]
                return topic, put(payload, 62, "<H", mask | 1 << rng.randrange(4, 16)), "bad_header"
            case 5:
                mask = struct.unpack_from("<H", payload, 56)[0]
                return topic, put(payload, 56, "<H", mask & ~1), "bad_header"  # chips without their ids
            case 6:
                return topic, put(payload, 64, "<H", rng.randrange(129, 65_536)), "bad_header"
            case 7:
                at = batch_counts_offset(payload, "chips") + 2 * rng.randrange(n_nodes)
                return topic, put(payload, at, "<H", rng.choice([17, 65, 1_000])), "bad_header"  # sum != total
            case _:
                pub = int(struct.unpack_from("<H", payload, 64)[0])
                at = BATCH_HEADER.size
                return topic, payload[:at] + b"\xff" * pub + payload[at + pub:], "bad_header"

    def trailing(self) -> Made:
        if self.rng.random() < 0.25:
            topic, doc = self.json_any()
            return topic, dumps(doc) + b"x" + self.rng.randbytes(self.rng.randrange(64)), "bad_json"
        topic, payload = self.binary()
        return topic, payload + self.rng.randbytes(self.rng.randrange(1, 65)), "trailing_bytes"

    def non_finite(self) -> Made:
        rng, value = self.rng, self.rng.choice(_NON_FINITE)
        match rng.randrange(6):
            case 0 | 1:  # a float of a record of the next tick's node frame
                _, topic, payload = self.node()
                kind = rng.choice(list(_PER_NODE))
                payload = self.forged(payload)
                index, name = self.float_field(kind)
                at, fmt = record_field(payload, kind, index, name)
                return topic, put(payload, at, fmt, value), "non_finite"
            case 2:  # a sample time
                _, topic, payload = rng.choice([self.node(), (0, *self.next.facility)])
                return topic, put(self.forged(payload), 24, "<d", value), "non_finite"
            case 3:  # a facility record's float
                topic, payload = self.next.facility
                payload = self.forged(payload)
                assert FACILITY_DTYPE.fields is not None
                name = rng.choice(float_names(FACILITY_DTYPE))
                dtype, at = FACILITY_DTYPE.fields[name][:2]
                at += HEADER.size + publisher_len(payload)
                return topic, put(payload, at, _STRUCT["f", dtype.itemsize], value), "non_finite"
            case 4:  # a one-node batch: a record column, the node's sample time or the batch's
                _, topic, payload = self.single()
                kind = rng.choice(list(_PER_NODE))
                index, name = self.float_field(kind)
                choice = rng.randrange(3)
                if choice == 0:
                    return topic, batch_column(payload, kind, name, index, value), "non_finite"
                if choice == 1:
                    return topic, rebatch(payload, node_t_s=np.array([value])), "non_finite"
                return topic, put(payload, 24, "<d", value), "non_finite"
            case _:  # JSON: any float field, or the sample time
                if rng.random() < 0.2:
                    topic, doc = self.next.json_facility
                    name = rng.choice(float_names(FACILITY_DTYPE))
                    return topic, dumps(with_path(doc, ["facility", name], value)), "non_finite"
                _, topic, doc = self.json_node()
                kind = rng.choice(list(_PER_NODE))
                index, name = self.float_field(kind)
                path: list[str | int] = ["cooling", name] if kind == "cooling" else [kind, index, name]
                if rng.random() < 0.2:
                    path = ["t_s"]
                return topic, dumps(with_path(doc, path, value)), "non_finite"

    def huge_integers(self) -> Made:
        rng, huge = self.rng, self.rng.choice(HUGE)
        match rng.randrange(6):
            case 0:  # a replay whose tick is absurd: the tick is never believed, the replay is stale
                _, topic, payload = rng.choice([self.node(self.old()), (0, *self.old().facility)])
                return topic, put(payload, 16, "<Q", huge), "stale_seq"
            case 1:  # an absurd sequence number on an id outside the fleet
                _, topic, payload = self.node()
                entity = rng.choice([2**32 - 1, 2**31, TOPO.n_nodes + rng.randrange(10**6)])
                return topic, put(put(payload, 8, "<Q", huge), 32, "<I", entity), "unknown_node"
            case 2:
                topic, payload = self.next.facility
                return topic, put(put(payload, 8, "<Q", huge), 32, "<I", 2**32 - 1), "unknown_node"
            case 3:  # a one-node batch replayed with absurd ticks and batch numbers
                _, topic, payload = self.single(self.old())
                replayed = rebatch(payload, node_tick=np.array([huge], np.uint64), seq=huge, tick=huge)
                return topic, replayed, "stale_seq"
            case 4:  # JSON: integers the schema cannot hold
                _, topic, doc = self.json_node()
                out_of_range: list[tuple[list[str | int], int]] = [
                    (["seq"], 2**64), (["seq"], -1), (["seq"], 2**64 + rng.randrange(10**9)), (["tick"], 2**64),
                    (["tick"], -1), (["node"], 2**32), (["node"], -1), (["chips", 0, "chip"], 2**32),
                    (["chips", 3, "hbm_used_bytes"], 2**64), (["chips", 5, "ecc_corrected_total"], -1),
                    (["links", 7, "lanes_up"], 256), (["links", 7, "lanes_up"], -1), (["efa", 2, "port"], -1),
                ]
                path, value = rng.choice(out_of_range)
                return topic, dumps(with_path(doc, path, value)), "schema"
            case _:  # JSON: a replay with an absurd tick
                _, topic, doc = self.json_node(self.old())
                return topic, dumps(with_path(doc, ["tick"], huge)), "stale_seq"

    def clock_skew(self) -> Made:
        rng, t_s = self.rng, self.skewed_t_s()
        match rng.randrange(4):
            case 0:
                _, topic, payload = self.node()
                return topic, put(self.forged(payload), 24, "<d", t_s), "clock_skew"
            case 1:
                topic, payload = self.next.facility
                return topic, put(self.forged(payload), 24, "<d", t_s), "clock_skew"
            case 2:
                _, topic, payload = self.single()
                return topic, rebatch(payload, node_t_s=np.array([t_s]), t_s=t_s), "clock_skew"
            case _:
                topic, doc = self.json_any(self.next)
                return topic, dumps(with_path(doc, ["t_s"], t_s)), "clock_skew"

    def wrong_json_types(self) -> Made:
        rng = self.rng
        if rng.random() < 0.15:
            topic, doc = self.next.json_facility
            facility_cases: list[tuple[list[str | int], object, str]] = [
                (["facility", "cooling_mode"], True, "schema"), (["facility", "cooling_mode"], 1.0, "schema"),
                (["facility", "cooling_mode"], 2, "schema"), (["facility", "cooling_mode"], "0", "schema"),
                (["site"], "0", "schema"), (["site"], 0.0, "schema"), (["facility"], [], "schema"),
                (["v"], True, "bad_version"), (["kind"], "node", "schema"),
            ]
            path, value, reason = rng.choice(facility_cases)
            return topic, dumps(with_path(doc, path, value)), reason
        _, topic, doc = self.json_node()
        node_cases: list[tuple[list[str | int], object, str]] = [
            (["node"], "3", "schema"), (["node"], 3.0, "schema"), (["node"], True, "schema"),
            (["seq"], str(self.last_seq + 1), "schema"), (["seq"], float(self.last_seq + 1), "schema"),
            (["seq"], None, "schema"), (["seq"], [self.last_seq + 1], "schema"), (["tick"], "5", "schema"),
            (["t_s"], str(self.next.t_s), "schema"), (["t_s"], True, "schema"), (["publisher"], 5, "schema"),
            (["publisher"], "", "schema"), (["publisher"], "p" * 129, "schema"), (["kind"], "nodes", "schema"),
            (["kind"], 1, "schema"), (["chips"], {}, "schema"), (["chips"], None, "schema"),
            (["cooling"], [], "schema"), (["links"], "[]", "schema"), (["extra"], 1, "schema"),
            (["chips", 0, "util"], True, "schema"), (["chips", 0, "util"], "0.5", "schema"),
            (["chips", 0, "util"], 1.5, "schema"), (["chips", 0, "util"], -0.1, "schema"),
            (["chips", 1, "throttled"], 1, "schema"), (["chips", 1, "throttled"], "false", "schema"),
            (["chips", 2, "chip"], "16", "schema"), (["chips", 2, "chip"], 16.0, "schema"),
            (["chips", 3, "power_w"], -1.0, "schema"), (["chips", 3, "fp8_flop_total"], "1e16", "schema"),
            (["links", 0, "lanes_up"], 8.0, "schema"), (["links", 0, "tx_bytes_total"], 1.5, "schema"),
            (["efa", 0, "rx_bytes_total"], "0", "schema"), (["cooling", "fan_rpm"], False, "schema"),
            (["v"], "1", "bad_version"), (["v"], 2, "bad_version"), (["v"], None, "bad_version"),
            (["v"], True, "bad_version"), (["v"], 1.0, "bad_version"), (["v"], 0, "bad_version"),
        ]
        path, value, reason = rng.choice(node_cases)
        return topic, dumps(with_path(doc, path, value)), reason

    def duplicate_keys(self) -> Made:
        _, topic, doc = self.json_node()
        text = dumps(doc)
        key, value = self.rng.choice([
            (b'"seq"', str(self.last_seq + 1).encode()), (b'"seq"', b"0"), (b'"v"', b"1"), (b'"node"', b"0"),
            (b'"publisher"', b'"someone-else"'), (b'"t_s"', str(self.next.t_s).encode()), (b'"kind"', b'"node"'),
        ])
        match self.rng.randrange(4):
            case 0:
                return topic, b"{" + key + b":" + value + b"," + text[1:], "bad_json"
            case 1:
                return topic, text[:-1] + b"," + key + b":" + value + b"}", "bad_json"
            case 2:
                return topic, text.replace(b'{"chip":', b'{"util":0.5,"chip":', 1), "bad_json"
            case _:
                return topic, text.replace(b'"cooling":{', b'"cooling":{"fan_rpm":1.0,', 1), "bad_json"

    def deep_nesting(self) -> Made:
        rng = self.rng
        match rng.randrange(4):
            case 0:  # deeper than any parser should recurse
                depth = rng.randrange(10_000, 25_000)
                return self.topic(), b'{"v":1,"x":' + b"[" * depth + b"]" * depth + b"}", "bad_json"
            case 1:
                depth = rng.randrange(10_000, 10_800)
                return self.topic(), b'{"a":' * depth + b"1" + b"}" * depth, "bad_json"
            case 2:  # shallow enough to parse: a field no frame has
                _, topic, doc = self.json_node()
                nested: object = 1
                for _ in range(rng.randrange(50, 400)):
                    nested = [nested] if rng.random() < 0.5 else {"a": nested}
                return topic, dumps(with_path(doc, ["extra"], nested)), "schema"
            case _:  # ... or where a list of records belongs
                _, topic, doc = self.json_node()
                depth = rng.randrange(50, 400)
                return topic, dumps(doc).replace(b'"efa":[', b'"efa":' + b"[" * depth, 1).replace(
                    b'],"cooling"', b"]" * depth + b',"cooling"', 1), "schema"

    def unknown_node(self) -> Made:
        rng = self.rng
        node = rng.choice([TOPO.n_nodes, 2**31, 2**32 - 1, rng.randrange(TOPO.n_nodes, 2**32)])
        match rng.randrange(4):
            case 0:
                _, topic, payload = self.node()
                return topic, put(self.forged(payload), 32, "<I", node), "unknown_node"
            case 1:
                _, topic, payload = self.single()
                return topic, rebatch(payload, node=np.array([node], np.uint32)), "unknown_node"
            case 2:
                topic, payload = self.next.facility
                site = rng.choice([TOPO.n_sites, 2**32 - 1, rng.randrange(TOPO.n_sites, 2**32)])
                return topic, put(self.forged(payload), 32, "<I", site), "unknown_node"
            case _:
                _, topic, doc = self.json_node()
                return topic, dumps(with_path(doc, ["node"], node)), "unknown_node"

    def record_id(self, node: int, kind: str, duplicate: bool) -> tuple[int, int]:
        """Return (record index, new id): another record's id of the same node, or an id the node does not own."""
        per = _PER_NODE[kind]
        index = self.rng.randrange(per)
        if duplicate:
            other = self.rng.choice([i for i in range(per) if i != index])
            return index, node * per + other
        total = {"chips": TOPO.n_chips, "links": TOPO.n_links, "efa": TOPO.n_efa}[kind]
        if self.rng.random() < 0.3:
            return index, self.rng.choice([total, 2**32 - 1, self.rng.randrange(total, 2**32)])
        owner = self.rng.choice([n for n in range(TOPO.n_nodes) if n != node])
        return index, owner * per + self.rng.randrange(per)

    def wrong_id(self) -> Made:
        rng = self.rng
        duplicate = rng.random() < 0.45
        reason = "duplicate_id" if duplicate else "unknown_id"
        kind = rng.choice(list(_ID_FIELD))
        match rng.randrange(3):
            case 0:
                node, topic, payload = self.node()
                index, new_id = self.record_id(node, kind, duplicate)
                payload = self.forged(payload)
                at, fmt = record_field(payload, kind, index, _ID_FIELD[kind])
                return topic, put(payload, at, fmt, new_id), reason
            case 1:
                node, topic, payload = self.single()
                index, new_id = self.record_id(node, kind, duplicate)
                return topic, batch_column(payload, kind, _ID_FIELD[kind], index, new_id), reason
            case _:
                node, topic, doc = self.json_node()
                index, new_id = self.record_id(node, kind, duplicate)
                return topic, dumps(with_path(doc, [kind, index, _ID_FIELD[kind]], new_id)), reason

    def topic_mismatch(self) -> Made:
        rng = self.rng
        node, _, payload = self.node()
        path = TOPO.node_path(node)
        others = [t for i, (t, _) in enumerate(self.next.nodes) if i != node]
        match rng.randrange(5):
            case 0:  # a node's frame on another node's topic, or on its own node number under another path
                topic = rng.choice([*others, node_topic(path[0] + 1, path[1], node),
                                    node_topic(path[0], path[1] + 1, node), node_topic(0, 0, 9)])
                return topic, self.forged(payload), "topic_mismatch"
            case 1:  # a node's frame on a facility or batch topic
                return rng.choice([facility_topic(0), batch_topic(0, 0, "n0-7")]), payload, "topic_mismatch"
            case 2:  # a facility frame on a node's, another site's or a batch topic
                topic = rng.choice([*others, facility_topic(rng.randrange(1, 10**6)), batch_topic(0, 0, "x")])
                return topic, self.forged(self.next.facility[1]), "topic_mismatch"
            case 3:  # a batch on another site's batch topic, a node's topic, or the facility topic
                _, _, single = self.single()
                topic = rng.choice([batch_topic(rng.randrange(1, 10**6), 0, "x"), *others, facility_topic(0)])
                return topic, single, "topic_mismatch"
            case _:
                _, _, doc = self.json_node()
                wrong = [t for t, d in self.next.json_nodes if d["node"] != doc["node"]]
                return rng.choice(wrong), dumps(doc), "topic_mismatch"

    def bad_topic(self) -> Made:
        rng = self.rng
        root = "rainier/v1/telemetry"
        topic = rng.choice([
            root, f"{root}/", f"{root}/s0", f"{root}/s0/u0", f"{root}/s0/u0/n0/x", f"{root}/s0/u0/n",
            f"{root}/s0/u0/n-1", f"{root}/s0/u0/n0x", f"{root}/S0/u0/n0", f"{root}/s1234567/u0/n0",
            f"{root}/s0/u123456789/n0", f"{root}/s0/u0/n12345678901", f"{root}/s0/batch/",
            f"{root}/s0/batch/{'a' * 65}",
            f"{root}/s0/batch/a b", f"{root}/s0/batch/a/b", f"{root}/s0/facility/", f"{root}/s0/facilityx",
            f"{root}//s0/u0/n0", f"{root}/s0/u0/n0 ", f"{root}/s 0/facility",
            f"{root}/s0/u0/n\u0663",  # an Arabic-Indic 3: a digit to \d, and int() reads it as 3
            f"{root}/s\uff10/facility",  # a fullwidth 0
            f"{root}/x" + "".join(rng.choice("abcxyz019/_-.") for _ in range(rng.randrange(40))),
        ])
        # A valid frame of the next tick: only its topic is wrong.
        payload = rng.choice([self.node()[2], self.next.facility[1], self.single()[2], dumps(self.json_node()[2])])
        return topic, payload, "bad_topic"

    def stale(self) -> Made:
        old = self.old()
        match self.rng.randrange(4):
            case 0:
                _, topic, payload = self.node(old)
                return topic, payload, "stale_seq"
            case 1:
                topic, payload = old.facility
                return topic, payload, "stale_seq"
            case 2:
                _, topic, payload = self.single(old)
                return topic, payload, "stale_seq"
            case _:
                topic, doc = self.json_any(old)
                return topic, dumps(doc), "stale_seq"

    def seq_jump(self) -> Made:
        seq = self.jump_seq()
        match self.rng.randrange(4):
            case 0:
                _, topic, payload = self.node()
                return topic, put(payload, 8, "<Q", seq), "seq_jump"
            case 1:
                topic, payload = self.next.facility
                return topic, put(payload, 8, "<Q", seq), "seq_jump"
            case 2:
                _, topic, payload = self.single()
                return topic, rebatch(payload, node_seq=np.array([seq], np.uint64)), "seq_jump"
            case _:
                topic, doc = self.json_any(self.next)
                return topic, dumps(with_path(doc, ["seq"], seq)), "seq_jump"

    def oversize(self) -> Made:
        topic, payload = self.rng.choice([self.binary(self.next), (self.next.facility[0], dumps(self.json_node()[2]))])
        size = MAX_FRAME_BYTES + self.rng.randrange(1, 2_049)
        return topic, payload + self.rng.randbytes(size - len(payload)), "oversize"

    # -- all of them ----------------------------------------------------------------

    def payloads(self) -> list[Hostile]:
        """Return every hostile payload, categories interleaved in a seeded random order."""
        plan: dict[str, tuple[Callable[[], Made], int]] = {
            "random bytes": (self.random_bytes, 800),
            "random bytes after '{' or 'R'": (self.random_after_first_byte, 600),
            "empty": (self.empty, 20),
            "truncated binary frames": (self.truncated_binary, 1_200),
            "truncated JSON frames": (self.truncated_json, 400),
            "wrong magic": (self.wrong_magic, 400),
            "wrong version": (self.wrong_version, 300),
            "wrong kind": (self.wrong_kind, 400),
            "lying counts and lengths": (self.wrong_counts, 700),
            "lying batch headers": (self.wrong_batch_header, 450),
            "trailing bytes": (self.trailing, 400),
            "NaN and infinity": (self.non_finite, 900),
            "integers at 2**63 and 2**64-1": (self.huge_integers, 600),
            "far-off sample times": (self.clock_skew, 500),
            "wrong JSON types": (self.wrong_json_types, 600),
            "duplicate JSON keys": (self.duplicate_keys, 300),
            "deep nesting": (self.deep_nesting, 120),
            "unknown nodes and sites": (self.unknown_node, 300),
            "unknown and duplicate record ids": (self.wrong_id, 600),
            "another entity's topic": (self.topic_mismatch, 400),
            "no telemetry topic": (self.bad_topic, 300),
            "replays": (self.stale, 500),
            "oversize": (self.oversize, 100),
        }
        if SEQ_JUMP:
            plan["sequence jumps"] = (self.seq_jump, SEQ_JUMPS)
        out = [Hostile(category, *make()) for category, (make, n) in plan.items() for _ in range(n)]
        self.rng.shuffle(out)
        return out


# -- the monitor's figures ----------------------------------------------------------

# What a hostile payload must never move: the fleet's throughput and health,
# what was applied, and the sequence accounting of every stream.
FIGURES: Final = (
    "rainier_fleet_", "rainier_site_", "rainier_ultraserver_", "rainier_unhealthy{", "rainier_chip_",
    "rainier_node_", "rainier_neuronlink_", "rainier_efa_port_", "rainier_health_events_total",
    "rainier_monitor_last_tick", "rainier_ingest_frames_applied_total", "rainier_ingest_samples_applied_total",
    "rainier_ingest_frames_lost_total", "rainier_ingest_frames_missing", "rainier_ingest_frames_late_total",
    "rainier_ingest_publisher_changes_total", "rainier_ingest_publisher_restarts_total",
)
REJECTED: Final = 'rainier_ingest_decode_errors_total{reason="'


def figures(values: dict[str, float]) -> dict[str, float]:
    """Return the fleet figures of a scrape."""
    return {series: value for series, value in values.items() if series.startswith(FIGURES)}


def rejections(values: dict[str, float]) -> Counter[str]:
    """Return the rejection counters of a scrape, by reason."""
    return Counter({s.removeprefix(REJECTED)[:-2]: int(v) for s, v in values.items() if s.startswith(REJECTED)})


def messages(values: dict[str, float]) -> float:
    """Return how many MQTT telemetry messages the monitor has received."""
    return sum(v for s, v in values.items() if s.startswith("rainier_ingest_messages_total"))


async def publish(client: aiomqtt.Client, items: Sequence[tuple[str, bytes]]) -> None:
    """Publish at QoS 1 (so the broker loses none), a few hundred in flight at a time."""
    for at in range(0, len(items), 250):
        await asyncio.gather(*(client.publish(topic, payload, qos=1) for topic, payload in items[at:at + 250]))


def by_category(payloads: Sequence[Hostile]) -> dict[str, Counter[str]]:
    """Return, per category, how many payloads must be refused for each reason."""
    table: dict[str, Counter[str]] = {}
    for hostile in payloads:
        table.setdefault(hostile.category, Counter())[hostile.reason] += 1
    return table


@pytest.mark.mosquitto
async def test_every_hostile_payload_is_refused_counted_by_reason_and_changes_nothing(
    mosquitto: Broker, start_rainierd: object,
) -> None:
    """Over 10,000 hostile payloads each count once under the reason they were built for; the fleet's figures do
    not move, the monitor lives on, and the next healthy tick applies with nothing lost and nothing stale."""
    metrics_port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{metrics_port}",
        "--tick", str(TICK_S), "--mqtt-qos", "1",
        # Nothing healthy arrives while the fuzz runs: the fleet must not go stale meanwhile.
        "--stale-after-ticks", "1000",
        # The fuzz sends thousands of payloads on a handful of topics: here each must reach the decoding rules it
        # tests, not the per-topic share (tests/integration/test_flood.py tests that).
        "--share-frames-per-tick", "1000000", "--share-bytes-per-tick", str(64 * 2**30),
        name="monitor", env={"RAINIERD_MAX_FRAME_BYTES": str(MAX_FRAME_BYTES)},
    )
    start_s = time.time()
    ticks = fleet_ticks(start_s, APPLIED_TICKS + 1)
    hostile = Fuzzer(random.Random(SEED), ticks[:APPLIED_TICKS], ticks[APPLIED_TICKS], start_s).payloads()
    expected = Counter(h.reason for h in hostile)
    assert len(hostile) >= 10_000

    async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="fuzz-publisher",
                              max_inflight_messages=250) as client:
        client.pending_calls_threshold = 1_000  # thousands in flight on purpose: no warning each
        # The monitor hears telemetry once a probe on a malformed telemetry topic is counted.
        for _ in range(75):
            await client.publish("rainier/v1/telemetry/probe", b"probe", qos=1)
            if rejections(await asyncio.to_thread(current_values, metrics_port))["bad_topic"]:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"the monitor did not subscribe within 15 s\n{monitor.log()}")

        # A healthy fleet, tick by tick, until the monitor's figures settle.
        for tick in ticks[:APPLIED_TICKS]:
            await publish(client, tick.published())
            await asyncio.sleep(TICK_S)
        applied = APPLIED_TICKS * (TOPO.n_nodes + TOPO.n_sites)
        await wait_until(lambda: current_values(metrics_port).get("rainier_ingest_frames_applied_total") == applied,
                         10, f"{applied} healthy frames applied")
        before = await settled(metrics_port)
        assert before["rainier_fleet_chips_reporting"] == TOPO.n_chips
        assert before["rainier_fleet_fp8_delivered_flops"] > 0

        # The fuzz.
        started = time.monotonic()
        await publish(client, [(h.topic, h.payload) for h in hostile])
        published_s = time.monotonic() - started
        await until_counted(metrics_port, sum(rejections(before).values()) + len(hostile))
        counted_s = time.monotonic() - started
        after = await settled(metrics_port)

        assert monitor.proc.poll() is None, monitor.log()
        counted = rejections(after) - rejections(before)
        assert dict(counted) == dict(expected)
        assert sum(counted.values()) == len(hostile)
        assert messages(after) - messages(before) == len(hostile)
        assert figures(after) == figures(before)

        # The streams were not poisoned: the next tick applies whole, nothing stale, jumped, lost or missing.
        await publish(client, ticks[APPLIED_TICKS].published())
        applied += TOPO.n_nodes + TOPO.n_sites
        await wait_until(lambda: current_values(metrics_port).get("rainier_ingest_frames_applied_total") == applied,
                         10, "the next healthy tick applied")
        final = sample_values(scrape(metrics_port))
    assert rejections(final) == rejections(after)
    assert {name: final[name] for name in (
        "rainier_fleet_chips_reporting", "rainier_ingest_frames_lost_total", "rainier_ingest_frames_missing",
        "rainier_ingest_frames_late_total", "rainier_ingest_publisher_changes_total",
        "rainier_ingest_publisher_restarts_total",
    )} == {"rainier_fleet_chips_reporting": TOPO.n_chips, "rainier_ingest_frames_lost_total": 0,
           "rainier_ingest_frames_missing": 0, "rainier_ingest_frames_late_total": 0,
           "rainier_ingest_publisher_changes_total": 0, "rainier_ingest_publisher_restarts_total": 0}
    code, _ = monitor.interrupt()
    assert code == 0, monitor.log()
    print(f"\n{len(hostile)} hostile payloads published in {published_s:.1f} s, all counted after {counted_s:.1f} s")
    for category, reasons in sorted(by_category(hostile).items()):
        print(f"  {category}: {dict(reasons)}")
    if not SEQ_JUMP:
        pytest.xfail(f"the monitor has no seq_jump check yet: {SEQ_JUMPS} sequence-jump payloads were held back")


async def until_counted(metrics_port: int, total: int) -> None:
    """Wait until ``total`` rejections are counted, or until the count has stood still for 5 s (then the
    comparison by reason says what went missing)."""
    last, changed = -1, time.monotonic()
    deadline = changed + within(45)
    while time.monotonic() < deadline:
        now = sum(rejections(await asyncio.to_thread(current_values, metrics_port)).values())
        if now >= total:
            return
        if now != last:
            last, changed = now, time.monotonic()
        elif time.monotonic() - changed > 5:
            return
        await asyncio.sleep(0.25)


async def settled(metrics_port: int) -> dict[str, float]:
    """Return a scrape once two analyses in a row left the fleet figures and rejection counts as they were."""
    previous = await asyncio.to_thread(current_values, metrics_port)
    deadline = time.monotonic() + within(15)
    while time.monotonic() < deadline:
        await asyncio.sleep(2.5 * TICK_S)
        values = await asyncio.to_thread(current_values, metrics_port)
        analysed = values["rainier_monitor_analyses_total"] - previous["rainier_monitor_analyses_total"]
        if analysed >= 2 and figures(values) == figures(previous) and rejections(values) == rejections(previous):
            return values
        previous = values
    raise AssertionError("the monitor's figures did not settle within 15 s")
