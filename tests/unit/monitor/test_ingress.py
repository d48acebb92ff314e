"""Specification of what happens to a message between the socket and the
analysis: each one the client reads is counted under exactly one fate, a
publisher's excess over its share is refused before decoding and only its
own, a retained replay is never applied, and the share table stays bounded."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from rainierd.admission import BURST_TICKS, Admission, Shares
from rainierd.core.config import MonitorConfig
from rainierd.core.state import Scratch
from rainierd.fleet.shards import shard_view
from rainierd.fleet.topology import build_topology
from rainierd.monitor import Monitor, SharePolicy
from rainierd.monitor.inbox import Inbox, backlog_bytes_for
from rainierd.monitor.rejections import RejectionLog
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import encode_binary
from rainierd.wire.topics import parse_shard
from tests.helpers import hear

TOPO = build_topology("demo")


def shares(*, frames: float = 4.0, bytes_: int = 1_000_000, max_topics: int = 1_000) -> Shares:
    return Shares(frames_per_tick=frames, bytes_per_tick=bytes_, burst_ticks=BURST_TICKS, tick_s=1.0,
                  max_topics=max_topics)


def fleet_messages(ticks: int) -> list[list[tuple[str, bytes]]]:
    model = FleetModel(TOPO, np.random.default_rng(0), tick_s=1.0, start_s=time.time() - ticks)
    return [[(t, encode_binary(f)) for t, f in tick_frames(TOPO, model.step(k), publisher="sim")]
            for k in range(ticks)]


class TestShares:
    def test_a_genuine_stream_never_meets_its_share(self) -> None:
        """One message a tick, for an hour of ticks, is always admitted."""
        table = shares()
        verdicts = Counter(table.admit("n0", 4_000, now_s=float(t)) for t in range(3_600))
        assert verdicts == Counter(ok=3_600)

    def test_a_replayed_outbox_fits_in_the_burst(self) -> None:
        """A simulator's four ticks of outbox sent at once after an outage, then the live tick, are admitted."""
        table = shares()
        table.admit("n0", 4_000, now_s=0.0)
        assert [table.admit("n0", 4_000, now_s=30.0) for _ in range(5)] == ["ok"] * 5

    def test_a_flood_gets_its_share_and_no_more(self) -> None:
        """A topic sending 100 a tick for 10 ticks has the burst and then its share a tick admitted, the rest
        refused as over_share."""
        table = shares(frames=4.0)
        verdicts = Counter(table.admit("n3", 4_000, now_s=tick + i / 100) for tick in range(10) for i in range(100))
        admitted = 2 * 4 * BURST_TICKS  # two windows of 5 ticks, 4 a tick each
        assert verdicts == Counter(ok=admitted, over_share=1_000 - admitted)
        assert table.episodes == 1

    def test_the_next_message_through_carries_how_many_were_shed_before_it(self) -> None:
        """The inbox hands on, with the first message a flooding topic gets through, how many of its messages
        it refused since the last one (their frames' seq gap is then explained: counted lost, not a jump)."""
        table = shares(frames=4.0)
        through = [table.shed for tick in range(3 * BURST_TICKS) for i in range(100)
                   if table.admit("n3", 4_000, now_s=tick + i / 100) == "ok"]
        dropped = 100 * 3 * BURST_TICKS - len(through)
        assert table.admit("n3", 4_000, now_s=4.0 * BURST_TICKS) == "ok"  # back at a genuine pace
        assert sum(through) + table.shed == dropped
        assert through[: 4 * BURST_TICKS] == [0] * (4 * BURST_TICKS)  # the first window's share, none shed yet

    def test_one_topic_over_its_share_costs_another_nothing(self) -> None:
        """While n3 floods, n0's one message a tick is admitted every tick."""
        table = shares()
        n0 = []
        for tick in range(20):
            for i in range(500):
                table.admit("n3", 4_000, now_s=tick + i / 500)
            n0.append(table.admit("n0", 4_000, now_s=tick + 0.5))
        assert n0 == ["ok"] * 20

    def test_bytes_are_shared_too(self) -> None:
        """A topic sending few (within its frame share) but large messages is held to its byte share."""
        table = shares(frames=4.0, bytes_=100_000)
        admitted = [size for tick in range(20) for size in [90_000] * 3
                    if table.admit("b0", size, now_s=float(tick)) == "ok"]
        # 500 kB a window of 5 ticks: five 90 kB messages in each of the 4 windows, though 15 were within the
        # frame share.
        assert admitted == [90_000] * 5 * 4
        assert table.episodes == 1

    def test_an_episode_ends_once_the_topic_is_back_within_its_share(self) -> None:
        """A second flood after a quiet burst time is a second episode (a second log line), not the same one."""
        table = shares()
        for flood_start in (0.0, 100.0):
            for i in range(100):
                table.admit("n3", 4_000, now_s=flood_start + i / 100)
            table.admit("n3", 4_000, now_s=flood_start + 50.0)  # within its share again: the episode ends
        assert table.episodes == 2

    def test_the_table_is_bounded_and_forgets_only_idle_topics(self) -> None:
        """Past max_topics a new topic is refused while the others are busy, and admitted once an idle one is
        forgotten; the table never holds more than max_topics."""
        table = shares(max_topics=16)
        for k in range(16):
            table.admit(f"t{k}", 100, now_s=0.0)
        assert table.admit("new", 100, now_s=0.5) == "too_many_topics"
        assert len(table) == 16
        for k in range(8):  # half of them publish two windows later; the rest were last heard before that
            table.admit(f"t{k}", 100, now_s=2 * BURST_TICKS + 0.5)
        assert table.admit("new", 100, now_s=2 * BURST_TICKS + 1.0) == "ok"
        assert len(table) == 9
        assert table.table_full == 1


