"""Specification of the raw telemetry aggregates (core/aggregates.py): max and
mean over fresh entities per UltraServer and site, and counter sums that only
ever grow across publisher restarts."""

from __future__ import annotations

import numpy as np

from rainierd.core.aggregates import CounterSums, aggregate
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.state import FleetState
from rainierd.fleet.topology import build_topology
from rainierd.wire import CHIP_DTYPE, NodeFrame


def apply_chips(state: FleetState, t_s: float, **totals: np.ndarray | float) -> None:
    """Store one sample of every chip carrying only the counters ``totals`` (a figure or one per chip)."""
    n = state.topology.n_chips
    columns = {name: np.broadcast_to(np.asarray(value, np.float64), n).copy() for name, value in totals.items()}
    state.chips.apply(np.arange(n), columns, t_s=np.full(n, t_s), rx_s=np.full(n, t_s),
                      known=sum(state.chips.bit(name) for name in totals))


class TestCounterSums:
    def test_first_samples_add_nothing_then_increases_add_and_restarts_count_from_zero(self) -> None:
        """A chip's first total is not an increase; later increases add; a fall counts the new total."""
        state = FleetState(build_topology("demo"))
        sums = CounterSums(state.topology)
        apply_chips(state, 0.0, fp8_flop_total=1e15)
        sums.update(state)
        assert sums.ultraserver["fp8_flop_total"].tolist() == [0.0, 0.0]
        flop = np.full(128, 1e15 + 10.0)
        flop[70] = 3.0  # chip 70 (UltraServer 1) restarted: its counter began again
        apply_chips(state, 1.0, fp8_flop_total=flop)
        sums.update(state)
        assert sums.ultraserver["fp8_flop_total"].tolist() == [640.0, 63 * 10.0 + 3.0]
        assert sums.site["fp8_flop_total"].tolist() == [640.0 + 633.0]

    def test_unknown_totals_add_nothing_and_keep_the_previous(self) -> None:
        """A chip whose sample lacked the counter adds nothing, and its next known total counts from the last."""
        state = FleetState(build_topology("demo"))
        sums = CounterSums(state.topology)
        apply_chips(state, 0.0, ecc_corrected_total=0.0)
        sums.update(state)
        known = np.full(128, state.chips.bit("ecc_corrected_total"), np.uint16)
        known[0] = 0
        ecc = np.zeros(128)
        ecc[0] = 99.0  # whatever the column holds where the chip lacked the field
        state.chips.apply(np.arange(128), {"ecc_corrected_total": ecc}, t_s=np.full(128, 1.0),
                          rx_s=np.full(128, 1.0), known=known)
        sums.update(state)
        assert sums.ultraserver["ecc_corrected_total"][0] == 0
        ecc = np.zeros(128)
        ecc[0] = 5.0
        apply_chips(state, 2.0, ecc_corrected_total=ecc)
        sums.update(state)
        assert sums.ultraserver["ecc_corrected_total"].tolist() == [5.0, 0.0]

    def test_every_interval_of_a_window_counts(self) -> None:
        """Three samples between two updates add both their intervals, a restart between them included."""
        state = FleetState(build_topology("demo"))
        sums = CounterSums(state.topology)
        apply_chips(state, 0.0, fp8_flop_total=100.0)
        apply_chips(state, 1.0, fp8_flop_total=150.0)
        apply_chips(state, 2.0, fp8_flop_total=20.0)  # a restart: counted from zero
        sums.update(state)
        assert sums.site["fp8_flop_total"].tolist() == [128 * (50.0 + 20.0)]
        sums.update(state)
        assert sums.site["fp8_flop_total"].tolist() == [128 * 70.0]


class TestTheFlopCounterThroughTheCore:
    def test_a_chip_s_first_two_frames_in_one_analysis_count_their_interval(self) -> None:
        """A node whose first two frames reach one analysis (a monitor catching up, an agent that publishes
        twice before the first analysis): rainier_fleet_fp8_flop counts their interval exactly (it counted
        nothing: the analysis saw only the second total, with no earlier one to subtract)."""
        topo = build_topology("demo")
        core = MonitorCore(topo, MonitorConfig(tick_s=1.0))
        flops = [3.0e16, 3.0e16 + 7.5e14, 3.0e16 + 1.9e15]

        def frame(seq: int) -> NodeFrame:
            chips = np.zeros(16, CHIP_DTYPE)
            chips["chip"] = np.arange(16)
            chips["util"], chips["clock_ratio"] = 0.6, 1.0
            chips["fp8_flop_total"] = flops[seq] + np.arange(16)
            return NodeFrame(publisher="agent", seq=seq, tick=seq, t_s=1_796_000_000.0 + seq, node=0, chips=chips)

        first = core.step([frame(0), frame(1)])
        assert first.flush.applied == 2
        assert first.aggregates is not None
        assert first.aggregates.site_counters["fp8_flop_total"].tolist() == [16 * (flops[1] - flops[0])]
        second = core.step([frame(2)])
        assert second.aggregates is not None
        assert second.aggregates.site_counters["fp8_flop_total"].tolist() == [16 * (flops[2] - flops[0])]


class TestAggregate:
    def test_max_and_mean_over_fresh_known_chips(self) -> None:
        """Stale and unknown chips are left out; an UltraServer with none known has NaN, its site the rest."""
        state = FleetState(build_topology("demo"))
        temp = state.chips.gauges["temp_c"]
        temp[:64] = np.linspace(40.0, 80.0, 64, dtype=np.float32)
        temp[10] = np.nan
        fresh = np.ones(128, dtype=bool)
        fresh[63] = False  # the hottest chip is stale
        state.now_s = 0.0
        result = aggregate(state, CounterSums(state.topology), chip_fresh=fresh, stale_after_s=3.0)
        extremes = result.gauges["temp_c"]
        expected = np.delete(np.linspace(40.0, 80.0, 64, dtype=np.float32), [10, 63]).astype(np.float64)
        assert extremes.ultraserver_max[0] == expected.max()
        np.testing.assert_allclose(extremes.ultraserver_mean[0], expected.mean())
        assert np.isnan(extremes.ultraserver_max[1])
        assert np.isnan(extremes.ultraserver_mean[1])
        assert extremes.site_max.tolist() == [expected.max()]
        np.testing.assert_allclose(extremes.site_mean, [expected.mean()])
        assert np.isnan(result.site_outside_c).all()  # no facility sample yet
