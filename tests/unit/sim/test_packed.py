"""The simulator's one-pass encodings of a tick: its node frames the same bytes as encoding frame by frame, and
the same values as the batch mode carries for the same seed and tick; its batch frames the same bytes, in the same
order, as encoding ``tick_batches``' one by one."""

from __future__ import annotations

import dataclasses

import numpy as np

from rainierd.fleet.topology import Topology, build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import batch_plan, tick_batches, tick_frames
from rainierd.sim.packed import BatchPacker, NodeFramePacker
from rainierd.sim.sample import TickSample
from rainierd.wire import MAX_BATCH_NODES, NodeBatch, NodeFrame, decode_binary, encode_binary
from rainierd.wire.records import RECORD_KINDS

PUBLISHER = "rainierd-sim-test"


def sample_of(topo: Topology, *, seed: int = 3, tick: int = 2) -> TickSample:
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=1.7e9)
    for t in range(tick):
        model.step(t)
    return model.step(tick)


def with_gaps(sample: TickSample) -> TickSample:
    """Node 1 silent, two chips of node 2 and one of node 5 failed (left out of their frames)."""
    node_silent, chip_silent = sample.node_silent.copy(), sample.chip_silent.copy()
    node_silent[1] = True
    chip_silent[[2 * 16 + 3, 2 * 16 + 7, 5 * 16]] = True
    return dataclasses.replace(sample, node_silent=node_silent, chip_silent=chip_silent)


def one_by_one(topo: Topology, sample: TickSample) -> dict[str, bytes]:
    return {topic: encode_binary(frame) for topic, frame in tick_frames(topo, sample, publisher=PUBLISHER)
            if isinstance(frame, NodeFrame)}


class TestNodeFramePacker:
    def test_a_whole_tick_is_byte_for_byte_the_frames_encoded_one_by_one(self) -> None:
        """Every node heard, every chip: the packed payloads are encode_binary's of tick_frames', on the same
        topics."""
        topo = build_topology("sites=1,ultraservers=8")
        sample = sample_of(topo)
        packed = NodeFramePacker(topo, publisher=PUBLISHER).pack(sample)
        assert dict(zip(packed.topics, packed.payloads, strict=True)) == one_by_one(topo, sample)

    def test_silent_nodes_and_failed_chips_are_encoded_as_one_by_one(self) -> None:
        """A silent node has no frame and a node with failed chips a shorter one, exactly as frame by frame."""
        topo = build_topology("sites=1,ultraservers=8")
        sample = with_gaps(sample_of(topo))
        packed = NodeFramePacker(topo, publisher=PUBLISHER).pack(sample)
        assert len(packed.topics) == topo.n_nodes - 1
        assert dict(zip(packed.topics, packed.payloads, strict=True)) == one_by_one(topo, sample)

    def test_the_packer_reused_over_ticks_of_changing_shape_stays_exact(self) -> None:
        """One packer over a whole tick, a tick with gaps, then a whole tick again: each exact."""
        topo = build_topology("sites=1,ultraservers=4")
        packer = NodeFramePacker(topo, publisher=PUBLISHER)
        for sample in (sample_of(topo, tick=1), with_gaps(sample_of(topo, tick=2)), sample_of(topo, tick=3)):
            packed = packer.pack(sample)
            assert dict(zip(packed.topics, packed.payloads, strict=True)) == one_by_one(topo, sample)

    def test_frames_decode_to_the_values_the_batch_mode_carries(self) -> None:
        """Same seed and tick: each packed node frame decodes to its node's entry of the batch frames (seq, tick,
        sample time and every record field)."""
        topo = build_topology("sites=2,ultraservers=6")
        sample = with_gaps(sample_of(topo, seed=11, tick=4))
        packed = NodeFramePacker(topo, publisher=PUBLISHER).pack(sample)
        from_frames = {}
        for payload in packed.payloads:
            frame = decode_binary(payload)
            assert isinstance(frame, NodeFrame)
            from_frames[frame.node] = (frame.seq, frame.tick, frame.t_s,
                                       {kind: getattr(frame, kind).tobytes() for kind in RECORD_KINDS})
        from_batches = {}
        for _topic, batch in tick_batches(topo, sample, publisher=PUBLISHER, nodes_per_batch=128):
            if not isinstance(batch, NodeBatch):
                continue
            decoded = decode_binary(encode_binary(batch))
            assert isinstance(decoded, NodeBatch)
            starts = {kind: np.concatenate([[0], np.cumsum(decoded.counts[kind], dtype=np.int64)])
                      for kind in RECORD_KINDS}
            for i, node in enumerate(decoded.node.tolist()):
                records = {}
                for kind in RECORD_KINDS:
                    dtype = getattr(sample, kind).dtype
                    rows = np.zeros(int(decoded.counts[kind][i]), dtype)
                    for name, column in decoded.columns[kind].items():
                        rows[name] = column[starts[kind][i]:starts[kind][i + 1]]
                    records[kind] = rows.tobytes()
                from_batches[node] = (int(decoded.node_seq[i]), int(decoded.node_tick[i]),
                                      float(decoded.node_t_s[i]), records)
        assert from_frames == from_batches


