"""One tick's node frames encoded at once: the simulator standing in for a
real fleet's agents, one binary frame per node, at ``rainier``'s 31,200
frames a tick.

Encoding frame by frame (``tick_frames`` then ``encode_binary``) costs
Python work per node: a ``NodeFrame``, a header ``pack``, four
``tobytes`` and a join, tens of microseconds each, so the simulator made
~263 of ``rainier``'s 31,200 frames a second.  Every node frame of a
healthy tick has the same shape, so here they are one array of a record
dtype whose bytes are exactly a node frame (``node_frame_dtype``): the
header fields and each kind of record are filled for every node by one
numpy assignment each, and the array's buffer is cut into one ``bytes``
per node.  A node missing chips (failed, so left out of its frame) has a
shorter frame: those few are encoded one by one as before.  The payloads
are byte for byte what ``encode_binary`` makes of ``tick_frames``' frames.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd.fleet import Topology
from rainierd.sim.frames import batch_plan, facility_frames, plan_batches, tick_frames
from rainierd.sim.sample import TickSample
from rainierd.wire import (
    BATCH_HEADER,
    KIND_BATCH,
    KIND_NODE,
    MAGIC,
    RECORD_DTYPES,
    RECORD_KINDS,
    WIRE_VERSION,
    batch_layout,
    column_dtypes,
    encode_binary,
    node_frame_dtype,
    node_topic,
)


@dataclass(frozen=True, slots=True)
class PackedTick:
    """One tick's node frames, binary encoded: ``payloads[i]`` is published on ``topics[i]``.

    Nodes whose frames have every chip come first, in node order, then the
    few that do not, in node order; a node that is silent or absent has no
    frame.  Facility frames are not included.
    """

    topics: list[str]
    payloads: list[bytes]


class NodeFramePacker:
    """Encodes every node frame of a tick of ``topology`` for ``publisher`` in one numpy pass."""

    def __init__(self, topology: Topology, *, publisher: str) -> None:
        self.topology = topology
        self.publisher = publisher
        self._publisher_bytes = publisher.encode()
        topo = topology
        self._topics = [node_topic(*topo.node_path(node)) for node in range(topo.n_nodes)]
        self._dtype = node_frame_dtype(len(self._publisher_bytes), topo.chips_per_node, topo.links_per_node,
                                       topo.efa_ports_per_node)
        self._frames = np.zeros(0, self._dtype)  # reused tick after tick: its pages are touched once

    def pack(self, sample: TickSample) -> PackedTick:
        """Return the binary node frames of ``sample``'s tick, with their topics."""
        topo = self.topology
        n, per_node = topo.n_nodes, topo.chips_per_node
        sent = np.flatnonzero(~sample.node_silent & topo.node_present)
        partial = sample.chip_silent.reshape(n, per_node)[sent].any(axis=1)
        whole = sent[~partial] if partial.any() else sent
        if self._frames.size != whole.size:
            self._frames = np.zeros(whole.size, self._dtype)
        frames, size = self._frames, self._dtype.itemsize
        frames["magic"] = MAGIC
        frames["version"] = WIRE_VERSION
        frames["kind"] = KIND_NODE
        frames["seq"] = sample.node_seq[whole]
        frames["tick"] = sample.tick
        frames["t_s"] = sample.node_t_s[whole]
        frames["entity"] = whole
        frames["n_chips"], frames["n_links"] = per_node, topo.links_per_node
        frames["n_efa"], frames["n_aux"] = topo.efa_ports_per_node, 1
        frames["publisher_len"] = len(self._publisher_bytes)
        frames["publisher"] = self._publisher_bytes
        # A node's records of one kind are one contiguous run of the fleet-wide array, so each node's run is
        # moved as one opaque item (a memcpy per node and kind): assigning the record fields instead copies
        # field by field, 3x slower at rainier.
        rows = frames.view(np.uint8).reshape(whole.size, size)
        every = whole.size == n
        for kind in ("chips", "links", "efa", "cooling"):
            records = getattr(sample, kind)
            field, at = self._dtype.fields[kind]  # type: ignore[index,misc]
            run = np.dtype((np.void, field.itemsize))
            runs = np.ascontiguousarray(records).view(run)
            rows[:, at:at + field.itemsize].view(run)[:, 0] = runs if every else runs[whole]
        # One bytes object a node (paho publishes bytes only): a copy of its row, cut from the one buffer.
        view = memoryview(rows.reshape(-1))  # type: ignore[arg-type]
        payloads = [bytes(view[at:at + size]) for at in range(0, whole.size * size, size)]
        topics = [self._topics[node] for node in whole.tolist()]
        if partial.any():
            for topic, frame in tick_frames(topo, sample, publisher=self.publisher, nodes=sent[partial].tolist(),
                                            sites=range(0)):
                topics.append(topic)
                payloads.append(encode_binary(frame))
        return PackedTick(topics, payloads)


