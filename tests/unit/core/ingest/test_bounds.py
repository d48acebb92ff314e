"""Specification of the counters' bounds (core/bounds.py, ``Table.apply``):
a sample's counter above its physical or exactness bound is refused (no rate,
summed nowhere, counted by kind, field and reason) and the rest of the sample
is kept; the refused sample is the next one's reference; and no sequence of
frames, however wrong, moves a fleet or UltraServer FLOP counter by more than
its chips' peak x margin x the sample time elapsed."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rainierd.core.aggregates import CounterSums
from rainierd.core.analysis import MonitorCore
from rainierd.core.bounds import EXACT, Bound, CounterBounds
from rainierd.core.config import MonitorConfig
from rainierd.core.ingest import Ingest, IngestStats, Received
from rainierd.core.state import FleetState, Table
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import build_topology
from rainierd.wire import CHIP_DTYPE, LINK_DTYPE, NodeFrame

TOPO = build_topology("demo")  # 2 UltraServers of 4 nodes, 128 chips
PEAK = TRN2.fp8_dense_flops
BOUND = PEAK * 1.05
T0 = 1_800_000_000.0
CHIPS = np.arange(16)


def store(table: Table, t_s: float, **columns: np.ndarray | float) -> Counter[tuple[str, str]]:
    """Store one sample of every entity of ``table`` carrying only ``columns`` (a figure or one per entity)."""
    n = table.n
    values = {name: np.broadcast_to(np.asarray(value), n).copy() for name, value in columns.items()}
    return table.apply(np.arange(n), values, t_s=np.full(n, t_s), rx_s=np.full(n, t_s),
                       known=sum(table.bit(name) for name in columns))


def node_frame(node: int, seq: int, t_s: float, flop: np.ndarray | float, *, publisher: str = "a",
               util: float = 0.5) -> NodeFrame:
    """Return node ``node``'s frame of its 16 chips, each with ``flop`` (a figure or one per chip) FLOP so far."""
    chips = np.zeros(16, CHIP_DTYPE)
    chips["chip"] = node * 16 + CHIPS
    chips["util"], chips["clock_ratio"] = util, 1.0
    chips["fp8_flop_total"] = flop
    return NodeFrame(publisher=publisher, seq=seq, tick=seq, t_s=t_s, node=node, chips=chips)


class TestCounterBounds:
    def test_each_bound_is_its_hardware_figure_times_the_margin(self) -> None:
        """FP8 at the chip's dense peak, EFA bytes at the port's line rate, NeuronLink bytes at each link's own
        bandwidth (torus or ring), each x the margin; every other counter is bounded per sample only."""
        hw = replace(TRN2, fp8_dense_flops=1e15, efa_port_bytes_s=1e10, neuronlink_intra_bytes_s=2e11,
                     neuronlink_ring_bytes_s=1e11)
        bounds = CounterBounds(hardware=hw, margin=1.1)
        assert {kind: {name: bound.per_s for name, bound in bounds.of(kind, TOPO).items()}
                for kind in ("chips", "efa", "cooling", "facility")} == {
            "chips": {"fp8_flop_total": pytest.approx(1.1e15)},
            "efa": {name: pytest.approx(1.1e10) for name in ("tx_bytes_total", "rx_bytes_total",
                                                             "retrans_bytes_total")},
            "cooling": {}, "facility": {}}
        links = bounds.of("links", TOPO)["tx_bytes_total"].limit_per_s(slice(0, TOPO.links_per_node))
        assert links.tolist() == pytest.approx([2.2e11] * 32 + [1.1e11] * 16)
        assert Bound().limit_per_s(slice(0, 3)) == math.inf

    @pytest.mark.parametrize("margin", [0.99, 101.0, float("nan")])
    def test_a_margin_out_of_range_is_refused(self, margin: float) -> None:
        """A margin under 1 would refuse a chip at its peak; one over 100 bounds nothing: both are errors."""
        with pytest.raises(ValueError, match="margin"):
            MonitorConfig(counter_rate_margin=margin)


