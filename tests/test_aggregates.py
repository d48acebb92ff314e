"""Specification of the raw telemetry aggregates (core/aggregates.py): max and
mean over fresh entities per UltraServer and site, and counter sums that only
ever grow across publisher restarts."""

from __future__ import annotations

import numpy as np

from rainierd.core.aggregates import CounterSums, aggregate
from rainierd.core.state import FleetState
from rainierd.topology import build_topology


def chips_known(state: FleetState, *names: str) -> None:
    state.chips.known[:] = np.uint16(sum(state.chips.bit(n) for n in names))
    state.chips.samples[:] = 1


class TestCounterSums:
    def test_first_samples_add_nothing_then_increases_add_and_restarts_count_from_zero(self) -> None:
        """A chip's first total is not an increase; later increases add; a fall counts the new total."""
        state = FleetState(build_topology("demo"))
        chips_known(state, "fp8_flop_total", "ecc_corrected_total", "ecc_uncorrected_total")
        sums = CounterSums(state.topology)
        flop = state.chips.totals["fp8_flop_total"]
        flop[:] = 1e15
        sums.update(state)
        assert sums.ultraserver["fp8_flop_total"].tolist() == [0.0, 0.0]
        flop[:] += 10.0
        flop[70] = 3.0  # chip 70 (UltraServer 1) restarted: its counter began again
        sums.update(state)
        assert sums.ultraserver["fp8_flop_total"].tolist() == [640.0, 63 * 10.0 + 3.0]
        assert sums.site["fp8_flop_total"].tolist() == [640.0 + 633.0]

    def test_unknown_totals_add_nothing_and_keep_the_previous(self) -> None:
        """A chip whose sample lacked the counter adds nothing, and its next known total counts from the last."""
        state = FleetState(build_topology("demo"))
        chips_known(state, "ecc_corrected_total")
        sums = CounterSums(state.topology)
        ecc = state.chips.totals["ecc_corrected_total"]
        sums.update(state)
        ecc[0] = 5
        state.chips.known[0] = 0
        sums.update(state)
        assert sums.ultraserver["ecc_corrected_total"][0] == 0
        state.chips.known[0] = state.chips.bit("ecc_corrected_total")
        sums.update(state)
        assert sums.ultraserver["ecc_corrected_total"].tolist() == [5.0, 0.0]


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
