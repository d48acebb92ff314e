"""One tick of an aggregator's input turned into batch frames: pure, no I/O.

Each message is judged before it is decoded (is its topic a node topic of
this aggregator's share, naming a node the fleet has?), then decoded, then
checked against its topic (the frame's node is the topic's).  What passes is
grouped by site and topic bucket (one batch reaches exactly one monitor
shard) and by the fields its records carry (a batch column is known for
every record or for none), and cut into batches of at most ``max_nodes``
entries and ``max_frame_bytes`` bytes.  A node whose frames arrived twice in
one tick (its agent's clock runs a little fast against ours) goes into two
batches, in order: the monitor refuses a batch that lists a node twice.

Every entry keeps its own publisher, ``seq``, ``tick`` and ``t_s`` (the
batch's publisher table, docs/wire-format.md), so the monitor accounts for it
exactly as for the frame alone, and a frame dropped here is a gap in its
node's sequence that the monitor counts lost.  Every message has one fate,
counted: batched, or dropped for one reason (``DROP_REASONS``).

What is not judged here is left to the monitor, which judges every entry on
its own (a NaN, a record of another node, a stale ``seq``): passing it on
costs nothing and keeps one set of rules, in one place.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd.admission import Confirmed, StreamsView
from rainierd.aggregate._columns import Entry, columns_of, new_entry
from rainierd.errors import FrameError
from rainierd.fleet import Topology
from rainierd.wire import (
    BATCH_HEADER,
    KIND_BATCH,
    KIND_FACILITY,
    KIND_NODE,
    MAGIC,
    MAX_BATCH_NODES,
    NODE_FRAME_DTYPES,
    RECORD_DTYPES,
    RECORD_KINDS,
    NodeBatch,
    NodeFrame,
    Peek,
    Shard,
    batch_topic,
    bucket_of,
    decode_json,
    encode_batch,
    node_frame_head,
    parse_topic,
)

DROP_REASONS: Final = (
    "retained",  # delivered with the retain flag: a replay, not a frame sent now
    "oversize",  # larger than max_frame_bytes
    "over_share",  # its topic's confirmed publisher sent more than its share (rainierd.admission)
    "over_share_unconfirmed",  # anything else on its topic beyond its share: other publishers, replays, ...
    "too_many_topics",  # more topics busy at once than the shares track
    "backlog_full",  # more than the aggregator holds for one tick
    "bad_topic",  # not a node topic (bucket layout)
    "not_in_share",  # a node topic of another aggregator's share
    "unknown_node",  # a node the fleet does not have
    "malformed",  # the payload does not decode (decode_errors_total says why)
    "topic_mismatch",  # the frame is not the node its topic names (or not a node frame)
    "duplicate",  # the same (node, publisher, seq) twice in one tick
    "outbox_full",  # its batch was dropped from a full outbox (the broker away or slow)
    "unpublished",  # its batch was taken for publishing and the connection failed under it
)
_FULL: Final = {kind: (1 << len(RECORD_DTYPES[kind].names or ())) - 1 for kind in RECORD_KINDS}
_ALL: Final = tuple(_FULL[kind] for kind in RECORD_KINDS)
# A binary node frame's records carry its layout's fields, every one (later fields are unknown).
_BINARY: Final = tuple((1 << len(NODE_FRAME_DTYPES[kind].names or ())) - 1 for kind in RECORD_KINDS)
_ENTRY_BYTES: Final = 4 + 8 + 8 + 8 + 2 + 2 + 2 + 1 + 2 + 129  # node columns, its index, a table entry at most
_NAME_RE: Final = re.compile(r"[^A-Za-z0-9_.-]")
# A node's age floor rises this much a second of its sample time (clock drift), as the monitor's receive-lag
# floor does (core/streams.py, LAG_FLOOR_RISE): the floor the admission judges a frame far ahead against.
_AGE_FLOOR_RISE: Final = 1 / 300
_TOPICS: Final = 65_536  # topics whose judgement is remembered (a share of rainier has at most ~31,000 nodes)


def batch_name(client_id: str) -> str:
    """Return the batch-topic name of an aggregator (its client id, spelled as batch names may be)."""
    return _NAME_RE.sub("_", client_id)[:60] or "aggregator"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One batch frame to publish."""

    topic: str
    payload: bytes
    frames: int  # node entries it carries


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one tick of input became."""

    batches: list[Outgoing]
    frames: int  # node frames batched
    dropped: Counter[str] = field(default_factory=Counter)  # messages dropped, by reason
    decode_errors: Counter[str] = field(default_factory=Counter)  # malformed ones, by the decoder's reason
    narrowed: int = 0  # frames whose records disagreed on a field, sent without it
    ages_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))  # now - t_s of each batched frame
    confirmed: Confirmed = field(default_factory=Confirmed)  # whose frames each node's topic carries, for admission


def _masks(frame: NodeFrame) -> tuple[tuple[int, ...], bool]:
    """Return the fields every record of each kind carries, and whether some record carried more."""
    if not frame.known:
        return _ALL, False
    out, narrowed = [], False
    for kind in RECORD_KINDS:
        known = frame.known.get(kind)
        if known is None or not known.size:
            out.append(_FULL[kind])  # no records (or all fields): any column set fits
            continue
        every, some = int(np.bitwise_and.reduce(known)), int(np.bitwise_or.reduce(known))
        narrowed |= every != some
        out.append(every)
    return tuple(out), narrowed


class _NotANodeFrameError(Exception):
    """A well-formed frame of another kind (a facility frame, a batch) on a node topic."""


NodeHead = tuple[str, int, int, float, int, tuple[int, ...], int]
"""A binary node frame's header as ``wire.node_frame_head`` reads it."""