class TestRefusals:
    def test_a_rate_above_the_peak_is_refused_and_summed_nowhere(self) -> None:
        """One chip at 1.1 x peak over its second: that chip's rate is unknown and its increase not summed,
        counted once; a chip at 1.04 x peak (within the margin) and every other chip count."""
        state = FleetState(TOPO)
        store(state.chips, T0, fp8_flop_total=1e16)
        step = np.full(TOPO.n_chips, 0.5 * PEAK)
        step[3], step[4] = 1.1 * PEAK, 1.04 * PEAK
        refused = store(state.chips, T0 + 1, fp8_flop_total=1e16 + step)
        assert refused == Counter({("fp8_flop_total", "over_bound"): 1})
        expected = step.copy()
        expected[3] = np.nan
        np.testing.assert_array_equal(state.chips.rates["fp8_flop_total"], expected)
        expected[3] = 0.0
        np.testing.assert_array_equal(state.chips.take_increase("fp8_flop_total"), expected)

    def test_a_restart_counts_its_new_total_only_if_its_bound_holds_it(self) -> None:
        """A counter that went backwards to 0.5 x peak over 1 s adds that; back to 2 x peak it is refused as
        ``reset_over_bound``; neither has a rate."""
        state = FleetState(TOPO)
        store(state.chips, T0, fp8_flop_total=1e17)
        flop = np.full(TOPO.n_chips, 1e17 + 0.5 * PEAK)
        flop[0], flop[1] = 0.5 * PEAK, 2 * PEAK
        assert store(state.chips, T0 + 1, fp8_flop_total=flop) == Counter({("fp8_flop_total", "reset_over_bound"): 1})
        increase = state.chips.take_increase("fp8_flop_total")
        assert increase[:3].tolist() == [0.5 * PEAK, 0.0, 0.5 * PEAK]
        assert np.isnan(state.chips.rates["fp8_flop_total"][:2]).all()

    def test_a_negative_total_is_refused(self) -> None:
        """A float counter below zero (a binary frame can carry one) is refused, never summed as a restart."""
        state = FleetState(TOPO)
        store(state.chips, T0, fp8_flop_total=1e16)
        flop = np.full(TOPO.n_chips, 1e16)
        flop[7] = -5.0
        assert store(state.chips, T0 + 1, fp8_flop_total=flop) == Counter({("fp8_flop_total", "negative"): 1})
        assert state.chips.take_increase("fp8_flop_total").sum() == 0.0

    def test_a_counter_with_no_physical_rate_is_bounded_by_exactness(self) -> None:
        """Uncorrected ECC rising by 2**60 in a sample is refused, by 1,000 counted; a restart to a total above
        2**53 is refused too."""
        state = FleetState(TOPO)
        store(state.chips, T0, ecc_uncorrected_total=np.uint64(2**55))
        ecc = np.full(TOPO.n_chips, 2**55 + 1_000, np.uint64)
        ecc[9] = 2**55 + 2**60
        assert store(state.chips, T0 + 1, ecc_uncorrected_total=ecc) == Counter(
            {("ecc_uncorrected_total", "over_bound"): 1})
        increase = state.chips.take_increase("ecc_uncorrected_total")
        assert (increase[9], increase[8]) == (0.0, 1_000.0)
        assert np.isnan(state.chips.rates["ecc_uncorrected_total"][9])
        ecc = np.full(TOPO.n_chips, 2**55 + 2_000, np.uint64)
        ecc[12] = 2**54  # went backwards, to a total beyond what a float64 difference counts exactly
        # Chip 9 comes back from its refused spike: backwards too, from the reference the spike became.
        assert store(state.chips, T0 + 2, ecc_uncorrected_total=ecc) == Counter(
            {("ecc_uncorrected_total", "reset_over_bound"): 2})
        assert state.chips.take_increase("ecc_uncorrected_total")[[8, 9, 12]].tolist() == [1_000.0, 0.0, 0.0]
        assert EXACT == 2.0**53

    def test_an_efa_port_over_its_line_rate_is_refused(self) -> None:
        """Port 2 sending twice its line rate has no rate for that sample; the others keep theirs."""
        state = FleetState(TOPO)
        store(state.efa, T0, tx_bytes_total=np.uint64(10**12))
        sent = np.full(TOPO.n_efa, 10**12 + 10**10, np.uint64)
        sent[2] = 10**12 + int(2 * TRN2.efa_port_bytes_s)
        assert store(state.efa, T0 + 1, tx_bytes_total=sent) == Counter({("tx_bytes_total", "over_bound"): 1})
        rates = state.efa.rates["tx_bytes_total"]
        assert np.isnan(rates[2])
        assert np.delete(rates, 2).tolist() == [1e10] * (TOPO.n_efa - 1)

    def test_a_neuronlink_is_bounded_by_its_own_bandwidth(self) -> None:
        """150 GB in a second is within a torus link's 256 GB/s and over a ring link's 128 GB/s."""
        table = Table.empty(TOPO.n_links, LINK_DTYPE, skip=("link",), rated=frozenset({"tx_bytes_total"}),
                            bounds=CounterBounds().of("links", TOPO))
        store(table, T0, tx_bytes_total=np.uint64(0))
        refused = store(table, T0 + 1, tx_bytes_total=np.uint64(150 * 10**9))
        ring = TOPO.link_kind == 1
        assert refused == Counter({("tx_bytes_total", "over_bound"): int(ring.sum())})
        assert np.isnan(table.rates["tx_bytes_total"][ring]).all()
        assert (table.rates["tx_bytes_total"][~ring] == np.float32(1.5e11)).all()

    def test_the_refused_sample_is_the_next_one_s_reference(self) -> None:
        """After a spike to 1e300 and back, the sample coming back is refused too (a restart to a lifetime's
        total), the one after counts again with its exact rate; after a lasting jump the next sample counts."""
        state = FleetState(TOPO)
        flops = [1e16, 1e300, 1e16 + 2 * 0.5 * PEAK, 1e16 + 3 * 0.5 * PEAK]
        refused, counted = [], []
        for k, flop in enumerate(flops):
            refused.append(sum(store(state.chips, T0 + k, fp8_flop_total=flop).values()))
            counted.append(float(state.chips.take_increase("fp8_flop_total")[0]))
        assert (refused, counted) == ([0, TOPO.n_chips, TOPO.n_chips, 0], [0.0, 0.0, 0.0, 0.5 * PEAK])
        assert state.chips.rates["fp8_flop_total"][0] == 0.5 * PEAK
        store(state.chips, T0 + 4, fp8_flop_total=5e20)  # a lasting jump: a new origin
        assert sum(store(state.chips, T0 + 5, fp8_flop_total=5e20 + 0.5 * PEAK).values()) == 0
        assert state.chips.take_increase("fp8_flop_total")[0] == pytest.approx(0.5 * PEAK, rel=1e-9)

    def test_a_rise_in_no_time_is_refused(self) -> None:
        """A sample stamped no later than the last that carried the counter may not add anything to the sum."""
        state = FleetState(TOPO)
        store(state.chips, T0, fp8_flop_total=1e16)
        assert store(state.chips, T0, fp8_flop_total=1e16 + 1e6) == Counter(
            {("fp8_flop_total", "over_bound"): TOPO.n_chips})
        assert store(state.chips, T0 - 1, fp8_flop_total=1e16 + 1e6) == Counter()  # no rise: nothing to refuse
        assert state.chips.take_increase("fp8_flop_total").sum() == 0.0

    def test_a_counter_unknown_in_between_is_bounded_over_the_whole_time_since(self) -> None:
        """A chip whose middle sample lacked the counter adds 1.9 x peak over the 2 s since it last carried one."""
        state = FleetState(TOPO)
        store(state.chips, T0, fp8_flop_total=1e16)
        store(state.chips, T0 + 1, util=np.float32(0.5))
        assert store(state.chips, T0 + 2, fp8_flop_total=1e16 + 1.9 * PEAK) == Counter()
        assert state.chips.take_increase("fp8_flop_total")[0] == pytest.approx(1.9 * PEAK, rel=1e-12)


