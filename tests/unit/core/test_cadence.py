"""Specification of each stream's period (core/cadence.py) and of silence judged
in it (``FleetState.silent``): a publisher at neuron-monitor's 5 s beside agents
at 1 s raises no silence and no feed loss over minutes, whether it declares its
period or the monitor learns it; a declared change of period raises nothing; a
real silence is still raised after ``stale_after_ticks`` of the period; a
declared period is the one judged by."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.cadence import MAX_PERIOD_S, Cadence
from rainierd.core.config import MonitorConfig
from rainierd.core.detect import Event
from rainierd.core.ingest import Received
from rainierd.core.state import FleetState
from rainierd.fleet.topology import build_fleet
from rainierd.sim.fleet import FleetModel, FleetParams
from rainierd.sim.frames import tick_frames
from rainierd.wire.records import NodeFrame

NAN = float("nan")
START_S = 1_800_000_000.0


class TestCadence:
    def test_the_learned_period_is_the_upper_median_of_the_last_five_intervals(self) -> None:
        """One interval is the period; two give the longer; five give their median, so two outliers (a
        silence, a flushed backlog) among them move nothing, and a sixth pushes out the first."""
        cadence = Cadence(2)
        seen = []
        for interval in (5.0, 5.2, 0.01, 60.0, 4.9, 0.02):
            cadence.observe(np.array([1]), np.array([interval]), np.array([NAN]))
            seen.append(float(cadence.period_s[1]))
        assert seen == [5.0, 5.2, 5.0, 5.2, 5.0, 4.9]
        assert np.isnan(cadence.period_s[0])  # never heard: unknown

    def test_a_declared_period_wins_while_frames_declare_it(self) -> None:
        """Frames every 2 s declaring 1 s are judged by 1 s; once a frame declares nothing, by the 2 s learned."""
        cadence = Cadence(1)
        for _ in range(3):
            cadence.observe(np.array([0]), np.array([2.0]), np.array([1.0]))
        assert (cadence.period_s[0], cadence.learned_s[0]) == (1.0, 2.0)
        cadence.observe(np.array([0]), np.array([2.0]), np.array([NAN]))
        assert cadence.period_s[0] == 2.0

    @pytest.mark.parametrize("value", [0.0, -1.0, MAX_PERIOD_S + 1, float("inf")])
    def test_an_implausible_period_or_interval_is_ignored(self, value: float) -> None:
        """A period or interval not in (0, 3600] s is neither declared nor learned."""
        cadence = Cadence(1)
        cadence.observe(np.array([0]), np.array([value]), np.array([value]))
        assert np.isnan([cadence.period_s[0], cadence.learned_s[0], cadence.declared_s[0]]).all()


class TestStaleAfter:
    def test_silence_is_judged_in_each_stream_s_own_period(self) -> None:
        """Node 1 reporting every 5 s is silent after 15 s unheard, the others after stale_after_s; a site's
        facility record after its site's period; with no period longer than the tick, one figure for all."""
        state = FleetState(build_fleet(1, 2), stale_after_ticks=3)
        assert state.stale_after(state.chips, 3.0) == 3.0
        state.node_cadence.observe(np.array([0, 1]), np.array([1.0, 5.0]), np.array([NAN, NAN]))
        state.chips.rx_s[:] = 0.0
        state.now_s = 10.0
        silent = state.silent(state.chips, 3.0).reshape(8, 16)
        assert silent.all(axis=1).tolist() == [True, False] + [True] * 6
        assert state.fresh(state.chips, 3.0).reshape(8, 16).any(axis=1).tolist() == [False, True] + [False] * 6
        state.now_s = 15.0
        assert state.silent(state.chips, 3.0).all()
        assert state.node_stale_after_s(3.0).tolist() == [3.0, 15.0] + [3.0] * 6
        state.site_cadence.observe(np.array([0]), np.array([60.0]), np.array([NAN]))
        state.facility.rx_s[:] = 0.0
        state.now_s = 179.0
        assert state.silent(state.facility, 3.0).tolist() == [False]