class BatchPacker:
    """Encodes every batch frame of a tick of ``topology`` (``tick_batches``' frames, in its order) for
    ``publisher``, the batches of one shape all at once.

    Batch by batch, each of a batch's ~40 columns was a strided view the
    encoder copied on its own, and a ``NodeBatch`` of dictionaries was made
    to hold them: ~0.5 s a tick at ``rainier`` on a 2-core machine, half the
    simulator's CPU in ``benchmarks ingest``, taken from the monitor beside it.
    A batch whose nodes are all heard with every chip has the layout of every
    other batch of its node count, so those batches are rows of one byte
    array: each column is written into its place in every row by one numpy
    assignment from the records gathered in batch order, the headers by one,
    and each row is one payload.  A batch with a silent node or chip is
    encoded on its own as before.  The payloads are byte for byte what
    ``encode_binary`` makes of ``tick_batches``' frames
    (``tests/unit/sim/test_packed.py``).
    """

    def __init__(self, topology: Topology, *, publisher: str, nodes_per_batch: int) -> None:
        self.topology, self.publisher = topology, publisher
        self._publisher_bytes = publisher.encode()
        self._plan = batch_plan(topology, nodes_per_batch)
        batches = self._plan.batches
        self._first = np.array([first for _, _, first, _ in batches], np.int64)
        self._size = np.array([stop - first for _, _, first, stop in batches], np.int64)
        self._site = np.array([site for _, site, _, _ in batches], np.uint32)
        self._frames: dict[tuple[int, int, tuple[int, ...]], npt.NDArray[np.uint8]] = {}
        topo = topology
        self._per_kind = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node,
                          "cooling": 1}

    def pack(self, sample: TickSample) -> list[tuple[str, bytes, int]]:
        """Return the tick's binary batch frames, then its facility frames: (topic, payload, node frames held)."""
        topo, plan = self.topology, self._plan
        heard = ~sample.node_silent & topo.node_present
        heard &= ~sample.chip_silent.reshape(topo.n_nodes, -1).any(axis=1)
        regular = (np.logical_and.reduceat(heard[plan.order], self._first) if plan.batches
                   else np.zeros(0, dtype=bool))
        payloads: dict[int, bytes] = {}
        for size in np.unique(self._size[regular]).tolist():
            rows = np.flatnonzero(regular & (self._size == size))
            payloads.update(zip(rows.tolist(), self._pack_shape(sample, rows, size), strict=True))
        # The batches with a silent node or chip, each encoded on its own (one of silent nodes alone yields none).
        others = dict(plan_batches(topo, sample, plan, publisher=self.publisher,
                                   only=np.flatnonzero(~regular).tolist())) if len(payloads) < len(plan.batches) else {}
        out: list[tuple[str, bytes, int]] = []
        for at, (topic, _, _, _) in enumerate(plan.batches):
            if (payload := payloads.get(at)) is not None:
                out.append((topic, payload, int(self._size[at])))
            elif (batch := others.get(topic)) is not None:
                out.append((topic, encode_binary(batch), batch.n_nodes))
        out += [(topic, encode_binary(frame), 1)
                for topic, frame in facility_frames(self.topology, sample, self.publisher)]
        return out

    def _pack_shape(self, sample: TickSample, rows: npt.NDArray[np.int64], size: int) -> list[bytes]:
        """Return the payloads of the plan's batches ``rows``, each of ``size`` nodes, every one heard whole."""
        nodes = self._plan.order[self._first[rows][:, None] + np.arange(size)]  # (batches, size), in batch order
        totals = tuple(size * self._per_kind[kind] for kind in RECORD_KINDS)
        pub = self._publisher_bytes
        masks = _field_masks(sample)
        layout = batch_layout(size, totals, masks, len(pub))
        # A row a batch: its payload.  Reused tick after tick while the shape holds (its pages touched once); the
        # padding between columns is zero from the start and never written.
        key = (size, rows.size, masks)
        frames = self._frames.get(key)
        if frames is None:
            frames = self._frames[key] = np.zeros((rows.size, layout.end), np.uint8)
            while len(self._frames) > _KEPT_SHAPES:  # shapes that changed with the fleet's gaps: the oldest go
                del self._frames[next(iter(self._frames))]
        header = BATCH_HEADER.pack(MAGIC, WIRE_VERSION, KIND_BATCH, 0, sample.tick, sample.tick, sample.t_s, 0,
                                   size, *totals, *masks, len(pub))
        frames[:, :len(header)] = np.frombuffer(header, np.uint8)
        frames[:, _SITE_AT:_SITE_AT + 4].view("<u4")[:, 0] = self._site[rows]  # the one field batches differ in
        frames[:, len(header):len(header) + len(pub)] = np.frombuffer(pub, np.uint8)
        gathered: dict[str, npt.NDArray[np.void]] = {}
        for group, name, dtype, count, offset in layout.placed:
            place = frames[:, offset:offset + count * dtype.itemsize].view(dtype)
            if group == "counts":
                place[...] = self._per_kind[name]
            elif group == "node":
                place[...] = (nodes if name == "node" else sample.tick if name == "node_tick"
                              else getattr(sample, name)[nodes])  # node_seq, node_t_s
            else:  # a kind's records in batch order, one gather a kind, then a field at a time
                records = gathered.get(group)
                if records is None:
                    per = self._per_kind[group]
                    entities = (nodes[:, :, None] * per + np.arange(per)).reshape(rows.size, -1)
                    # np.take, not indexing: a structured array's fancy index copied field by field, 10x slower.
                    records = gathered[group] = np.take(getattr(sample, group), entities)
                place[...] = records[name]
        return [row.tobytes() for row in frames]


def _field_masks(sample: TickSample) -> tuple[int, ...]:
    """Return each kind's field mask: the wire's columns the simulator's records hold (``encode_batch``'s)."""
    return tuple(sum(1 << i for i, name in enumerate(column_dtypes(RECORD_DTYPES[kind]))
                     if name in (getattr(sample, kind).dtype.names or ())) for kind in RECORD_KINDS)


_KEPT_SHAPES: Final = 8  # batch arrays kept for reuse (a fleet has a few batch sizes, the count of each may vary)
_SITE_AT: Final = struct.calcsize("<4sBBHQQd")  # the site's offset in BATCH_HEADER (after seq, tick and t_s)
