"""Specification of the numpy core: ingest into the fleet state, and the
throughput model, on frames cut from the simulator (no I/O)."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.core import FleetState, Ingest, IngestStats, compute_throughput
from rainierd.hardware import TRN2
from rainierd.sim.fleet import FleetModel, TickSample
from rainierd.sim.frames import tick_frames
from rainierd.topology import build_topology
from rainierd.wire import CHIP_DTYPE, NodeFrame, decode_binary, encode_binary
from rainierd.wire.topics import parse_topic

PEAK = TRN2.fp8_dense_flops


class Fleet:
    """A simulated demo fleet feeding an Ingest directly."""

    def __init__(self, preset: str = "demo", seed: int = 1) -> None:
        self.topo = build_topology(preset)
        self.model = FleetModel(self.topo, np.random.default_rng(seed), tick_s=1.0, start_s=1_000.0)
        self.state = FleetState(self.topo)
        self.stats = IngestStats()
        self.ingest = Ingest(self.state, self.stats)
        self.tick = 0

    def frames(self) -> tuple[TickSample, list[tuple[str, NodeFrame]]]:
        sample = self.model.step(self.tick)
        self.tick += 1
        # Frames go through the binary codec, as over MQTT: they stop being
        # views of the model's arrays, which the next step overwrites.
        frames = [(t, decode_binary(encode_binary(f))) for t, f in tick_frames(self.topo, sample, publisher="sim")]
        return sample, [(t, f) for t, f in frames if isinstance(f, NodeFrame)]

    def feed(self, frames: list[tuple[str, NodeFrame]]) -> list[str | None]:
        return [self.ingest.accept(f, parse_topic(t)) for t, f in frames]

    def throughput(self) -> object:
        return compute_throughput(self.state, peak_flops_per_chip=PEAK, stale_after_ticks=3)


def replace(frame: NodeFrame, **changes: object) -> NodeFrame:
    fields = {k: getattr(frame, k) for k in ("publisher", "seq", "tick", "t_s", "node", "chips", "links",
                                              "efa", "cooling")}
    return NodeFrame(**(fields | changes))  # type: ignore[arg-type]


class TestIngest:
    def test_a_tick_lands_in_the_state(self) -> None:
        """After one flush every chip, link, port and node holds its record from the tick."""
        fleet = Fleet()
        sample, frames = fleet.frames()
        assert set(fleet.feed(frames)) == {None}
        result = fleet.ingest.flush()
        assert (result.applied, sum(result.rejected.values()), result.latest_tick) == (8, 0, 0)
        assert fleet.state.chips.cur.tobytes() == sample.chips.tobytes()
        assert fleet.state.links.cur.tobytes() == sample.links.tobytes()
        assert fleet.state.efa.cur.tobytes() == sample.efa.tobytes()
        assert fleet.state.cooling.cur.tobytes() == sample.cooling.tobytes()

    def test_two_frames_of_a_node_in_one_batch_apply_in_order(self) -> None:
        """When a node's frames for ticks 0 and 1 arrive before one flush, prev holds tick 0 and cur tick 1."""
        fleet = Fleet()
        s0, f0 = fleet.frames()
        chips0 = s0.chips.copy()  # the model overwrites its arrays on the next step
        s1, f1 = fleet.frames()
        fleet.feed(f0)
        fleet.feed(f1)
        fleet.ingest.flush()
        assert fleet.state.chips.prev.tobytes() == chips0.tobytes()
        assert fleet.state.chips.cur.tobytes() == s1.chips.tobytes()

    def test_sequence_gap_is_counted_as_loss(self) -> None:
        """Skipping two frames of one node counts two lost frames."""
        fleet = Fleet()
        for tick in range(4):
            _, frames = fleet.frames()
            fleet.feed(frames if tick in (0, 3) else frames[1:])
        assert fleet.stats.frames_lost == 2

    def test_replayed_frame_is_rejected(self) -> None:
        """A frame whose sequence number is not newer than the last is rejected as stale_seq."""
        fleet = Fleet()
        _, frames = fleet.frames()
        fleet.feed(frames)
        assert fleet.feed(frames[:1]) == ["stale_seq"]

    def test_new_publisher_restarts_the_sequence(self) -> None:
        """A node whose frames come from a new publisher is not counted as loss."""
        fleet = Fleet()
        _, frames = fleet.frames()
        fleet.feed(frames)
        topic, frame = frames[0]
        assert fleet.feed([(topic, replace(frame, publisher="sim-2", seq=0))]) == [None]
        assert (fleet.stats.frames_lost, fleet.stats.publisher_changes) == (0, 1)

    def test_unknown_node_and_topic_mismatch(self) -> None:
        """A frame for a node the topology lacks, or on another node's topic, is rejected."""
        fleet = Fleet()
        _, frames = fleet.frames()
        topic, frame = frames[0]
        assert fleet.feed([(topic, replace(frame, node=10_000))]) == ["unknown_node"]
        assert fleet.feed([(frames[1][0], frame)]) == ["topic_mismatch"]

    def test_bad_record_ids_reject_only_their_frame(self) -> None:
        """A frame listing another node's chip is rejected whole; the rest of the batch lands intact."""
        fleet = Fleet()
        sample, frames = fleet.frames()
        topic, frame = frames[0]
        chips = frame.chips.copy()
        chips["chip"][3] = 40  # chip 40 belongs to node 2
        fleet.feed([(topic, replace(frame, chips=chips)), *frames[1:]])
        result = fleet.ingest.flush()
        assert (result.applied, dict(result.rejected)) == (7, {"unknown_id": 1})
        assert (fleet.state.chips.tick[:16] == -1).all()
        assert fleet.state.chips.cur[16:].tobytes() == sample.chips[16:].tobytes()

    def test_duplicate_record_ids_reject_their_frame(self) -> None:
        """A frame listing the same chip twice is rejected as duplicate_id."""
        fleet = Fleet()
        _, frames = fleet.frames()
        topic, frame = frames[0]
        chips = frame.chips.copy()
        chips["chip"][1] = chips["chip"][0]
        fleet.feed([(topic, replace(frame, chips=chips))])
        assert dict(fleet.ingest.flush().rejected) == {"duplicate_id": 1}

    def test_partial_frames_update_only_what_they_carry(self) -> None:
        """A frame with a subset of its node's chips updates just those chips."""
        fleet = Fleet()
        _, frames = fleet.frames()
        topic, frame = frames[0]
        fleet.feed([(topic, replace(frame, chips=frame.chips[:4], links=frame.links[:0]))])
        fleet.ingest.flush()
        assert fleet.state.chips.tick[:16].tolist() == [0] * 4 + [-1] * 12
        assert (fleet.state.links.tick == -1).all()


