"""Specification of the monitor's one configuration: every setting that the
core judges by reaches the code that uses it (a setting that is parsed and
then ignored is a defect), and the hardware is the one injected, never the
global default."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.detect import (
    ChipParams,
    CoolingParams,
    DetectionParams,
    EfaParams,
    NeuronLinkParams,
    PathParams,
    SlowLossParams,
)
from rainierd.core.ingest import Message
from rainierd.core.model import ModelParams
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.inventory import load_topology
from rainierd.fleet.topology import build_topology
from rainierd.settings import Settings, load_settings
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import NodeFrame, encode_binary

# Every setting the core is configured by, each away from its default.
CHANGED = {"tick_s": 0.5, "stale_after_ticks": 7, "max_frame_bytes": 4096, "max_clock_skew_s": 60.0,
           "max_seq_jump": 500, "efa_ports_per_node": 8, "feed_lost_share": 0.75, "feed_hold_s": 30.0}

DATA = Path(__file__).parents[2] / "data"


def settings() -> Settings:
    return load_settings(dict(CHANGED))


def core_of(s: Settings) -> MonitorCore:
    return MonitorCore(load_topology(s.topology, efa_ports_per_node=s.efa_ports_per_node), s.monitor_config())


def frames(topo: object, tick: int, start_s: float, publisher: str = "p") -> list[tuple[str, NodeFrame]]:
    model = FleetModel(topo, np.random.default_rng(0), tick_s=0.5, start_s=start_s)  # type: ignore[arg-type]
    for k in range(tick):
        model.step(k)
    return [(t, f) for t, f in tick_frames(topo, model.step(tick), publisher=publisher)  # type: ignore[arg-type]
            if isinstance(f, NodeFrame)]


def messages(items: list[tuple[str, NodeFrame]], *, rx_s: float, wall_s: float) -> list[Message]:
    return [Message(rx_s, t, encode_binary(f), wall_s) for t, f in items]


class TestEverySettingArrives:
    def test_the_settings_build_a_config_carrying_each_of_them(self) -> None:
        """Each field the core's configuration shares with the settings carries the settings' value."""
        config = settings().monitor_config()
        shared = {f.name for f in dataclasses.fields(MonitorConfig)} & set(CHANGED)
        assert shared == set(CHANGED) - {"efa_ports_per_node"}  # that one arrives inside the hardware
        assert {name: getattr(config, name) for name in shared} == {k: CHANGED[k] for k in shared}
        assert config.hardware.efa_ports_per_node == 8
        assert config.hardware.fp8_dense_flops == TRN2.fp8_dense_flops

    def test_staleness_reaches_the_throughput_and_the_chip_detector(self) -> None:
        """7 ticks of 0.5 s: chips heard at 0 still deliver at 3.4 s of listening and are stale at 3.6 s."""
        core = core_of(settings())
        now = time.time()
        core.analyse(messages(frames(core.topology, 0, now), rx_s=0.0, wall_s=now), now_s=0.0)
        at_3_4 = core.analyse([], now_s=3.4)
        assert at_3_4.throughput.chips_fresh == core.topology.n_chips
        assert core.detector.chips.tracker.state.max() == 0
        at_3_6 = core.analyse([], now_s=3.6)
        assert at_3_6.throughput.chips_fresh == 0
        assert core.detector.params.chips.stale_after_s == core.detector.chips.params.stale_after_s == 3.5

    def test_admission_bounds_reach_ingest(self) -> None:
        """max_frame_bytes, max_clock_skew_s and max_seq_jump each refuse what they bound, and only that."""
        core = core_of(settings())
        now = time.time()
        (topic, frame), *rest = frames(core.topology, 0, now)
        core.analyse(messages([(topic, frame), *rest], rx_s=0.0, wall_s=now), now_s=0.0)
        big = Message(0.1, topic, b"R" + bytes(4096), now)
        skewed = messages([(topic, replace(frame, seq=1, t_s=now - 61.0))], rx_s=0.1, wall_s=now)
        near = messages([(rest[0][0], replace(rest[0][1], seq=1, t_s=now + 1.0))], rx_s=0.1, wall_s=now + 60.0)
        # 500 frames skipped are a gap its 300 s could hold (core/streams.py); 501 are beyond max_seq_jump.
        jump = messages([(rest[1][0], replace(rest[1][1], seq=502, t_s=now + 300))], rx_s=0.1, wall_s=now + 300)
        within = messages([(rest[2][0], replace(rest[2][1], seq=501, t_s=now + 300))], rx_s=0.1, wall_s=now + 300)
        flush = core.analyse([big, *skewed, *near, *jump, *within], now_s=0.1).flush
        assert dict(flush.rejected) == {"oversize": 1, "clock_skew": 1, "seq_jump": 1}
        assert flush.applied == 2

    def test_the_feed_rule_reaches_the_feed_detector(self) -> None:
        """The feed's share and hold, and the staleness and tick it judges silence by, are the settings'."""
        params = core_of(settings()).detector.feed.params
        assert (params.lost_share, params.hold_s, params.stale_after_s, params.tick_s) == (0.75, 30.0, 3.5, 0.5)

    def test_efa_ports_reach_the_failover_model(self) -> None:
        """8 ports a node: a node keeps 7/8 of its EFA bandwidth when one is down."""
        core = core_of(settings())
        assert core.detector.efa.failover_fraction == pytest.approx(7 / 8)

    def test_an_inventory_s_efa_ports_are_the_monitor_s_without_the_flag(self, tmp_path: Path) -> None:
        """An inventory of 8 EFA ports a node, the setting left at its 16: the monitor builds (it exited with a
        traceback, the hardware and topology disagreeing) and a node keeps 7/8 of its EFA with one port down."""
        inventory = tmp_path / "fleet.toml"
        inventory.write_text("efa_ports_per_node = 8\n" + (DATA / "inventory-two-sites.toml").read_text())
        s = load_settings({"topology": str(inventory)})
        assert s.efa_ports_per_node == 16
        topology = load_topology(s.topology, efa_ports_per_node=s.efa_ports_per_node)
        assert topology.efa_ports_per_node == 8
        core = MonitorCore(topology, s.monitor_config(topology))
        assert core.detector.efa.failover_fraction == pytest.approx(7 / 8)

    def test_hardware_and_topology_must_agree(self) -> None:
        with pytest.raises(ValueError, match="EFA ports"):
            MonitorCore(build_topology("demo"), settings().monitor_config())


class TestInjectedHardware:
    def test_the_link_detector_counts_lanes_of_the_hardware_it_is_given(self) -> None:
        """Every link reporting 4 lanes up: degraded (lanes) on 8-lane hardware, healthy on 4-lane hardware."""
        topo = build_topology("demo")
        now = time.time()
        verdicts = {}
        for lanes in (8, 4):
            core = MonitorCore(topo, MonitorConfig(hardware=replace(TRN2, neuronlink_lanes=lanes)))
            for tick in range(6):  # persistence is in seconds: 2.5 s of samples 0.5 s apart
                items = [(t, replace(f, links=_with_lanes(f, 4))) for t, f in frames(topo, tick, now)]
                core.analyse(messages(items, rx_s=0.5 * tick, wall_s=now + 0.5 * tick), now_s=0.5 * tick)
            verdicts[lanes] = int((core.detector.links.tracker.state > 0).sum())
        assert verdicts == {8: topo.n_links, 4: 0}

    def test_peak_is_the_injected_chips(self) -> None:
        topo = build_topology("demo")
        core = MonitorCore(topo, MonitorConfig(hardware=replace(TRN2, fp8_dense_flops=1e15)))
        now = time.time()
        analysis = core.analyse(messages(frames(topo, 0, now), rx_s=0.0, wall_s=now), now_s=0.0)
        assert analysis.throughput.fleet_peak == pytest.approx(topo.n_chips * 1e15)

    def test_detection_parameters_are_the_ones_given(self) -> None:
        """Each path detector holds the very parameters given for it, and the slow-loss test its own."""
        links, efa = NeuronLinkParams(raise_after_s=5.0), EfaParams(clear_after_s=30.0)
        loss = SlowLossParams(loss_learn_s=60.0)
        detection = DetectionParams(neuronlink=links, efa=efa, slow_loss=loss)
        core = MonitorCore(build_topology("demo"), MonitorConfig(detection=detection))
        assert core.detector.links.params is links
        assert core.detector.efa.params is efa
        assert core.detector.efa.slow_loss.params is loss

    def test_the_path_detectors_parameters_share_one_base_and_nothing_else(self) -> None:
        """NeuronLink and EFA parameters add disjoint fields to the shared PathParams; slow loss has its own."""
        base = {f.name for f in dataclasses.fields(PathParams)}
        links = {f.name for f in dataclasses.fields(NeuronLinkParams)} - base
        efa = {f.name for f in dataclasses.fields(EfaParams)} - base
        loss = {f.name for f in dataclasses.fields(SlowLossParams)}
        assert base <= {f.name for f in dataclasses.fields(NeuronLinkParams)}
        assert base <= {f.name for f in dataclasses.fields(EfaParams)}
        assert not links & efa
        assert not loss & (base | links | efa)
        assert all(name.startswith("loss_") for name in loss)


def _moved(params: object) -> object:
    """Return ``params`` with every numeric field moved off its default (x 1.37), so each can be traced."""
    changes = {f.name: type(v)(v * 1.37 + 1) for f in dataclasses.fields(params)  # type: ignore[arg-type]
               if isinstance(v := getattr(params, f.name), (int, float)) and not isinstance(v, bool)}
    return replace(params, **changes)  # type: ignore[type-var]


class TestEveryDetectionSettingReachesItsDetector:
    """Every threshold, persistence, baseline and model figure, each moved off its default, is the one the
    detector that uses it holds: in its CUSUMs, its trackers, its baselines, its slow-loss test, the model."""

    @pytest.fixture
    def core(self) -> MonitorCore:
        detection = DetectionParams(neuronlink=_moved(NeuronLinkParams()), efa=_moved(EfaParams()),  # type: ignore[arg-type]
                                    slow_loss=_moved(SlowLossParams()), chips=_moved(ChipParams()),  # type: ignore[arg-type]
                                    cooling=_moved(CoolingParams()))  # type: ignore[arg-type]
        return MonitorCore(build_topology("demo"), MonitorConfig(detection=detection,
                                                                 model=_moved(ModelParams())))  # type: ignore[arg-type]

    def test_neuronlinks(self, core: MonitorCore) -> None:
        """The NeuronLink detector's CUSUMs, band, tracker and baselines hold its moved parameters."""
        links = core.detector.links
        p = links.params
        assert p == core.config.detection.neuronlink
        for cusum in (links.bw, links.latency):
            assert (cusum.k, cusum.h, cusum.cap, cusum.ceiling) == pytest.approx(
                (p.z_k, p.z_h, p.z_cap, p.z_h + p.drain_s * p.z_k))
        for cusum in (links.bw, links.latency, links.errors, links.band):
            assert cusum.samples == pytest.approx(p.samples_to_raise)
        assert (links.errors.k, links.errors.h, links.errors.cap) == pytest.approx(
            (p.errors_k, p.errors_h, p.errors_cap))
        assert links.band.h == pytest.approx(0.5 * p.band_h_s)
        assert links.tracker.clear_after_s == pytest.approx(p.clear_after_s)
        assert links.tracker.raise_after_s[1] == pytest.approx(p.raise_after_s)
        for base in (links.bw_base, links.latency_base):
            assert (base.halflife_s, base.learn_s, base.clip) == pytest.approx(
                (p.baseline_halflife_s, p.baseline_learn_s, p.baseline_clip))

    def test_efa(self, core: MonitorCore) -> None:
        """The EFA detector's CUSUMs, band, tracker and baselines hold its own moved parameters, not the links'."""
        efa = core.detector.efa
        p = efa.params
        assert p == core.config.detection.efa
        for cusum in (efa.throughput, efa.latency):
            assert (cusum.k, cusum.h, cusum.cap, cusum.ceiling) == pytest.approx(
                (p.z_k, p.z_h, p.z_cap, p.z_h + p.drain_s * p.z_k))
        for cusum in (efa.throughput, efa.latency, efa.retrans, efa.band):
            assert cusum.samples == pytest.approx(p.samples_to_raise)
        assert (efa.retrans.k, efa.retrans.h, efa.retrans.cap) == pytest.approx(
            (p.retrans_k, p.retrans_h, p.retrans_cap))
        assert efa.band.h == pytest.approx(0.5 * p.band_h_s)
        assert efa.tracker.clear_after_s == pytest.approx(p.clear_after_s)
        assert efa.tracker.raise_after_s[1] == pytest.approx(p.raise_after_s)
        for base in (efa.share_base, efa.latency_base):
            assert (base.halflife_s, base.learn_s, base.clip) == pytest.approx(
                (p.baseline_halflife_s, p.baseline_learn_s, p.baseline_clip))
        driver = efa.driver
        assert driver.params is p
        assert (driver.drops.k, driver.drops.h, driver.drops.cap, driver.drops.samples) == pytest.approx(
            (p.drops_k, p.drops_h, p.drops_cap, p.samples_to_raise))
        assert (driver.wr_errors.k, driver.wr_errors.h, driver.wr_errors.cap, driver.wr_errors_held.hold_s) == (
            pytest.approx((p.wr_errors_k, p.wr_errors_h, p.wr_errors_cap, p.wr_errors_hold_s)))

    def test_slow_loss(self, core: MonitorCore) -> None:
        """The slow-loss test and the ports' own retransmit rates hold the moved slow-loss parameters."""
        test = core.detector.efa.slow_loss
        p = test.params
        assert p == core.config.detection.slow_loss
        rates = test.rates
        assert (rates.halflife_s, rates.prior_s, rates.learn_s, rates.delay_s) == pytest.approx(
            (p.loss_baseline_halflife_s, p.loss_prior_s, p.loss_learn_s, p.loss_delay_s))

    def test_chips_and_cooling(self, core: MonitorCore) -> None:
        chips, cooling = core.detector.chips, core.detector.cooling
        c = chips.params
        assert replace(c, stale_after_s=0.0) == replace(core.config.detection.chips, stale_after_s=0.0)
        assert c.stale_after_s == core.config.stale_after_s  # derived from the staleness setting
        assert (chips.cusum.k, chips.cusum.h, chips.cusum.cap, chips.cusum.ceiling, chips.cusum.samples) == (
            pytest.approx((c.z_k, c.z_h, c.z_cap, c.z_h + c.drain_s * c.z_k, c.samples_to_raise)))
        assert chips.tracker.clear_after_s == pytest.approx(c.clear_after_s)
        assert chips.tracker.raise_after_s[2] == pytest.approx(c.throttle_after_s)
        assert (chips.baseline.halflife_s, chips.baseline.learn_s, chips.baseline.clip) == pytest.approx(
            (c.baseline_halflife_s, c.baseline_learn_s, c.baseline_clip))
        assert chips.warmup.samples.shape[1] == c.baseline_seed_samples
        activity, failures = chips.activity, chips.failures
        assert activity.params is c
        assert (activity.collapse.h, activity.slow.h, activity.collapse.samples, activity.slow.samples) == (
            pytest.approx((0.5 * c.collapse_after_s, 0.5 * c.latency_after_s, c.peer_samples_to_raise,
                           c.peer_samples_to_raise)))
        for cusum in (failures.errors, failures.timeouts):
            assert (cusum.k, cusum.h, cusum.cap, cusum.samples) == pytest.approx(
                (c.exec_k, c.exec_h, c.exec_cap, c.samples_to_raise))
        assert (failures.errors_held.hold_s, failures.timeouts_held.hold_s) == pytest.approx(
            (c.exec_hold_s, c.exec_hold_s))
        assert (chips.hbm_held.hold_s, chips.sram_held.hold_s) == pytest.approx((c.ecc_hold_s, c.ecc_hold_s))
        k = cooling.params
        assert k == core.config.detection.cooling
        assert (cooling.nodes.raise_after_s[1], cooling.nodes.clear_after_s) == pytest.approx(
            (k.raise_after_s, k.clear_after_s))

    def test_model(self, core: MonitorCore) -> None:
        assert core.model == core.config.model


def _with_lanes(frame: NodeFrame, lanes: int) -> np.ndarray:
    links = frame.links.copy()
    links["lanes_up"] = lanes
    return links