def batch_by_batch(topo: Topology, sample: TickSample, nodes_per_batch: int) -> list[tuple[str, bytes, int]]:
    return [(topic, encode_binary(frame), frame.n_nodes if isinstance(frame, NodeBatch) else 1)
            for topic, frame in tick_batches(topo, sample, publisher=PUBLISHER, nodes_per_batch=nodes_per_batch)]


def distinct_nodes(sample: TickSample) -> TickSample:
    """Each node its own sequence number and sample time (a simulated tick's are one), so a mix-up shows."""
    n = sample.node_seq.size
    return dataclasses.replace(sample, node_seq=(sample.node_seq + np.arange(n, dtype=np.uint64)).astype(np.uint64),
                               node_t_s=sample.node_t_s + np.arange(n) * 1e-3)


def silent_batch(topo: Topology, sample: TickSample, nodes_per_batch: int) -> TickSample:
    """Every node of the tick's third batch silent: a batch that yields no frame."""
    plan = batch_plan(topo, nodes_per_batch)
    _, _, first, stop = plan.batches[2]
    order = plan.order
    node_silent = sample.node_silent.copy()
    node_silent[order[first:stop]] = True
    return dataclasses.replace(sample, node_silent=node_silent)


def mid_ultraserver_gap(topo: Topology, sample: TickSample, nodes_per_batch: int) -> TickSample:
    """A chip failed in the first node of the last site's first batch that starts inside an UltraServer: the first
    batch of its site encoded on its own (its records are found from its UltraServers', so an offset taken from
    the batch's start instead reads another node's)."""
    plan = batch_plan(topo, nodes_per_batch)
    last = topo.n_sites - 1
    first = next(f for _, site, f, _ in plan.batches if site == last and f % topo.nodes_per_ultraserver)
    chip_silent = sample.chip_silent.copy()
    chip_silent[int(plan.order[first]) * topo.chips_per_node + 4] = True
    return dataclasses.replace(sample, chip_silent=chip_silent)


class TestBatchPacker:
    def test_a_whole_tick_is_byte_for_byte_tick_batches_encoded_in_its_order(self) -> None:
        """Two sites, batches of two sizes (a bucket's nodes over the batch size): the same topics, payloads and
        frame counts, in the same order, facility frames last."""
        topo = build_topology("sites=2,ultraservers=600")
        sample = distinct_nodes(sample_of(topo))
        packed = BatchPacker(topo, publisher=PUBLISHER, nodes_per_batch=6).pack(sample)
        assert len({len(p) for _, p, n in packed if n > 1}) > 1  # more than one shape of batch
        assert packed == batch_by_batch(topo, sample, 6)

    def test_silent_nodes_failed_chips_and_a_silent_batch_are_encoded_as_batch_by_batch(self) -> None:
        """Batches holding a silent node or a failed chip are encoded on their own, in their place (one starting
        inside an UltraServer too); a batch of silent nodes alone sends nothing."""
        topo = build_topology("sites=2,ultraservers=600")
        sample = mid_ultraserver_gap(topo, silent_batch(topo, with_gaps(distinct_nodes(sample_of(topo, seed=5))), 6), 6)
        packed = BatchPacker(topo, publisher=PUBLISHER, nodes_per_batch=6).pack(sample)
        expected = batch_by_batch(topo, sample, 6)
        assert len(expected) < len(BatchPacker(topo, publisher=PUBLISHER, nodes_per_batch=6).pack(sample_of(topo)))
        assert packed == expected

    def test_one_packer_over_ticks_of_changing_shape_and_the_largest_batches_stays_exact(self) -> None:
        """A whole tick, one with gaps, a whole one again, at the largest batch a frame may hold."""
        topo = build_topology("sites=1,ultraservers=1200")
        packer = BatchPacker(topo, publisher=PUBLISHER, nodes_per_batch=MAX_BATCH_NODES)
        for sample in (sample_of(topo, tick=1), with_gaps(sample_of(topo, tick=2)), sample_of(topo, tick=3)):
            assert packer.pack(sample) == batch_by_batch(topo, sample, MAX_BATCH_NODES)

    def test_payloads_decode_to_the_batches_they_encode(self) -> None:
        """Each packed payload decodes (the monitor's decoder) to its batch's site, nodes and every column."""
        topo = build_topology("sites=2,ultraservers=300")
        sample = distinct_nodes(sample_of(topo, seed=8, tick=3))
        packed = BatchPacker(topo, publisher=PUBLISHER, nodes_per_batch=10).pack(sample)
        frames = [frame for _, frame in tick_batches(topo, sample, publisher=PUBLISHER, nodes_per_batch=10)]
        assert len(packed) == len(frames)
        for (_, payload, _), frame in zip(packed, frames, strict=True):
            decoded = decode_binary(payload)
            assert type(decoded) is type(frame)
            if isinstance(frame, NodeBatch):
                assert isinstance(decoded, NodeBatch)
                assert (decoded.site, decoded.node.tolist(), decoded.node_seq.tolist(), decoded.node_t_s.tolist()) \
                    == (frame.site, frame.node.tolist(), frame.node_seq.tolist(), frame.node_t_s.tolist())
                for kind in RECORD_KINDS:
                    for name, column in frame.columns[kind].items():
                        np.testing.assert_array_equal(decoded.columns[kind][name], column)