class TestThroughput:
    def test_peak_is_chips_times_the_fp8_figure(self) -> None:
        """Fleet peak is 128 x 1.299e15 FLOP/s on the demo preset, whatever has reported."""
        fleet = Fleet()
        tp = fleet.throughput()
        assert tp.fleet_peak == pytest.approx(128 * 1.299e15)  # type: ignore[attr-defined]

    def test_matches_the_simulators_ground_truth(self) -> None:
        """Effective FLOP/s equals the simulator's truth; delivered matches it within the utilisation sensor noise."""
        fleet = Fleet()
        for _ in range(4):
            sample, frames = fleet.frames()
            fleet.feed(frames)
            fleet.ingest.flush()
        tp = fleet.throughput()
        assert tp.fleet_delivered == pytest.approx(sample.truth.delivered_flops, rel=1e-3)  # type: ignore[attr-defined]
        assert tp.fleet_effective == pytest.approx(sample.truth.effective_flops, rel=1e-9)  # type: ignore[attr-defined]
        assert tp.ultraserver_effective.sum() == pytest.approx(tp.fleet_effective)  # type: ignore[attr-defined]

    def test_first_sample_stands_in_with_delivered(self) -> None:
        """With one sample per chip there is no counter difference yet, so effective equals delivered."""
        fleet = Fleet()
        _, frames = fleet.frames()
        fleet.feed(frames)
        fleet.ingest.flush()
        tp = fleet.throughput()
        assert tp.fleet_effective == tp.fleet_delivered > 0  # type: ignore[attr-defined]

    def test_stale_chips_deliver_nothing(self) -> None:
        """A node silent for more than stale_after_ticks counts in peak but not in delivered."""
        fleet = Fleet()
        for tick in range(6):
            _, frames = fleet.frames()
            fleet.feed(frames if tick == 0 else frames[1:])
            fleet.ingest.flush()
        tp = fleet.throughput()
        assert tp.chips_fresh == 112  # type: ignore[attr-defined]
        assert tp.chip_delivered[:16].sum() == 0.0  # type: ignore[attr-defined]
        assert tp.fleet_peak == pytest.approx(128 * PEAK)  # type: ignore[attr-defined]

    def test_a_counter_reset_gives_no_negative_rate(self) -> None:
        """A FLOP counter that goes backwards (publisher restart) gives its delivered figure, not a negative rate."""
        fleet = Fleet()
        for _ in range(2):
            _, frames = fleet.frames()
            fleet.feed(frames)
            fleet.ingest.flush()
        _, frames = fleet.frames()
        topic, frame = frames[0]
        chips = frame.chips.copy()
        chips["fp8_flop_total"] = 0.0
        fleet.feed([(topic, replace(frame, publisher="restarted", chips=chips)), *frames[1:]])
        fleet.ingest.flush()
        tp = fleet.throughput()
        assert (tp.chip_effective >= 0).all()  # type: ignore[attr-defined]
        assert np.array_equal(tp.chip_effective[:16], tp.chip_delivered[:16])  # type: ignore[attr-defined]


