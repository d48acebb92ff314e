"""Specification of the throughput model's physical bounds (rainierd/core/throughput.py), over random fleets
whose chips report any utilisation and clock the contract admits (0..1, or unknown), any FP8 counter rate the
counters' bound admits (up to 1.05 x peak, or none yet), fresh, silent or never heard, on fleets with absent
nodes: per chip ``0 <= effective <= delivered <= peak`` where known, an unknown figure stays unknown (NaN, never
0), and every level keeps ``effective <= delivered`` over chips that know both and ``effective <= peak``."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rainierd.core.state import FleetState
from rainierd.core.throughput import Throughput, compute_throughput
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import Topology, build_fleet

PEAK = TRN2.fp8_dense_flops
MARGIN = 1.05  # core/bounds.py: the most a counter's rate is admitted at, over the chip's peak
NOW_S = 100.0
STALE_AFTER_S = 3.0
FRESH, SILENT, NEVER = 0, 1, 2  # when a chip was last heard: just now, 5 s ago, never


@dataclass(frozen=True)
class Chips:
    """A fleet and what each of its chips last reported (NaN: the field was unknown)."""

    n_sites: int
    ultraservers_per_site: int
    absent: frozenset[int]
    heard: np.ndarray
    util: np.ndarray
    clock: np.ndarray
    rate: np.ndarray

    def topology(self) -> Topology:
        topo = build_fleet(self.n_sites, self.ultraservers_per_site)
        present = topo.node_present.copy()
        present[list(self.absent)] = False
        present.flags.writeable = False
        return replace(topo, node_present=present)  # as rainierd/fleet/shards.py's shard_view makes nodes absent

    def throughput(self) -> tuple[Topology, Throughput]:
        """Return the topology and the throughput of a state holding these reports (an absent node's chips
        never report: the monitor rejects their frames)."""
        topo = self.topology()
        state = FleetState(topo)
        state.now_s = NOW_S
        heard = np.where(topo.chip_present, self.heard, NEVER)
        chips = state.chips
        chips.rx_s[:] = np.select([heard == FRESH, heard == SILENT], [NOW_S, NOW_S - 5.0], np.nan)
        chips.samples[:] = heard != NEVER
        chips.gauges["util"][:] = self.util
        chips.gauges["clock_ratio"][:] = self.clock
        chips.rates["fp8_flop_total"][:] = self.rate
        return topo, compute_throughput(state, peak_flops_per_chip=PEAK, stale_after_s=STALE_AFTER_S)


def unit_or_unknown() -> st.SearchStrategy[float]:
    """A ratio the JSON contract and the bridge admit (0..1, its bounds often), or unknown."""
    return st.one_of(st.just(math.nan), st.just(0.0), st.just(1.0), st.floats(0.0, 1.0))


def admitted_rate() -> st.SearchStrategy[float]:
    """A counter rate the counters' bound admits (its bounds often, a chip at peak), or none."""
    return st.one_of(st.just(math.nan), st.just(0.0), st.just(PEAK), st.just(MARGIN * PEAK),
                     st.floats(0.0, MARGIN * PEAK))


@st.composite
def fleets(draw: st.DrawFn, *, ratio: st.SearchStrategy[float] | None = None) -> Chips:
    """Return a random fleet's chips (``ratio``: the utilisation and clock drawn, ``unit_or_unknown`` by
    default)."""
    n_sites, per_site = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n_nodes = 4 * n_sites * per_site
    n_chips = 16 * n_nodes
    ratio = unit_or_unknown() if ratio is None else ratio
    return Chips(
        n_sites, per_site, draw(st.frozensets(st.integers(0, n_nodes - 1), max_size=n_nodes)),
        heard=draw(hnp.arrays(np.int8, n_chips, elements=st.sampled_from([FRESH, SILENT, NEVER]))),
        util=draw(hnp.arrays(np.float32, n_chips, elements=ratio.map(np.float32))),
        clock=draw(hnp.arrays(np.float32, n_chips, elements=ratio.map(np.float32))),
        rate=draw(hnp.arrays(np.float64, n_chips, elements=admitted_rate())),
    )


def chips_bounded(tp: Throughput) -> None:
    """Assert ``0 <= effective <= delivered <= peak`` for every chip where each is known."""
    eff, dlv = tp.chip_effective, tp.chip_delivered
    known = ~np.isnan(eff) & ~np.isnan(dlv)
    assert (eff[known] <= dlv[known]).all()
    assert (dlv[~np.isnan(dlv)] <= PEAK).all()
    assert (eff[~np.isnan(eff)] <= PEAK).all()
    assert (eff[~np.isnan(eff)] >= 0).all()
    assert (dlv[~np.isnan(dlv)] >= 0).all()


class TestPerChip:
    @given(fleets())
    @settings(max_examples=100, deadline=None)
    def test_effective_within_delivered_within_peak(self, chips: Chips) -> None:
        """Every chip's known figures keep 0 <= effective <= delivered <= peak, even with its counter's rate at
        1.05 x peak and its utilisation and clock at 0 or 1."""
        _topo, tp = chips.throughput()
        chips_bounded(tp)

    @given(fleets())
    @settings(max_examples=100, deadline=None)
    def test_an_unknown_figure_stays_unknown(self, chips: Chips) -> None:
        """A fresh chip whose utilisation or clock is unknown has an unknown delivered figure (NaN, never 0),
        and without a counter rate an unknown effective figure too; a fresh chip whose rate, or whose
        utilisation and clock, are known has a known effective figure (the rate's, up to peak); a chip not
        heard within stale_after_s, or never, delivers a known 0."""
        topo, tp = chips.throughput()
        fresh = tp.chip_fresh
        assert not fresh[~topo.chip_present].any()
        unclocked = np.isnan(chips.util) | np.isnan(chips.clock)
        no_rate = np.isnan(chips.rate)
        assert np.isnan(tp.chip_delivered[fresh & unclocked]).all()
        assert np.isnan(tp.chip_effective[fresh & unclocked & no_rate]).all()
        assert not np.isnan(tp.chip_delivered[fresh & ~unclocked]).any()
        assert not np.isnan(tp.chip_effective[fresh & ~(unclocked & no_rate)]).any()
        counted = fresh & ~no_rate
        assert (tp.chip_effective[counted] == np.minimum(chips.rate[counted], PEAK)).all()
        assert (tp.chip_effective[~fresh] == 0).all()
        assert (tp.chip_delivered[~fresh] == 0).all()


