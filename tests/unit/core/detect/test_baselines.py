"""Per-entity baselines: each link, port and chip is judged by a change in
itself, so a steady difference from its peers never alarms, while the same
difference appearing suddenly does (docs/detection.md, "Baselines")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect._baseline import Baseline, RateBaseline
from rainierd.fleet.topology import build_fleet
from rainierd.sim.fleet import FleetModel, TickSample
from rainierd.sim.frames import tick_frames

SECONDS = np.ones(1, np.float32)


class TestBaseline:
    def test_a_plain_mean_while_learning_then_judged_against_itself(self) -> None:
        base = Baseline.empty(1, halflife_s=3_600.0, learn_s=3.0, clip=0.1)
        assert base.reference(7.0)[0] == 7.0  # no history: its peers' level
        for x in (1.0, 1.1, 1.2):
            base.update(np.array([x], np.float32), np.array([True]), SECONDS)
        assert base.learned()[0]
        assert base.reference(7.0)[0] == pytest.approx(1.1)

    def test_one_spike_while_learning_pulls_at_most_learn_clip_times_its_weight(self) -> None:
        """A heavy-tailed sample in the first seconds cannot leave a level far off the entity's (which its
        change detector would read as a fault, and by that evidence freeze)."""
        base = Baseline.empty(1, halflife_s=3_600.0, learn_s=30.0, clip=0.1, learn_clip=0.3)
        for x in (1.0, 1.8, 1.0, 1.0):
            base.update(np.array([x], np.float32), np.array([True]), SECONDS)
        spiked = 1.0 + 0.3 / 2  # the spike, clipped at 30 % and weighed 1/2
        expected = spiked + (1.0 - spiked) / 3
        expected += (1.0 - expected) / 4
        assert base.level[0] == pytest.approx(expected, rel=1e-5)
        assert base.level[0] < 1.08  # a plain mean would be 1.2

    def test_a_learned_level_moves_at_most_clip_times_its_weight(self) -> None:
        """A sample ten times the level pulls it as one 10 % higher would: a spike cannot drag a baseline.
        (Its weight is that of a plain mean over its history, here 1 s, until the half-life's is larger.)"""
        base = Baseline.empty(1, halflife_s=60.0, learn_s=1.0, clip=0.1)
        base.update(np.array([1.0], np.float32), np.array([True]), SECONDS)
        base.update(np.array([10.0], np.float32), np.array([True]), SECONDS)
        assert base.level[0] == pytest.approx(1.0 + 0.1 * 0.5, rel=1e-5)

    def test_a_sample_not_accepted_leaves_it_alone(self) -> None:
        """A baseline is frozen while its entity is unhealthy or gathering evidence: a fault is not learned."""
        base = Baseline.empty(1, halflife_s=60.0, learn_s=1.0, clip=0.1)
        base.update(np.array([1.0], np.float32), np.array([True]), SECONDS)
        for _ in range(1_000):
            base.update(np.array([2.0], np.float32), np.array([False]), SECONDS)
        assert base.level[0] == 1.0
        assert base.history_s[0] == 1.0

    def test_a_slow_drift_is_absorbed_far_slower_than_any_detector_sees_it(self) -> None:
        """After an hour of history, latency creeping up 50 % over ten minutes, every sample accepted (no
        detector freezing it): the level has followed less than a tenth of the rise."""
        base = Baseline.empty(1, halflife_s=3_600.0, learn_s=30.0, clip=0.1)
        for _ in range(3_600):
            base.update(np.array([1.0], np.float32), np.array([True]), SECONDS)
        for t in range(600):
            base.update(np.array([1.0 + 0.5 * t / 600], np.float32), np.array([True]), SECONDS)
        assert base.level[0] < 1.05


class TestRateBaseline:
    def test_shrinks_to_the_prior_without_history_and_to_its_own_rate_with_it(self) -> None:
        rate = RateBaseline.empty(1, halflife_s=1e9, prior_s=100.0)
        assert rate.rate(0.2)[0] == pytest.approx(0.2)
        for _ in range(10_000):
            rate.update(np.ones(1, np.float32), SECONDS, accept=np.array([True]), clean=np.array([True]))
        assert rate.rate(0.2)[0] == pytest.approx((10_000 + 20) / 10_100, rel=1e-4)

    def test_a_rate_per_packet_follows_the_exposure_not_the_seconds(self) -> None:
        """Counts that follow an exposure (retransmits over packets sent) give a rate per unit of it, whatever the
        exposure does from second to second; a second with no exposure, or an unknown one, is not learned."""
        rate = RateBaseline.empty(1, halflife_s=1e9, prior_s=0.0)
        yes = np.array([True])
        for t in range(1_000):
            sent = 1e5 if t % 2 else 1.6e6  # a step's traffic swinging x16
            rate.update(np.full(1, 1e-6 * sent, np.float32), SECONDS, accept=yes, clean=yes,
                        exposure=np.full(1, sent, np.float32))
        before = rate.arrays()
        for sent in (0.0, np.nan):
            rate.update(np.full(1, 5.0, np.float32), SECONDS, accept=yes, clean=yes,
                        exposure=np.full(1, sent, np.float32))
        assert rate.rate(0.0, 0.0)[0] == pytest.approx(1e-6, rel=1e-4)
        assert {k: v.tolist() for k, v in rate.arrays().items()} == {k: v.tolist() for k, v in before.items()}

    def test_once_learned_it_learns_a_window_late_and_only_if_it_stayed_clean(self) -> None:
        """After learn_s, what a port sees is held at least delay_s and dropped if it was unhealthy meanwhile: a
        slow fault found within the delay is never learned as the port's normal rate."""
        rate = RateBaseline.empty(1, halflife_s=1e9, prior_s=0.0, learn_s=10.0, delay_s=100.0)
        yes, no = np.array([True]), np.array([False])
        for _ in range(10):
            rate.update(np.ones(1, np.float32), SECONDS, accept=yes, clean=yes)
        assert rate.learned()[0]
        assert rate.rate(0.0)[0] == pytest.approx(1.0)
        for t in range(100):  # a window of 5/s, the port unhealthy for one second of it
            rate.update(np.full(1, 5.0, np.float32), SECONDS, accept=yes, clean=no if t == 50 else yes)
        assert rate.rate(0.0)[0] == pytest.approx(1.0)
        for _ in range(100):  # a clean window of 2/s is held at its end, not learned yet
            rate.update(np.full(1, 2.0, np.float32), SECONDS, accept=yes, clean=yes)
        assert rate.rate(0.0)[0] == pytest.approx(1.0)
        for _ in range(100):  # ... and learned once the window after it has ended clean too
            rate.update(np.full(1, 3.0, np.float32), SECONDS, accept=yes, clean=yes)
        assert rate.rate(0.0)[0] == pytest.approx((10 + 200) / 110)

    def test_a_fault_that_began_late_in_a_window_is_not_learned_when_that_window_ends(self) -> None:
        """A rise that begins a second before a window ends and is found within delay_s of its start: neither
        that window nor the next is learned (with one window alone, that rise was learned within seconds)."""
        rate = RateBaseline.empty(1, halflife_s=1e9, prior_s=0.0, learn_s=10.0, delay_s=100.0)
        yes, no = np.array([True]), np.array([False])
        for _ in range(10):
            rate.update(np.ones(1, np.float32), SECONDS, accept=yes, clean=yes)
        for t in range(99 + 101):  # the rise begins in the window's last second and is found 50 s later
            rate.update(np.full(1, 1.0 if t < 99 else 5.0, np.float32), SECONDS, accept=yes,
                        clean=no if t == 149 else yes)
        assert rate.rate(0.0)[0] == pytest.approx(1.0)


Transform = Callable[[TickSample, int], None]


def raised(transform: Transform, *, ticks: int, seed: int = 0) -> list[tuple[int, str, int, tuple[str, ...]]]:
    """Run two healthy UltraServers for ``ticks`` 1 s ticks, ``transform`` editing each tick's records in place."""
    topo = build_fleet(1, 2)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0)
    core = MonitorCore(topo)
    out = []
    for tick in range(ticks):
        sample = model.step(tick)
        transform(sample, tick)
        events = core.step([f for _t, f in tick_frames(topo, sample, publisher="t")]).events
        out += [(e.tick, e.entity, e.id, e.reasons) for e in events if e.raised]
        if tick >= 0:
            untransform(sample, tick)
    return out


