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
        self.topology = build_fleet(1, 2)
        self.model = FleetModel(self.topology, np.random.default_rng(3), tick_s=TICK_S, start_s=0.0,
                                params=FleetParams(noise=0.0))
        self.core = MonitorCore(self.topology, MonitorConfig(tick_s=TICK_S, stale_after_ticks=STALE_TICKS,
                                                             feed_hold_s=self.hold_s))

    def run(self, ticks: int) -> list[Event]:
        """Publish ``ticks`` ticks, the monitor listening throughout; return the events."""
        events = []
        for _ in range(ticks):
            frames = [f for _t, f in tick_frames(self.topology, self.model.step(self.tick), publisher="p")
                      if not (isinstance(f, NodeFrame) and f.node in self.silent)]
            events += self.core.step(frames, now_s=self.tick * TICK_S).events
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