Level = Literal["ultraserver", "site", "fleet"]
Figure = Literal["effective", "delivered"]


def level_figures(topo: Topology, tp: Throughput, level: Level) -> tuple[np.ndarray, int, dict[str, np.ndarray]]:
    """Return each chip's entity at ``level`` (0 for the fleet), how many entities, and their peak, effective
    and delivered figures."""
    if level == "fleet":
        return (np.zeros(topo.n_chips, np.int64), 1, {name: np.array([getattr(tp, f"fleet_{name}")])
                                                      for name in ("peak", "effective", "delivered")})
    group, n = ((topo.chip_ultraserver, topo.n_ultraservers) if level == "ultraserver"
                else (topo.chip_site, topo.n_sites))
    return group, n, {name: getattr(tp, f"{level}_{name}") for name in ("peak", "effective", "delivered")}


class TestEveryLevel:
    @given(fleets())
    @settings(max_examples=100, deadline=None)
    def test_effective_within_delivered_and_peak(self, chips: Chips) -> None:
        """Each UltraServer, site and the fleet: effective <= peak (its present chips') always, effective <=
        delivered wherever none of its chips' delivered figures is unknown, each the sum over its chips that
        know it, the fresh ones that do not counted."""
        topo, tp = chips.throughput()
        levels: tuple[Level, ...] = ("ultraserver", "site", "fleet")
        figures: tuple[Figure, ...] = ("effective", "delivered")
        for level in levels:
            group, n, of = level_figures(topo, tp, level)
            assert np.array_equal(of["peak"], np.bincount(group, weights=topo.chip_present * PEAK, minlength=n))
            assert (of["effective"] <= of["peak"]).all(), level
            whole = tp.unknown("delivered", level) == 0
            assert (of["effective"][whole] <= of["delivered"][whole]).all(), level
            for figure in figures:
                per_chip = getattr(tp, f"chip_{figure}")
                unknown = np.isnan(per_chip)
                np.testing.assert_allclose(of[figure], np.bincount(group, weights=np.where(unknown, 0.0, per_chip),
                                                                   minlength=n), rtol=1e-12, atol=0.0)
                assert np.array_equal(tp.unknown(figure, level),
                                      np.bincount(group[tp.chip_fresh & unknown], minlength=n)), (level, figure)


class TestWhatABinaryFrameAdmits:
    @given(fleets(ratio=st.one_of(st.just(math.nan), st.floats(0.0, 4.0, width=32))))
    @settings(max_examples=60, deadline=None)
    def test_a_utilisation_or_clock_above_one_is_held_at_peak(self, chips: Chips) -> None:
        """The store keeps ratios in [0, 1] (below), but the figures do not rely on it: with a utilisation or
        clock above 1 in the state (a sensor's overshoot, a clock reported above nominal) every chip still keeps
        0 <= effective <= delivered <= peak."""
        _topo, tp = chips.throughput()
        chips_bounded(tp)

    @given(st.lists(st.floats(-4.0, 4.0, width=32), min_size=64, max_size=64),
           st.lists(st.floats(-4.0, 4.0, width=32), min_size=64, max_size=64))
    @example([-1.0] * 64, [1.0] * 64)
    @settings(max_examples=40, deadline=None)
    def test_a_ratio_outside_zero_one_is_stored_unknown_and_counted(self, util: list[float],
                                                                    clock: list[float]) -> None:
        """A binary record's utilisation and clock are checked finite only by its decoder (wire/binary.py); the
        store keeps a ratio outside [0, 1] as unknown and counts it ``out_of_range`` (core/bounds.py RATIOS),
        so no chip gets a negative or above-peak delivered figure from it, and no level or loss model sees one."""
        topo = build_fleet(1, 1)
        state = FleetState(topo)
        chips = state.chips
        u, c = np.asarray(util, np.float32), np.asarray(clock, np.float32)
        refused = chips.apply(slice(0, 64), {"util": u, "clock_ratio": c}, t_s=np.full(64, NOW_S),
                              rx_s=np.full(64, NOW_S), known=chips.bit("util") | chips.bit("clock_ratio"))
        for name, sent in (("util", u), ("clock_ratio", c)):
            outside = (sent < 0) | (sent > 1)
            stored = chips.gauges[name]
            assert np.isnan(stored[outside]).all(), name
            assert np.array_equal(stored[~outside], sent[~outside]), name
            assert refused.get((name, "out_of_range"), 0) == int(outside.sum()), name
        state.now_s = NOW_S
        tp = compute_throughput(state, peak_flops_per_chip=PEAK, stale_after_s=STALE_AFTER_S)
        chips_bounded(tp)
        either = (u < 0) | (u > 1) | (c < 0) | (c > 1)
        assert np.isnan(tp.chip_delivered[either]).all()  # unknown, never 0
