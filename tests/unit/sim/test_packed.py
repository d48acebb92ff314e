"""The simulator's one-pass encoding of a tick's node frames: the same bytes as encoding frame by frame, and
the same values as the batch mode carries for the same seed and tick."""

from __future__ import annotations

import dataclasses

import numpy as np

from rainierd.fleet.topology import Topology, build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches, tick_frames
from rainierd.sim.packed import NodeFramePacker
from rainierd.sim.sample import TickSample
from rainierd.wire import NodeBatch, NodeFrame, decode_binary, encode_binary
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