def head_of(payload: bytes) -> NodeHead | None:
    """Return the header of a binary node frame, checked, or None for any other payload (read by ``peek``).

    An aggregator reads it once as a message arrives, for its admission
    (``said_of``) and for its tick (``Batcher.tick``'s ``heads``): reading it
    twice cost 1.2 µs a frame (issue 39).

    Raises FrameError as ``peek`` does for the same payload.
    """
    if payload[:1] == MAGIC[:1] and len(payload) > 5 and payload[5] == KIND_NODE:
        return node_frame_head(payload)
    return None


def said_of(head: NodeHead) -> Peek:
    """Return what ``peek`` says of the binary node frame whose header is ``head``."""
    return _new_peek(Peek, ("binary", "node", head[4], (head[0],), head[3]))


_new_peek: Final = tuple.__new__


def _entry(payload: bytes, head: NodeHead | None = None) -> tuple[Entry, bool]:
    """Return a node frame payload as an entry, and whether it was narrowed (binary: by the block; JSON: decoded).

    ``head`` is the payload's ``head_of``, when already read.
    Raises FrameError as the decoders do, _NotANodeFrameError for a facility frame or a batch.
    """
    if head is None and payload[:1] == MAGIC[:1] and len(payload) > 5 and payload[5] == KIND_NODE:
        head = node_frame_head(payload)
    if head is not None:
        publisher, seq, tick, t_s, node, counts, offset = head
        size = _ENTRY_BYTES + len(payload) - offset
        return new_entry(Entry, (node, publisher, seq, tick, t_s, counts, payload, offset, _BINARY, True, size)), False
    if payload[:1] == MAGIC[:1] and len(payload) > 5 and payload[5] in (KIND_FACILITY, KIND_BATCH):
        raise _NotANodeFrameError
    if payload[:1] == b"{":
        frame = decode_json(payload)
        if not isinstance(frame, NodeFrame):
            raise _NotANodeFrameError
        masks, narrowed = _masks(frame)
        records = tuple(getattr(frame, kind) for kind in RECORD_KINDS)
        packed = b"".join([r.tobytes() for r in records])
        return new_entry(Entry, (frame.node, frame.publisher, frame.seq, frame.tick, frame.t_s,
                                 tuple(len(r) for r in records), packed, 0, masks, False,
                                 _ENTRY_BYTES + len(packed))), narrowed
    if not payload:
        raise FrameError("empty", "empty payload")
    if payload[:1] == MAGIC[:1]:
        node_frame_head(payload)  # raises the binary reason (bad magic, truncated, a batch's bad_kind ...)
    raise FrameError("unknown_encoding", f"first byte {payload[:1]!r} is neither '{{' nor 'R'")


