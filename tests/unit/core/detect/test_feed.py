"""Specification of the feed detector (rainierd/core/detect/feed.py): most
of the nodes heard falling silent together is one ``feed`` loss, not a
``node lost`` per node; a node's own silence is still reported in its usual
time; a silence that outlasts the hold is believed."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.detect import Event
from rainierd.core.ingest import Received
from rainierd.fleet.topology import build_fleet
from rainierd.sim.fleet import FleetModel, FleetParams
from rainierd.sim.frames import tick_frames
from rainierd.wire.records import NodeFrame

TICK_S = 1.0
STALE_TICKS = 3  # the default: a node is lost after 3 s of listening without a frame


@dataclass
class Fleet:
    """Two UltraServers (8 nodes) published tick by tick; ``silent`` nodes' frames are not delivered."""

    hold_s: float = 60.0
    tick: int = 0
    silent: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.in_flight: list[Received] = []  # frames sent but not yet received (``run``'s ``late_s``)
        self.topology = build_fleet(1, 2)
        self.model = FleetModel(self.topology, np.random.default_rng(3), tick_s=TICK_S, start_s=0.0,
                                params=FleetParams(noise=0.0))
        self.core = MonitorCore(self.topology, MonitorConfig(tick_s=TICK_S, stale_after_ticks=STALE_TICKS,
                                                             feed_hold_s=self.hold_s))

    def run(self, ticks: int, *, late_s: float = 0.0) -> list[Event]:
        """Publish ``ticks`` ticks, the monitor listening throughout; return the events.

        With ``late_s``, these ticks' frames are received ``late_s`` after their tick, by the first analysis
        at or after it."""
        events = []
        for _ in range(ticks):
            now_s = self.tick * TICK_S
            frames = [f for _t, f in tick_frames(self.topology, self.model.step(self.tick), publisher="p")
                      if not (isinstance(f, NodeFrame) and f.node in self.silent)]
            self.in_flight += [Received(now_s + late_s, None, f) for f in frames]
            arrived = [r for r in self.in_flight if r.rx_s <= now_s]
            self.in_flight = [r for r in self.in_flight if r.rx_s > now_s]
            analysis = self.core.analyse_frames(arrived, now_s=now_s)
            self.core.ingest.record(analysis.flush)
            events += analysis.events
            self.tick += 1
        return events


def summary(events: list[Event]) -> list[tuple[str, int, str, str]]:
    """Return each event as (entity, id, new state, reasons), with the tick left out."""
    return [(e.entity, e.id, e.after, ",".join(e.reasons)) for e in events]


class TestFeedLoss:
    def test_every_node_silent_together_is_one_feed_event_not_a_node_lost_each(self) -> None:
        """The whole fleet's frames stop at once (a broker node lost under its publisher): one `feed lost`
        event with reason feed_lost, no node or chip event; when frames return, one `feed healthy`."""
        fleet = Fleet()
        assert fleet.run(20) == []
        fleet.silent = set(range(8))
        lost = fleet.run(20)
        assert summary(lost) == [("feed", 0, "lost", "feed_lost")]
        assert lost[0].tick == 19 + STALE_TICKS  # last heard at 19: as soon as a node would be judged lost
        view = fleet.core.detector.feed.view
        assert (view.lost, view.silent_nodes, view.base_nodes) == (True, 8, 8)
        fleet.silent = set()
        assert summary(fleet.run(10)) == [("feed", 0, "healthy", "")]
        assert fleet.core.detector.feed.view.lost is False

    def test_half_the_nodes_silent_together_is_the_feed(self) -> None:
        """Four of eight nodes (one publisher's share) silent in the same tick: the feed, not four nodes."""
        fleet = Fleet()
        fleet.run(20)
        fleet.silent = {0, 1, 2, 3}
        assert summary(fleet.run(20)) == [("feed", 0, "lost", "feed_lost")]

    def test_one_node_silent_is_still_lost_in_its_usual_time(self) -> None:
        """A single node's silence (1 of 8) is that node's: `node lost` after stale_after, no feed event."""
        fleet = Fleet()
        fleet.run(20)
        fleet.silent = {5}
        events = [e for e in fleet.run(20) if e.entity != "chip"]
        assert summary(events) == [("node", 5, "lost", "silent")]
        assert events[0].tick == 19 + STALE_TICKS  # last heard at 19

    def test_nodes_falling_silent_one_by_one_are_each_lost(self) -> None:
        """Nodes failing apart (each more than a stale interval after the last) are node failures, however many."""
        fleet = Fleet()
        fleet.run(20)
        events = []
        for node in range(6):
            fleet.silent.add(node)
            events += [e for e in fleet.run(STALE_TICKS + 2) if e.entity != "chip"]
        assert summary(events) == [("node", n, "lost", "silent") for n in range(6)]

    def test_a_silence_that_outlasts_the_hold_is_believed(self) -> None:
        """Still silent hold_s after the onset: every node is judged lost, and the feed stays lost until they
        are heard again."""
        fleet = Fleet(hold_s=10.0)
        fleet.run(20)
        fleet.silent = set(range(8))
        events = [e for e in fleet.run(30) if e.entity != "chip"]
        assert summary(events) == [("feed", 0, "lost", "feed_lost")] + [("node", n, "lost", "silent")
                                                                         for n in range(8)]
        assert events[1].tick == events[0].tick + 10
        fleet.silent = set()
        back = [e for e in fleet.run(10) if e.entity != "chip"]
        assert ("feed", 0, "healthy", "") in summary(back)

    def test_a_node_still_silent_when_the_feed_returns_is_lost_once_the_hold_ends(self) -> None:
        """The feed returns with one node still silent: it keeps the rest of hold_s to come back (agents
        reconnect on their own backoff), then is judged lost."""
        fleet = Fleet(hold_s=10.0)
        fleet.run(20)
        fleet.silent = set(range(8))
        onset = fleet.run(STALE_TICKS + 2)
        fleet.silent = {6}
        events = [e for e in fleet.run(20) if e.entity != "chip"]
        assert summary(onset) == [("feed", 0, "lost", "feed_lost")]
        assert summary(events) == [("feed", 0, "healthy", ""), ("node", 6, "lost", "silent")]
        assert events[1].tick == onset[0].tick + 10


