"""Specification of ingest's one table of rejection rules: node frames, batches
and site frames are judged by the same rules, a frame failing several is
charged to the first in the table's order, and a rejected frame changes
nothing, not even the table of publisher ids."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from rainierd.core.ingest import FRAME_REASONS, Received
from rainierd.core.ingest._window import as_batch
from rainierd.sim.frames import tick_batches, tick_frames
from rainierd.wire import FacilityFrame, NodeBatch, NodeFrame
from rainierd.wire.topics import batch_topic, facility_topic, node_topic, parse_topic
from tests.unit.core.test_core import Fleet


def site_frame(fleet: Fleet) -> FacilityFrame:
    """Return the demo fleet's facility frame of its next tick."""
    sample = fleet.model.step(fleet.tick)
    fleet.tick += 1
    return next(f for _, f in tick_frames(fleet.topo, sample, publisher="sim") if isinstance(f, FacilityFrame))


def rejected(fleet: Fleet, topic: str, frame: NodeFrame | NodeBatch | FacilityFrame) -> Counter[str]:
    """Return what one frame on ``topic`` was rejected for, alone in its window."""
    result = fleet.ingest.apply([Received(frame.t_s, parse_topic(topic), frame, frame.t_s)])
    return result.rejected


class TestSiteFrames:
    def test_a_sample_time_that_is_not_finite_is_rejected_as_for_a_node_frame(self) -> None:
        """A facility frame whose sample time is NaN is non_finite, and its site keeps no sample."""
        fleet = Fleet()
        frame = replace(site_frame(fleet), t_s=float("nan"))
        assert rejected(fleet, facility_topic(0), frame) == Counter(non_finite=1)
        assert int(fleet.state.facility.samples[0]) == 0

    def test_a_frame_with_two_facility_records_is_a_bad_header(self) -> None:
        """A site frame carries exactly one facility record; two are bad_header."""
        fleet = Fleet()
        frame = site_frame(fleet)
        frame = replace(frame, facility=np.concatenate([frame.facility, frame.facility]))
        assert rejected(fleet, facility_topic(0), frame) == Counter(bad_header=1)

    def test_a_site_frame_on_a_node_topic_is_a_topic_mismatch(self) -> None:
        """The topic's family must be the frame's."""
        fleet = Fleet()
        assert rejected(fleet, node_topic(0, 0, 0), site_frame(fleet)) == Counter(topic_mismatch=1)


class TestNodeFrames:
    def test_a_node_frame_on_a_batch_topic_is_a_topic_mismatch(self) -> None:
        """A node frame must come on its own node's topic, not a batch's."""
        fleet = Fleet()
        _, frames = fleet.frames()
        _, frame = frames[0]
        assert rejected(fleet, batch_topic(0, 0, "n0-0"), frame) == Counter(topic_mismatch=1)

    def test_a_topic_naming_another_ultraserver_is_a_topic_mismatch(self) -> None:
        """Site and node right, UltraServer wrong: the topic still does not name the frame's node."""
        fleet = Fleet()
        _, frames = fleet.frames()
        _, frame = frames[0]
        site, ultraserver, node = fleet.topo.node_path(frame.node)
        assert rejected(fleet, node_topic(site, ultraserver + 1, node), frame) == Counter(topic_mismatch=1)

    def test_a_frame_failing_two_rules_is_charged_to_the_first(self) -> None:
        """A node beyond the fleet on a batch topic is unknown_node: that rule comes before topic_mismatch."""
        fleet = Fleet()
        _, frames = fleet.frames()
        _, frame = frames[0]
        assert FRAME_REASONS.index("unknown_node") < FRAME_REASONS.index("topic_mismatch")
        outside = replace(frame, node=fleet.topo.n_nodes + 3)
        assert rejected(fleet, batch_topic(0, 0, "n0-0"), outside) == Counter(unknown_node=1)

    def test_a_batch_whose_header_names_another_site_than_its_topic_is_a_topic_mismatch(self) -> None:
        """Every node frame of such a batch is rejected, one count each."""
        fleet = Fleet()
        sample = fleet.model.step(fleet.tick)
        topic, batch = next((t, f) for t, f in tick_batches(fleet.topo, sample, publisher="sim", nodes_per_batch=4)
                            if isinstance(f, NodeBatch))
        moved = replace(batch, site=batch.site + 1)
        assert rejected(fleet, topic, moved) == Counter(topic_mismatch=moved.n_nodes)


class TestRejectedFramesChangeNothing:
    def test_a_rejected_frame_does_not_number_its_publisher(self) -> None:
        """The checkpoint's publisher table after a window of rejected frames is the one before it."""
        fleet = Fleet()
        fleet.feed(fleet.frames()[1])
        before = fleet.ingest.checkpoint()
        _, frames = fleet.frames()
        topic, frame = frames[0]
        stranger = replace(frame, publisher="stranger", t_s=float("inf"))
        assert rejected(fleet, topic, stranger) == Counter(non_finite=1)
        after = fleet.ingest.checkpoint()
        assert after["publishers.utf8"].tobytes() == before["publishers.utf8"].tobytes() == b"sim"


def _joined(*frames: NodeFrame) -> NodeBatch:
    """Return node frames as one batch (an aggregator's), in the order given."""
    parts = [as_batch(frame) for frame in frames]
    first = parts[0]
    return replace(
        first, node=np.concatenate([p.node for p in parts]), node_seq=np.concatenate([p.node_seq for p in parts]),
        node_tick=np.concatenate([p.node_tick for p in parts]), node_t_s=np.concatenate([p.node_t_s for p in parts]),
        counts={kind: np.concatenate([p.counts[kind] for p in parts]) for kind in first.counts},
        columns={kind: {name: np.concatenate([p.columns[kind][name] for p in parts]) for name in columns}
                 for kind, columns in first.columns.items()},
        site=0,
    )


class TestBatchEntries:
    def test_a_node_of_another_bucket_in_a_batch_is_a_topic_mismatch(self) -> None:
        """Node 4 (UltraServer 1, bucket 1) in a batch on bucket 0's topic is rejected, node 0 beside it applied
        (main applied both)."""
        fleet = Fleet()
        frames = {f.node: f for _, f in fleet.frames()[1] if isinstance(f, NodeFrame)}
        batch = _joined(frames[0], frames[4])
        result = fleet.ingest.apply([Received(batch.t_s, parse_topic(batch_topic(0, 0, "agg")), batch, batch.t_s)])
        assert (dict(result.rejected), result.applied) == ({"topic_mismatch": 1}, 1)

    def test_a_node_listed_twice_in_one_batch_is_rejected_both_times(self) -> None:
        """Node 0 twice in one batch (two different frames of it): neither can be told the genuine one, so both
        entries are duplicate_node, node 1 beside them applied (main applied node 0 twice)."""
        fleet = Fleet()
        frames = {f.node: f for _, f in fleet.frames()[1] if isinstance(f, NodeFrame)}
        again = replace(frames[0], seq=frames[0].seq + 1, t_s=frames[0].t_s + 1.0)
        batch = _joined(frames[0], again, frames[1])
        result = fleet.ingest.apply([Received(batch.t_s, parse_topic(batch_topic(0, 0, "agg")), batch, batch.t_s)])
        assert (dict(result.rejected), result.applied) == ({"duplicate_node": 2}, 1)