class TestThroughTheCore:
    def test_one_bad_counter_costs_that_counter_only(self) -> None:
        """A node frame whose chip 5 reports 1e300 FLOP: chip 5's counter is refused and counted in the window
        and the stats, its other fields stored, and the fleet counter counts the other 15 chips' FLOP."""
        core = MonitorCore(TOPO)
        core.step([node_frame(0, 0, T0, 1e16)])
        flop = np.full(16, 1e16 + 0.5 * PEAK)
        flop[5] = 1e300
        analysis = core.step([node_frame(0, 1, T0 + 1, flop, util=0.75)])
        assert analysis.flush.refused == Counter({("chips", "fp8_flop_total", "over_bound"): 1})
        assert core.stats.counters_refused == Counter({("chips", "fp8_flop_total", "over_bound"): 1})
        assert analysis.flush.applied == 1
        assert core.state.chips.gauges["util"][5] == np.float32(0.75)
        assert analysis.aggregates is not None
        assert analysis.aggregates.site_counters["fp8_flop_total"].tolist() == [15 * 0.5 * PEAK]

    def test_the_margin_setting_reaches_the_bound(self) -> None:
        """1.1 x peak is refused at the default margin of 1.05 and counted at a margin of 1.2."""
        refused = {}
        for margin in (1.05, 1.2):
            core = MonitorCore(TOPO, MonitorConfig(counter_rate_margin=margin))
            core.step([node_frame(0, 0, T0, 1e16)])
            refused[margin] = sum(core.step([node_frame(0, 1, T0 + 1, 1e16 + 1.1 * PEAK)]).flush.refused.values())
        assert refused == {1.05: 16, 1.2: 0}