class TestInbox:
    def inbox(self, *, policy: SharePolicy | None = None, max_backlog_bytes: int = 2**24) -> Inbox:
        return Inbox(max_frame_bytes=65_536, max_backlog_bytes=max_backlog_bytes, listening_s=lambda: 0.0,
                     rejections=RejectionLog(), monotonic_s=lambda: 0.5,
                     admission=None if policy is None else Admission(policy, tick_s=1.0))

    def test_every_message_has_exactly_one_fate(self) -> None:
        """Messages received = queued + refused by reason + dropped from a full backlog, whatever arrives."""
        inbox = self.inbox(policy=SharePolicy(frames_per_tick=4.0), max_backlog_bytes=200_000)
        ticks = fleet_messages(3)
        sent = 0
        for topic, payload in ticks[0]:
            inbox.put(topic, payload)
            inbox.put(topic, payload, retained=True)
            inbox.put(topic, b"x" * 70_000)
            sent += 3
        n3_topic, n3_payload = next((t, p) for t, p in ticks[1] if t.endswith("/n3"))
        for _ in range(200):
            inbox.put(n3_topic, n3_payload)
            sent += 1
        received = sum(inbox.receipts.messages.values())
        refused = sum(inbox.receipts.refused.values())
        assert received == sent
        assert received == len(inbox) + refused + inbox.dropped_messages
        # Before any analysis no publisher is confirmed: every frame is charged to its topic's unconfirmed share.
        assert inbox.receipts.refused == Counter(retained=len(ticks[0]), oversize=len(ticks[0]),
                                                 over_share_unconfirmed=200 - (2 * BURST_TICKS - 1))

    def test_a_retained_message_is_refused_and_a_live_one_of_the_same_topic_is_not(self) -> None:
        """The retain flag marks a replay of what a publisher retained: refused as retained, never queued."""
        inbox = self.inbox()
        topic, payload = fleet_messages(1)[0][0]
        inbox.put(topic, payload, retained=True)
        assert (len(inbox), inbox.receipts.refused) == (0, Counter(retained=1))
        inbox.put(topic, payload)
        assert len(inbox) == 1


class TestMonitorRefusals:
    async def test_a_retained_replay_is_counted_under_its_own_reason_and_never_applied(self) -> None:
        """A retained node frame delivered to a monitor is counted as rejected (retained) and applies nothing."""
        monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536))
        for topic, payload in fleet_messages(1)[0]:
            hear(monitor, topic, payload, retained=True)
        snap = await monitor.analyse_once()
        ingest = snap.status.ingest
        assert (ingest.frames_applied, dict(ingest.rejected)) == (0, {"retained": TOPO.n_nodes + TOPO.n_sites})

    async def test_the_flooders_excess_is_counted_and_the_others_frames_applied(self) -> None:
        """After a tick of the fleet, 500 copies of node 3's next frame and that tick: every frame is applied once;
        the copies after the first are replays, charged to node 3's unconfirmed share (its 10 admitted and refused
        as stale_seq, the rest over_share_unconfirmed), and nothing else is rejected."""
        monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536))
        clock = [0.5]  # each tick in a share window of its own, wherever the clock stands
        monitor.inbox.monotonic_s = lambda: clock[0]
        first, second = fleet_messages(2)
        for topic, payload in first:
            hear(monitor, topic, payload)
        await monitor.analyse_once()
        clock[0] += BURST_TICKS
        n3 = next((t, p) for t, p in second if t.endswith("/n3"))
        for _ in range(500):
            hear(monitor, *n3)
        for topic, payload in second:
            hear(monitor, topic, payload)
        ingest = (await monitor.analyse_once()).status.ingest
        assert ingest.frames_applied == len(first) + len(second)
        assert {r: n for r, n in ingest.rejected.items() if n} == {
            "over_share_unconfirmed": 500 - 2 * BURST_TICKS, "stale_seq": 2 * BURST_TICKS}