class TestLastFramesApart:
    """The feed stops after a tick that came in part (its broker node killed while forwarding it) or spread out
    (a starved publisher): some nodes' last frame is older than the rest's, so they fall silent an analysis
    before the rest."""

    @staticmethod
    def assert_one_feed_loss(*, late_s: float) -> None:
        """Two nodes of eight miss the last tick that gets through (the rest's frames of it ``late_s`` late), then
        all fall silent for 20 ticks and come back: one `feed lost` and one `feed healthy`, no node or chip event."""
        fleet = Fleet()
        fleet.run(20)
        fleet.silent = {6, 7}
        events = fleet.run(1, late_s=late_s)
        fleet.silent = set(range(8))
        events += fleet.run(20)
        assert summary(events) == [("feed", 0, "lost", "feed_lost")]
        fleet.silent = set()
        assert summary(fleet.run(10)) == [("feed", 0, "healthy", "")]

    def test_nodes_that_missed_the_feeds_last_tick_are_the_feeds_not_lost(self) -> None:
        """Two nodes of eight miss the last tick that gets through, then all fall silent: one `feed lost`, no
        node or chip event, though the two are silent an analysis before the rest (their last frame a tick
        older, the rest overdue since theirs: one silence, begun within a stale interval)."""
        self.assert_one_feed_loss(late_s=0.0)

    def test_a_short_silence_after_a_missed_tick_is_the_feeds_not_the_nodes(self) -> None:
        """Two nodes miss a tick, then the whole feed pauses for two ticks and resumes: the two are silent for a
        stale interval while the rest are only overdue; that is the feed's pause (lost and back), not two nodes
        lost and back."""
        fleet = Fleet()
        fleet.run(20)
        fleet.silent = {6, 7}
        events = fleet.run(1)
        fleet.silent = set(range(8))
        events += fleet.run(2)
        fleet.silent = set()
        events += fleet.run(10)
        assert [e for e in summary(events) if e[0] != "feed"] == []

    def test_nodes_that_missed_the_last_tick_wait_for_the_rest_to_be_late_enough_to_tell(self) -> None:
        """As above, but the last tick that gets through arrives late (0.4 of a tick): when the two fall silent
        the rest are past their period, not yet overdue.  The two wait (a tick at most) rather than being judged
        lost; a tick later the rest are overdue: one `feed lost`, no node or chip event."""
        self.assert_one_feed_loss(late_s=0.4 * TICK_S)

    def test_a_node_lost_while_the_rest_are_late_is_judged_a_tick_later_at_most(self) -> None:
        """Two nodes fall silent while the rest's frames are held up a tick (past their period, not overdue,
        when the two go silent): the two wait one tick; then the rest, heard again, show the feed working, and
        the two are lost, a tick after their usual time, with no feed event."""
        fleet = Fleet()
        fleet.run(20)
        fleet.silent = {6, 7}
        events = fleet.run(1, late_s=0.4 * TICK_S)
        events += fleet.run(6, late_s=1.4 * TICK_S)
        nodes = [e for e in events if e.entity == "node"]
        assert summary(nodes) == [("node", 6, "lost", "silent"), ("node", 7, "lost", "silent")]
        assert [e.tick for e in nodes] == [19 + STALE_TICKS + 1] * 2
        assert [e for e in events if e.entity == "feed"] == []