class Batcher:
    """Turns each tick's node-frame messages of ``shard``'s share of ``topology`` into batch frames.

    It keeps only each batch topic's own sequence number between ticks.
    """

    def __init__(
        self, topology: Topology, *, shard: Shard, name: str, max_nodes: int = 128, max_frame_bytes: int = 1 << 20,
        tick_s: float = 1.0,
    ) -> None:
        if not 1 <= max_nodes <= MAX_BATCH_NODES:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH_NODES} nodes, not {max_nodes}")
        self.topology, self.shard, self.name = topology, shard, name
        self.max_nodes, self.max_frame_bytes = max_nodes, max_frame_bytes
        self._batch_seq: dict[tuple[int, int], int] = {}
        self._site = topology.ultraserver_site.tolist()
        self._node_us = topology.node_ultraserver.tolist()
        self._present = topology.node_present.tolist()
        self.ticks = 0
        # What its admission knows of each node's stream: the publisher of its frames batched in the last tick
        # that had one publisher only, its newest sample time, and the floor of its age at batching.
        n = topology.n_nodes
        self._publisher: tuple[str | None, ...] = (None,) * n
        self._t_s = np.full(n, -np.inf)
        self._age_s = np.full(n, np.nan)
        self.lead_slack_s = max(5 * tick_s, 5.0)  # as the monitor's streams judge a frame far ahead
        self._confirmed: Confirmed | None = None
        self._topics: dict[str, tuple[str | None, int]] = {}
        # Each node's site and topic bucket: what its batches are grouped by.
        self._place = [(self._site[us], bucket_of(us)) for us in self._node_us]

    def topic_reason(self, topic: str) -> str | None:
        """Return why a message on ``topic`` is dropped whatever it carries (``DROP_REASONS``), or None."""
        return self._topic(topic)[0]

    def _topic(self, topic: str) -> tuple[str | None, int]:
        """Return why a message on ``topic`` is dropped whatever it carries, or None and the node it names.

        Remembered by topic: a share's nodes send on the same topics tick
        after tick, and reading one (1.7 µs) was read twice a message.  At
        most ``_TOPICS`` are remembered, then forgotten at once (a flood of
        made-up topics costs its reads again, never memory).  Called on the
        event loop (``topic_reason``) and in the tick's thread: each answer
        is the same whoever computes it, so neither needs the other's.
        """
        known = self._topics.get(topic)
        if known is None:
            if len(self._topics) >= _TOPICS:
                self._topics.clear()
            known = self._topics[topic] = self._read_topic(topic)
        return known

    def _read_topic(self, topic: str) -> tuple[str | None, int]:
        address = parse_topic(topic)
        if address is None or address.kind != "node" or address.bucket < 0:
            return "bad_topic", -1
        if not self.shard.owns_ultraserver(address.ultraserver):
            return "not_in_share", -1
        node, us = address.node, address.ultraserver
        if not (node < len(self._present) and self._present[node]):
            return "unknown_node", -1
        if self._node_us[node] != us or self._site[us] != address.site:
            return "topic_mismatch", -1
        return None, node

    def _judge(
        self, topic: str, payload: bytes, head: NodeHead | None, dropped: Counter[str], decode_errors: Counter[str],
    ) -> tuple[Entry, bool] | None:
        """Return the message's node frame as an entry and whether it was narrowed, or None having counted
        why it is dropped."""
        reason, node = self._topics.get(topic) or self._topic(topic)
        if reason is not None:
            dropped[reason] += 1
            return None
        try:
            # The monitor checks every float of every entry at once; a NaN here is its to count.
            entry, narrowed = _entry(payload, head)
        except FrameError as exc:
            dropped["malformed"] += 1
            decode_errors[exc.reason] += 1
            return None
        except _NotANodeFrameError:
            dropped["topic_mismatch"] += 1
            return None
        if entry.node != node:
            dropped["topic_mismatch"] += 1
            return None
        return entry, narrowed

    def tick(self, messages: Sequence[tuple[str, bytes]], *, now_s: float,
             heads: Sequence[NodeHead | None] = ()) -> TickResult:
        """Return one tick's messages (topic, payload) as batch frames, every message's fate counted.

        ``heads``, when given, is each message's ``head_of``, read as it arrived.
        """
        dropped: Counter[str] = Counter()
        decode_errors: Counter[str] = Counter()
        narrowed = 0
        groups: dict[tuple[int, int, tuple[int, ...], bool], list[Entry]] = {}
        seen: set[tuple[int, str, int]] = set()
        place = self._place
        judge = self._judge
        for i, (topic, payload) in enumerate(messages):
            judged = judge(topic, payload, heads[i] if heads else None, dropped, decode_errors)
            if judged is None:
                continue
            entry, partial = judged
            key = (entry.node, entry.publisher, entry.seq)
            if key in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(key)
            narrowed += partial
            groups.setdefault((*place[entry.node], entry.masks, entry.binary), []).append(entry)
        batches: list[Outgoing] = []
        ages: list[npt.NDArray[np.float64]] = []
        per_topic: Counter[tuple[int, int]] = Counter()
        confirmed = self._learn(groups, now_s=now_s)
        for (site, bucket, masks, binary), entries in sorted(groups.items(), key=lambda item: item[0][:2]):
            for chunk in self._chunks(entries):
                batch = self._batch(site, bucket, masks, chunk, now_s, binary=binary)
                # Named by its place in the site's bucket this tick: the same few topics tick after tick.
                topic = batch_topic(site, bucket, f"{self.name}-{per_topic[site, bucket]}")
                per_topic[site, bucket] += 1
                batches.append(Outgoing(topic, encode_batch(batch), batch.n_nodes))
                ages.append(now_s - batch.node_t_s)
        self.ticks += 1
        return TickResult(batches, sum(b.frames for b in batches), dropped, decode_errors, narrowed,
                          np.concatenate(ages) if ages else np.zeros(0), confirmed)

    def _learn(self, groups: dict[tuple[int, int, tuple[int, ...], bool], list[Entry]], *, now_s: float) -> Confirmed:
        """Take the tick's entries into what the admission knows of each node's stream; return it.

        A node's publisher is the one its frames were batched under in the
        last tick that had one only: an aggregator keeps no sequence
        accounting (the monitor does), so two publishers in a tick (a
        fail-over, or an intruder on a broker without the ACL) change
        nothing until one is left.
        """
        publishers: dict[int, str | None] = {}
        newest: dict[int, float] = {}
        for entries in groups.values():
            for entry in entries:
                node = entry.node
                publishers[node] = entry.publisher if publishers.get(node, entry.publisher) == entry.publisher else None
                newest[node] = max(newest.get(node, -math.inf), entry.t_s)
        publisher = self._publisher
        if any(p is not None and publisher[node] != p for node, p in publishers.items()):
            named = list(publisher)
            for node, p in publishers.items():
                if p is not None:
                    named[node] = p
            publisher = self._publisher = tuple(named)
        if newest:
            nodes = np.fromiter(newest, np.int64, len(newest))
            t_s = np.fromiter(newest.values(), np.float64, len(newest))
            moved = np.maximum(t_s - self._t_s[nodes], 0.0)
            with np.errstate(invalid="ignore"):
                self._age_s[nodes] = np.fmin(self._age_s[nodes] + _AGE_FLOOR_RISE * moved, now_s - t_s)
            self._t_s[nodes] = np.maximum(self._t_s[nodes], t_s)
        was = self._confirmed or Confirmed()
        self._confirmed = Confirmed.of(StreamsView.of(publisher, self._t_s, self._age_s, before=was.nodes),
                                       was.sites, previous=self._confirmed, lead_slack_s=self.lead_slack_s)
        return self._confirmed

    def _chunks(self, entries: list[Entry]) -> list[list[Entry]]:
        """Cut one group into batches: each node at most once a batch (its frames in order), at most
        ``max_nodes`` entries and ``max_frame_bytes`` bytes each."""
        generations: list[list[Entry]] = []
        count: Counter[int] = Counter()
        for entry in entries:
            g = count[entry.node]
            count[entry.node] += 1
            if g == len(generations):
                generations.append([])
            generations[g].append(entry)
        room = self.max_frame_bytes - BATCH_HEADER.size - 256
        chunks: list[list[Entry]] = []
        for generation in generations:
            chunk: list[Entry] = []
            size = 0
            for entry in generation:
                need = entry.size
                if chunk and (len(chunk) == self.max_nodes or size + need > room):
                    chunks.append(chunk)
                    chunk, size = [], 0
                chunk.append(entry)
                size += need
            if chunk:
                chunks.append(chunk)
        return chunks

    def _batch(self, site: int, bucket: int, masks: tuple[int, ...], entries: list[Entry], now_s: float, *,
               binary: bool) -> NodeBatch:
        """Return the batch frame of ``entries`` (nodes of one site and bucket, each once; ``_columns``)."""
        table: dict[str, int] = {}
        index = [table.setdefault(entry.publisher, len(table)) for entry in entries]
        made = columns_of(entries, masks, binary=binary)
        key = (site, bucket)
        seq = self._batch_seq.get(key, 0)
        self._batch_seq[key] = seq + 1
        return NodeBatch(
            self.name, seq, self.ticks, now_s, site, made.node, made.seq, made.tick, made.t_s, made.counts,
            made.columns, node_publisher=np.array(index, np.uint16), publishers=tuple(table),
        )