_UNDO: list[Callable[[], None]] = []


def untransform(sample: TickSample, tick: int) -> None:
    """Undo this tick's edits: the model keeps its records between ticks, and counters must stay its own."""
    while _UNDO:
        _UNDO.pop()()


def scale(records: np.ndarray, field: str, index: int, factor: float) -> None:
    before = records[field][index].copy()
    records[field][index] = before * factor

    def undo() -> None:
        records[field][index] = before

    _UNDO.append(undo)


@dataclass(frozen=True)
class Offset:
    """A static difference of one entity from its peers: which records, which field, how much."""

    entity: str
    table: Callable[[TickSample], np.ndarray]
    field: str
    index: int
    factor: float
    reason: str

    def apply(self, sample: TickSample) -> None:
        scale(self.table(sample), self.field, self.index, self.factor)


OFFSETS = [
    pytest.param(Offset("neuronlink", lambda s: s.links, "latency_us", 40, 1.4, "latency"), id="link-latency+40%"),
    pytest.param(Offset("neuronlink", lambda s: s.links, "bw_bytes_s", 41, 0.85, "bandwidth"),
                 id="link-bandwidth-15%"),
    pytest.param(Offset("efa", lambda s: s.efa, "latency_us", 9, 1.4, "latency"), id="efa-latency+40%"),
]


@pytest.mark.parametrize("offset", OFFSETS)
class TestOffsets:
    def test_a_steady_offset_never_alarms(self, offset: Offset) -> None:
        """The entity differs from its peers by the same margin from the first sample on: ten minutes, no alarm."""
        assert raised(lambda s, t: offset.apply(s), ticks=600) == []

    def test_the_same_offset_appearing_suddenly_alarms(self, offset: Offset) -> None:
        """The same margin appearing after five minutes is a change: that entity, for that reason, within 10 s."""
        events = raised(lambda s, t: offset.apply(s) if t >= 300 else None, ticks=330)
        assert [(e, i) for _t, e, i, _r in events] == [(offset.entity, offset.index)]
        tick, _e, _i, reasons = events[0]
        assert offset.reason in reasons
        assert 300 <= tick <= 310


def test_a_port_that_always_retransmits_more_is_not_lossy_but_one_that_starts_to_is() -> None:
    """Port 9 retransmitting 1/s on top of the 0.2/s background from the start: its own rate, never an alarm;
    port 12 starting to after its rate has been learned (half an hour): found, as loss, within ten minutes."""
    def more(sample: TickSample, tick: int) -> None:
        rng = np.random.default_rng(tick)
        for port, since in ((9, 0), (12, 1_900)):
            if tick >= since:
                extra = np.uint64(rng.poisson(1.0))
                counters = sample.efa["retrans_pkts_total"]
                counters[port] += extra  # kept: a counter only grows

    events = raised(more, ticks=2_500)
    assert [(e, i) for _t, e, i, _r in events] == [("efa", 12)]
    tick, _e, _i, reasons = events[0]
    assert 1_900 < tick <= 2_500
    assert set(reasons) & {"loss_rate", "retransmits"}