@dataclass
class Fleet:
    """Two UltraServers (8 nodes) publishing to one monitor: each node every ``period[node]`` ticks (1 by
    default), numbering its own frames, declaring its period (or ``declared[node]``) when ``declare``.  As a
    publisher that reads its period before each frame, a node changing period sends its next frame when the
    old one says and waits the new one after it, which that frame declares.  The monitor
    analyses every tick; its listening clock stands for the first ``grace`` ticks (its reconnect grace)."""

    declare: bool = True
    grace: int = 0
    period: dict[int, int] = field(default_factory=dict)
    declared: dict[int, float] = field(default_factory=dict)  # a period a node declares other than its own
    silent: set[int] = field(default_factory=set)
    tick: int = 0

    def __post_init__(self) -> None:
        self.topology = build_fleet(1, 2)
        self.model = FleetModel(self.topology, np.random.default_rng(3), tick_s=1.0, start_s=START_S,
                                params=FleetParams(noise=0.0))
        self.core = MonitorCore(self.topology, MonitorConfig(tick_s=1.0, stale_after_ticks=3))
        self.seq: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.wait: dict[int, int] = {}  # ticks until each node's next frame: its period when it last sent

    def run(self, ticks: int) -> list[Event]:
        """Publish and analyse ``ticks`` ticks; return the events."""
        events = []
        for _ in range(ticks):
            k = self.tick
            listening = float(max(k - self.grace, 0))
            items = []
            for _topic, sampled in tick_frames(self.topology, self.model.step(k), publisher="p"):
                if not isinstance(sampled, NodeFrame) or sampled.node in self.silent:
                    continue
                node, period = sampled.node, self.period.get(sampled.node, 1)
                if k - self.last.get(node, -period) < self.wait.get(node, period):
                    continue
                self.last[node], self.wait[node] = k, period
                seq = self.seq[node] = self.seq.get(node, -1) + 1
                declared = self.declared.get(node, float(period)) if self.declare else NAN
                frame = replace(sampled, seq=seq, tick=seq, period_s=declared)
                items.append(Received(listening, None, frame, rx_wall_s=frame.t_s))
            events += self.core.analyse_frames(items, now_s=listening).events
            self.tick += 1
        return events


def silences(events: list[Event]) -> list[tuple[str, int, str]]:
    """Return the events that judge silence, (entity, id, new state): chips stale, nodes lost, the feed."""
    return [(e.entity, e.id, e.after) for e in events
            if e.after in ("stale", "lost") or e.before in ("stale", "lost") or e.entity == "feed"]