@pytest.mark.parametrize("ticks", [1, 3])
def test_receipts_reach_the_ingest_counts(ticks: int) -> None:
    """The inbox's refusals are among the ingest counts' rejections, by reason."""
    monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536))
    for messages in fleet_messages(ticks):
        for topic, payload in messages:
            hear(monitor, topic, payload, retained=True)
    assert monitor.status().ingest.rejected == {"retained": ticks * (TOPO.n_nodes + TOPO.n_sites)}


class TestBacklogBound:
    def test_the_default_holds_four_ticks_of_the_fleets_frames(self) -> None:
        """At rainier the default is 4 ticks of binary frames (a node frame a node, 3,731 bytes with a 21-byte
        publisher id), and a shard's is its share of that; a small fleet gets the floor."""
        rainier = build_topology("rainier")
        tick = backlog_bytes_for(rainier, max_frame_bytes=1_024, ticks=1)
        assert 3_731 * rainier.n_nodes <= tick <= (3_731 + 11) * rainier.n_nodes  # ids up to 32 bytes, not 21
        assert backlog_bytes_for(rainier, max_frame_bytes=2**20) == 4 * tick
        shard = shard_view(rainier, parse_shard("0/3"))
        assert backlog_bytes_for(shard, max_frame_bytes=2**20) == pytest.approx(4 * tick / 3, rel=0.01)
        assert backlog_bytes_for(TOPO, max_frame_bytes=2**20) == 32 * 2**20
        assert backlog_bytes_for(TOPO, max_frame_bytes=16 * 2**20) == 64 * 2**20  # four of the largest frames

    def test_a_monitor_without_a_bound_given_takes_the_default(self) -> None:
        """Monitor(max_backlog_bytes=None) sizes its inbox from its topology."""
        monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536))
        assert monitor.inbox.max_backlog_bytes == backlog_bytes_for(TOPO, max_frame_bytes=65_536)


class TestSweep:
    def test_a_burst_of_topics_is_forgotten_once_idle(self) -> None:
        """After 5,000 one-off topics the table shrinks back to the topics still publishing once a whole window
        has passed without them."""
        table = shares(max_topics=10_000)
        for k in range(5_000):
            table.admit(f"burst/{k}", 100, now_s=0.0)
        for tick in range(1, 2 * BURST_TICKS + 1):  # into the window after the next
            table.admit("n0", 100, now_s=float(tick))
            table.sweep(float(tick))
        assert len(table) == 1


class TestScratch:
    def test_a_burst_grown_buffer_is_released_after_some_ordinary_windows(self) -> None:
        """A buffer grown to a burst's 10,000,000 values is replaced by an ordinary window's size after
        SHRINK_AFTER ordinary windows, while the same ordinary window every tick never reallocates."""
        scratch = Scratch()
        first = scratch.get("t_s", 100_000, np.float64)
        assert all(scratch.get("t_s", 100_000, np.float64).base is first.base for _ in range(50))
        scratch.get("t_s", 10_000_000, np.float64)  # the burst
        assert scratch.nbytes == 80_000_000
        for _ in range(Scratch.SHRINK_AFTER):
            scratch.get("t_s", 100_000, np.float64)
        assert scratch.nbytes == 800_000

    def test_a_buffer_a_hostile_window_grew_under_a_mebibyte_is_released_too(self) -> None:
        """A window of hostile frames grows a demo fleet's 1,000-value buffer to 64,000 values (512 KB, under
        1 MiB): after SHRINK_AFTER ordinary windows it is back to the ordinary size (kept for good before issue 35:
        a fuzz left 0.7 MiB of such buffers)."""
        scratch = Scratch()
        scratch.get("t_s", 1_000, np.float64)
        scratch.get("t_s", 64_000, np.float64)  # the hostile window
        for _ in range(Scratch.SHRINK_AFTER):
            scratch.get("t_s", 1_000, np.float64)
        assert scratch.nbytes == 8_000