# The property: whatever frames arrive, in whatever order and with whatever totals and sample times.

NODES = (0, 5)  # one node of each UltraServer
Plan = list[list[tuple[int, bool, int, float, str, float]]]
# The attack a sample clock going back and forth makes on a reference that follows it: each second forward
# counted again (hypothesis finds it only now and then: it is kept as an example).
SAWTOOTH: Plan = [[(0, False, 1, step, "peak", 1.0)] for step in (4.5, -4.5, 4.5, -4.5, 4.5)]


@st.composite
def frame_plans(draw: st.DrawFn) -> Plan:
    """Draw windows of frames: (node, whether its publisher changes, seq step, t_s step, how the totals move, a
    scale for that move)."""
    frame = st.tuples(
        st.sampled_from(NODES), st.sampled_from([False] * 7 + [True]),
        st.sampled_from([1, 1, 1, 1, 2, 20, 0, -1, -5, 200_000]),  # seq step: next, gaps, repeats, back, far ahead
        # Sample-time steps, backwards (within the streams' 5 s slack, so applied) as often as forwards.
        st.sampled_from([1.0, 4.5, 0.5, 0.0, -0.7, -4.5, -4.0, 30.0]),
        st.sampled_from(["peak"] * 6 + ["over", "huge", "restart", "zero", "repeat", "negative", "back"]),
        st.floats(0.0, 1.0),
    )
    return draw(st.lists(st.lists(frame, min_size=1, max_size=3), min_size=1, max_size=25))


def totals(how: str, scale: float, last: np.ndarray, dt: float) -> np.ndarray:
    """Return the chips' next totals, moved from ``last`` over ``dt`` seconds as ``how`` says."""
    ramp = 1.0 + np.arange(16) * 1e-3  # every chip a little apart
    if how == "peak":  # at up to the bound: what double-counted time would show
        return last + max(dt, 0.0) * BOUND * (0.9 + 0.1 * scale) * ramp / ramp[-1]
    if how == "over":
        return last + max(dt, 0.1) * BOUND * (1.0 + scale) * ramp
    if how == "huge":
        return np.full(16, [1e18, 1e300, 2.0**64, 1e30][int(scale * 3.999)]) * ramp
    if how == "restart":
        return scale * 3 * BOUND * ramp
    if how == "zero":
        return np.zeros(16)
    if how == "negative":
        return -scale * 1e20 * ramp
    if how == "back":
        return np.maximum(last - scale * 1e17, 0.0)
    return last.copy()