class TestMixedPeriods:
    @pytest.mark.parametrize(("declare", "grace"), [(True, 0), (False, 20)])
    def test_a_5_s_publisher_beside_1_s_ones_raises_nothing_over_minutes(self, declare: bool, grace: int) -> None:
        """Nodes 2 and 5 report every 5 s, the six others every second, for 5 minutes: no event at all, whether
        they declare their period or the monitor learns it (within its reconnect grace, as a monitor that
        starts does); the monitor knows each node's period."""
        fleet = Fleet(declare=declare, grace=grace, period={2: 5, 5: 5})
        assert fleet.run(300) == []
        assert fleet.core.state.node_cadence.period_s.tolist() == [1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0]

    def test_a_declared_change_of_period_raises_nothing(self) -> None:
        """Node 2 reporting every 5 s, then every second, then every 5 s again (a minute each): no event."""
        fleet = Fleet(period={2: 5})
        events = fleet.run(60)
        fleet.period[2] = 1
        events += fleet.run(60)
        fleet.period[2] = 5
        events += fleet.run(60)
        assert events == []

    @pytest.mark.parametrize("declare", [True, False])
    def test_a_silence_is_raised_after_stale_after_ticks_of_the_period(self, declare: bool) -> None:
        """A 5 s node last heard at tick 40 is lost 15 s later (3 of its periods), not sooner, declared or
        learned; the 1 s nodes beside it are untouched."""
        fleet = Fleet(declare=declare, grace=20, period={2: 5})
        assert fleet.run(41) == []
        assert fleet.last[2] == 40
        fleet.silent = {2}
        assert fleet.run(14) == []
        assert silences(fleet.run(2)) == [("node", 2, "lost")]

    def test_a_declared_period_is_the_one_judged_by(self) -> None:
        """A node sending every 4 s while declaring 1 s is held to its word: it is lost 3 s after a frame, though
        its cadence (4 s, learned) would allow 12 s; sending the same undeclared raises nothing."""
        liar = Fleet(grace=20, period={2: 4}, declared={2: 1.0})
        assert ("node", 2, "lost") in silences(liar.run(60))
        state = liar.core.state
        assert (state.node_cadence.period_s[2], state.node_cadence.learned_s[2]) == (1.0, 4.0)
        assert Fleet(declare=False, grace=20, period={2: 4}).run(60) == []

    @pytest.mark.parametrize("slow", [(2, 5), (0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 5, 6)])
    def test_a_feed_loss_among_mixed_periods_is_still_the_feed_s(self, slow: tuple[int, ...]) -> None:
        """Every node's frames stop, 5 s publishers (each at its own phase) and 1 s ones alike, the slow ones
        a minority, the most, or all but one: one `feed lost` as soon as the 1 s nodes fall silent, no node
        lost, no chip stale (the slow nodes, silent up to 15 s later one by one, were overdue, and are held
        in turn)."""
        fleet = Fleet(period=dict.fromkeys(slow, 5))
        for node in slow:
            fleet.last[node] = node % 5 - 5
        assert fleet.run(60) == []
        fleet.silent = set(range(8))
        events = fleet.run(30)
        assert [(e.tick, *s) for e, s in zip(events, silences(events), strict=True)] == [(59 + 3, "feed", 0, "lost")]

    @pytest.mark.parametrize("failing", [3, 7])
    def test_one_node_s_silence_among_mixed_periods_is_that_node_s(self, failing: int) -> None:
        """Seven 5 s publishers (each at its own phase) and one at 1 s: node 3 (5 s) or node 7 (1 s) falling
        silent alone is that node lost, after 3 of its own periods, never the feed."""
        slow = range(7)
        fleet = Fleet(period=dict.fromkeys(slow, 5))
        for node in slow:
            fleet.last[node] = node % 5 - 5
        assert fleet.run(60) == []
        fleet.silent = {failing}
        last = fleet.last[failing]
        events = fleet.run(30)
        assert [(e.tick, *s) for e, s in zip(events, silences(events), strict=True) if e.entity != "chip"] == [
            (last + 3 * fleet.period.get(failing, 1), "node", failing, "lost")]


class TestAFleetWideGap:
    """A silence the whole fleet shared (the monitor back from a broker outage after its publishers, their
    frames of the outage never seen) leaves every fresh interval as long as the outage: the sample after it is
    still one sample's worth of learning and evidence, the streams' period, not the outage's seconds (the
    median of the fresh intervals alone let it weigh 12 s; issue 35's false straggler after broker kills)."""

    def test_typical_period_ignores_the_gap(self) -> None:
        cadence = Cadence(3)
        for k in range(5):
            cadence.observe(np.arange(3), np.full(3, 1.0 if k < 4 else 12.0), np.full(3, NAN))
        assert cadence.typical_s() == 1.0

    def test_the_sample_after_the_gap_is_learned_as_one_period(self) -> None:
        topology = build_fleet(1, 2)
        model = FleetModel(topology, np.random.default_rng(3), tick_s=1.0, start_s=START_S)
        core = MonitorCore(topology, MonitorConfig(tick_s=1.0, stale_after_ticks=3))
        chips = core.detector.chips
        learned = []
        for k in range(40):
            sample = model.step(k)
            if 20 <= k < 32:  # 12 s that no frame of any node reaches the monitor
                continue
            frames = [f for _t, f in tick_frames(topology, sample, publisher="p")]
            core.step(frames, now_s=START_S + k)
            learned.append((k, float(np.median(chips.baseline.history_s))))
        steps = {k: after - before for (_, before), (k, after) in itertools.pairwise(learned)}
        assert steps[32] <= 1.0 + 1e-6, steps  # the first sample after the gap: one period, not 12 s
        assert steps[19] == pytest.approx(1.0)  # and before it, one second a second
