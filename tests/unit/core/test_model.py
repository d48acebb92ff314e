"""Specification of the throughput model: the worked example of
docs/throughput-model.md, and the split of loss by cause from detections."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect.efa import slow_path_stretch
from rainierd.core.model import ModelParams, group_loss
from rainierd.fleet.topology import build_fleet
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames


class TestWorkedExample:
    def test_numbers_in_the_doc(self) -> None:
        """A throttled chip at clock 0.8 and a half-speed NeuronLink cost the figures docs/throughput-model.md gives."""
        healthy = 64 * 1.299e15 * 0.62
        assert healthy == pytest.approx(5.154432e16)
        step = 0.75 / 0.8 + 0.15 / 0.5 + 0.10 / 1.0
        effective = np.array([healthy / step])
        assert effective[0] == pytest.approx(3.853781e16, rel=1e-6)
        lost = group_loss(effective, s_min=np.array([0.8]), f_nl=np.array([0.5]), f_efa=np.array([1.0]),
                          params=ModelParams(comm_nl_share=0.15, comm_efa_share=0.10))
        assert lost["compute"][0] == pytest.approx(7.225839e15, rel=1e-6)
        assert lost["neuronlink"][0] == pytest.approx(5.780671e15, rel=1e-6)
        assert lost["efa"][0] == 0.0
        assert sum(v[0] for v in lost.values()) == pytest.approx(healthy - effective[0])

    def test_slow_path_numbers_in_the_doc(self) -> None:
        """An EFA port that keeps its traffic but answers 1.5x slower costs the figures docs/throughput-model.md
        gives ("Slow paths"): stretch 1.15, f_efa 1/1.15, 7.617387e14 FLOP/s to degraded_efa."""
        one = np.ones(1, np.float32)
        stretch = slow_path_stretch(np.float32(1.5) * one, one, 0 * one, latency_share=0.3)
        assert stretch[0] == pytest.approx(1.15)
        f_efa = 1.0 / float(stretch[0])
        healthy = 64 * 1.299e15 * 0.62
        effective = np.array([healthy / (0.75 + 0.15 + 0.10 / f_efa)])
        assert effective[0] == pytest.approx(5.078258e16, rel=1e-6)
        lost = group_loss(effective, s_min=np.array([1.0]), f_nl=np.array([1.0]), f_efa=np.array([f_efa]),
                          params=ModelParams())
        assert lost["efa"][0] == pytest.approx(7.617387e14, rel=1e-6)
        assert lost["efa"][0] == pytest.approx(healthy - effective[0])

    def test_a_degraded_port_s_queueing_is_not_charged_twice(self) -> None:
        """A port at half its throughput whose latency doubled (queueing): the latency is what the lost
        throughput explains, so its stretch is 1 and its cost is its throughput share alone."""
        one = np.ones(1, np.float32)
        assert slow_path_stretch(2.0 * one, 0.5 * one, 0 * one, latency_share=0.3)[0] == pytest.approx(1.0)


def estimate_vs_truth(
    faults: list[Fault], ticks: int = 110, window: int = 40, *, seed: int = 0,
) -> tuple[dict[str, float], dict[str, float]]:
    """Return the monitor's and the simulator's lost FLOP/s by cause, each averaged over the last ``window`` ticks
    (a slow path's cost is read from noisy latency: one tick's estimate is within a few tens of %)."""
    topo = build_fleet(1, 4)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0, faults=faults)
    core = MonitorCore(topo)
    estimate: dict[str, float] = {}
    truth: dict[str, float] = {}
    for tick in range(ticks):
        sample = model.step(tick)
        analysis = core.step([f for _t, f in tick_frames(topo, sample, publisher="t")])
        if tick >= ticks - window:
            for cause, value in analysis.lost.fleet().items():
                estimate[cause] = estimate.get(cause, 0.0) + value / window
            for cause, value in sample.truth.lost_flops.items():
                truth[cause] = truth.get(cause, 0.0) + value / window
    return estimate, truth


class TestLossByCause:
    @pytest.mark.parametrize(
        ("fault", "cause"),
        [
            (Fault(FaultKind.CHIP_THROTTLE, 10, 0.7, 40, 200), "thermal_throttle"),
            (Fault(FaultKind.STRAGGLER, 10, 0.10, 40, 200), "straggler"),
            (Fault(FaultKind.NL_DEGRADED, 10, 0.5, 40, 200), "degraded_neuronlink"),
            (Fault(FaultKind.EFA_DEGRADED, 10, 0.5, 40, 200), "degraded_efa"),
            (Fault(FaultKind.EFA_SLOW, 10, 1.5, 40, 200), "degraded_efa"),
            (Fault(FaultKind.EFA_SLOW, 10, 1.25, 40, 200), "degraded_efa"),
            (Fault(FaultKind.CHIP_FAILED, 10, 0.0, 40, 200), "failed_chip"),
            (Fault(FaultKind.NODE_LOST, 1, 0.0, 40, 200), "stale_telemetry"),
        ],
    )
    def test_one_cause_within_10_percent_of_truth(self, fault: Fault, cause: str) -> None:
        """One fault's loss lands on its cause alone, within 10 % of the simulator's truth.  A slow path's cost is
        read from its latency, whose noise leaves one seed's 40-tick mean 0.9-1.17 of truth (seeds 0-15, healthy
        retransmits following traffic): its estimate is the mean over four seeds."""
        seeds = range(4) if fault.kind is FaultKind.EFA_SLOW else range(1)
        runs = [estimate_vs_truth([fault], seed=seed) for seed in seeds]
        for estimate, _truth in runs:
            assert {c for c, v in estimate.items() if v > 0} == {cause}
        mean = float(np.mean([estimate[cause] for estimate, _truth in runs]))
        assert mean == pytest.approx(float(np.mean([truth[cause] for _estimate, truth in runs])), rel=0.10)

    def test_healthy_fleet_loses_nothing(self) -> None:
        """Without faults every cause is exactly zero."""
        estimate, truth = estimate_vs_truth([])
        assert set(estimate.values()) == {0.0}
        assert set(truth.values()) == {0.0}