class TestNoFrameSequencePoisonsTheCounters:
    @given(frame_plans())
    @example(SAWTOOTH)
    @settings(max_examples=150, deadline=None)
    def test_the_flop_counters_never_outrun_the_peak(self, plan: Plan) -> None:
        """Over any windows of frames (totals huge, backwards, repeated, negative; sample times forwards,
        backwards, repeated; gaps, restarts, publisher changes), each UltraServer's and the fleet's FP8 FLOP
        counter grows by at most its reporting chips' peak x margin x the span of the sample times they sent
        (each UltraServer has one node reporting here: a bound tighter than its 64 chips' peak)."""
        state = FleetState(TOPO)
        ingest = Ingest(state, IngestStats(), tick_s=1.0)
        sums = CounterSums(TOPO)
        seq = dict.fromkeys(NODES, 0)
        t_s = dict.fromkeys(NODES, T0)
        last = {node: np.full(16, 1e16) for node in NODES}
        publishers = dict.fromkeys(NODES, 0)
        sent: dict[int, list[float]] = {node: [] for node in NODES}
        rx_s = 0.0
        for window in plan:
            rx_s += 1.0
            items = []
            for node, change, seq_step, t_step, how, scale in window:
                publishers[node] += change
                publisher = f"p{publishers[node]}"
                seq[node] = max(seq[node] + seq_step, 0)
                t_s[node] += t_step
                last[node] = totals(how, scale, last[node], t_step)
                sent[node].append(t_s[node])
                frame = node_frame(node, seq[node], t_s[node], last[node], publisher=publisher)
                items.append(Received(rx_s, None, frame, rx_wall_s=T0 + rx_s))
            ingest.record(ingest.apply(items))
            sums.update(state)
            peak = [16 * BOUND * (max(sent[node], default=T0) - min(sent[node], default=T0)) for node in NODES]
            per_us = sums.ultraserver["fp8_flop_total"]
            assert (per_us >= 0).all()
            assert (per_us <= np.multiply(peak, 1 + 1e-9)).all(), (per_us.tolist(), peak)
            assert sums.site["fp8_flop_total"].sum() <= sum(peak) * (1 + 1e-9)

    # Under the bound by a margin float64's rounding of totals up to 1e22 (a few parts in 1e10) cannot eat.
    @given(frame_plans(), st.floats(0.0, 0.99), st.floats(0.0, 1e22))
    @settings(max_examples=100, deadline=None)
    def test_a_good_sample_after_any_bad_one_counts_again(self, plan: Plan, share: float, origin: float) -> None:
        """After any windows of frames, two frames of a new publisher sampled later than all of them, the second
        ``share`` x the bound above the first over 1 s: the second adds exactly its increase to the counters."""
        state = FleetState(TOPO)
        ingest = Ingest(state, IngestStats(), tick_s=1.0)
        sums = CounterSums(TOPO)
        seq, t_s, rx_s, publisher = 0, T0, 0.0, 0
        flop = np.full(16, 1e16)
        latest = T0
        for window in plan:
            rx_s += 1.0
            items = []
            for _node, change, seq_step, t_step, how, scale in window:
                seq, t_s, publisher = max(seq + seq_step, 0), t_s + t_step, publisher + change
                latest = max(latest, t_s)
                flop = totals(how, scale, flop, t_step)
                items.append(Received(rx_s, None, node_frame(0, seq, t_s, flop, publisher=f"p{publisher}"),
                                      rx_wall_s=T0 + rx_s))
            ingest.record(ingest.apply(items))
        first = np.full(16, origin)
        second = first + share * BOUND
        rx_s += 10.0  # the old publisher silent long enough for another to take the node over at once
        for k, values in enumerate((first, second)):
            frame = node_frame(0, k, latest + 1 + k, values, publisher="fresh")
            result = ingest.apply([Received(rx_s + k, None, frame, rx_wall_s=latest + 1 + k)])
            assert result.applied == 1
            sums.update(state)
            if k == 0:
                before = sums.ultraserver["fp8_flop_total"][0]
        assert result.refused == Counter()
        assert sums.ultraserver["fp8_flop_total"][0] - before == pytest.approx(float((second - first).sum()),
                                                                              rel=1e-9, abs=1e-3)
