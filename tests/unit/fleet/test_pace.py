"""Specification of the training step both sides price (rainierd/fleet/pace.py): one
source for the simulator's and the monitor's step shares, a formula whose
healthy step is 1 and whose terms' excesses add up to the step's, and one
list of cause names that the simulator's truth and the monitor's estimate
both report."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.model import ModelParams
from rainierd.fleet.pace import CAUSES, SHARES, StepShares, path_stretch, step_excess, step_time
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.params import FleetParams

SHARE_FIELDS = [f.name for f in fields(StepShares)]


class TestOneSourceOfShares:
    def test_the_simulator_and_the_monitor_default_to_the_same_shares(self) -> None:
        """FleetParams and ModelParams both default to rainierd.fleet.pace.SHARES, so the world and the observer
        price a healthy step alike."""
        assert FleetParams().shares == ModelParams().shares == SHARES

    @pytest.mark.parametrize("params", [FleetParams, ModelParams])
    def test_every_share_is_a_field_of_both_sides(self, params: type[FleetParams] | type[ModelParams]) -> None:
        """Each step share is configurable on both sides, so none can be added to one side only."""
        assert set(SHARE_FIELDS) <= {f.name for f in fields(params)}

    @pytest.mark.parametrize("params", [FleetParams, ModelParams])
    def test_the_shares_are_the_configured_fields(self, params: type[FleetParams] | type[ModelParams]) -> None:
        """A side's ``shares`` are its own fields, not the defaults."""
        moved = {name: getattr(SHARES, name) * 1.5 for name in SHARE_FIELDS}
        assert params(**moved).shares == StepShares(**moved)


class TestStepFormula:
    def test_a_healthy_step_takes_one_step_and_exceeds_nothing(self) -> None:
        """Full speed and full paths give step 1 and no excess in any term."""
        one = np.ones(3)
        assert step_time(one, one, one, shares=SHARES).tolist() == [1.0, 1.0, 1.0]
        assert [t.tolist() for t in step_excess(one, one, one, shares=SHARES)] == [[0.0] * 3] * 3

    def test_the_terms_excesses_add_up_to_the_step_s(self) -> None:
        """For any speed and path shares, compute + NeuronLink + EFA excess is step - 1."""
        rng = np.random.default_rng(0)
        s, f_nl, f_efa = (rng.uniform(0.05, 1.0, 1_000) for _ in range(3))
        compute, nl, efa = step_excess(s, f_nl, f_efa, shares=SHARES)
        np.testing.assert_allclose(compute + nl + efa, step_time(s, f_nl, f_efa, shares=SHARES) - 1.0, rtol=1e-12)

    def test_the_doc_s_worked_example(self) -> None:
        """A chip at clock 0.8 and a half-speed NeuronLink take 0.75 / 0.8 + 0.15 / 0.5 + 0.10 healthy steps
        (docs/throughput-model.md)."""
        step = step_time(np.array([0.8]), np.array([0.5]), np.array([1.0]), shares=SHARES)
        assert step[0] == pytest.approx(0.75 / 0.8 + 0.15 / 0.5 + 0.10)

    def test_a_slow_path_stretches_by_its_latency_bound_share(self) -> None:
        """A path 1.5x slower to answer, retransmitting nothing extra, stretches its collective 1.15x."""
        assert path_stretch(np.array([1.5]), np.array([0.0]), latency_share=0.3)[0] == pytest.approx(1.15)


class TestOneListOfCauses:
    def test_the_truth_and_the_estimate_name_the_same_causes_in_order(self) -> None:
        """The simulator's truth and the monitor's estimate both report every cause of CAUSES, in its order."""
        topo = build_topology("demo")
        model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=0.0)
        sample = model.step(0)
        analysis = MonitorCore(topo).step([f for _t, f in tick_frames(topo, sample, publisher="t")])
        assert (list(sample.truth.lost_flops), list(analysis.lost.ultraserver)) == (list(CAUSES), list(CAUSES))