class TestSimulator:
    def test_same_seed_same_telemetry(self) -> None:
        """Two models with one seed produce identical records."""
        a, b = Fleet(seed=3), Fleet(seed=3)
        for _ in range(3):
            sa, sb = a.model.step(a.tick), b.model.step(b.tick)
            a.tick += 1
            b.tick += 1
            assert sa.chips.tobytes() == sb.chips.tobytes()
            assert sa.links.tobytes() == sb.links.tobytes()

    def test_counters_are_monotone(self) -> None:
        """Every counter field of every record never decreases from tick to tick."""
        fleet = Fleet()
        before = None
        for _ in range(20):
            sample = fleet.model.step(fleet.tick)
            fleet.tick += 1
            now = {(kind, name): getattr(sample, kind)[name].copy()
                   for kind in ("chips", "links", "efa", "facility")
                   for name in getattr(sample, kind).dtype.names if name.endswith("_total")}
            if before is not None:
                assert all((now[k] >= before[k]).all() for k in now)
            before = now

    def test_healthy_values_are_plausible(self) -> None:
        """Utilisation, temperature, power and link bandwidth sit in plausible ranges."""
        fleet = Fleet()
        for _ in range(30):
            sample = fleet.model.step(fleet.tick)
            fleet.tick += 1
        chips = sample.chips
        assert 0.5 < chips["util"].mean() < 0.75
        assert 30 < chips["temp_c"].mean() < 80
        assert 200 < chips["power_w"].mean() < TRN2.chip_power_w
        assert (sample.links["bw_bytes_s"] > 0.9 * 128e9).all()
        assert sample.truth.peak_flops == 128 * PEAK

    def test_ticks_must_be_consecutive(self) -> None:
        """Skipping a tick is refused: counters would jump."""
        fleet = Fleet()
        fleet.model.step(0)
        with pytest.raises(ValueError, match="one tick at a time"):
            fleet.model.step(2)


def test_chip_dtype_is_little_endian() -> None:
    """The wire dtypes are explicitly little-endian, whatever the host."""
    assert all(CHIP_DTYPE.fields[n][0].byteorder in "<|=" for n in CHIP_DTYPE.names)  # type: ignore[index,union-attr]
