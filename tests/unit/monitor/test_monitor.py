"""Specification of the monitor's message handling: every payload is admitted
or rejected with a counted reason, and a bad one never disturbs the state."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter

import numpy as np
import pytest

from rainierd.core.config import MonitorConfig
from rainierd.core.detect import Event
from rainierd.fleet.topology import build_topology
from rainierd.monitor import ListeningClock, Monitor
from rainierd.runtime.probes import Verdict
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import FacilityFrame, NodeFrame, encode_binary, encode_json
from rainierd.wire.topics import Shard
from tests.helpers import hear


@pytest.fixture
def monitor() -> Monitor:
    return Monitor(build_topology("demo"), MonitorConfig(max_frame_bytes=65_536))


N0 = "rainier/v1/telemetry/s0/u0/n0"


def tick_messages(ticks: int, encode: object = encode_binary) -> list[list[tuple[str, bytes]]]:
    topo = build_topology("demo")
    # Sample times near now: frames dated far from the monitor's clock are rejected (clock_skew).
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=time.time() - ticks)
    return [
        [(t, encode(f)) for t, f in tick_frames(topo, model.step(k), publisher="sim")]  # type: ignore[operator]
        for k in range(ticks)
    ]


class TestOnMessage:
    async def test_good_frames_are_admitted_and_analysed(self, monitor: Monitor) -> None:
        """Two ticks of binary frames yield a snapshot with every chip fresh and effective FLOP/s."""
        for messages in tick_messages(2):
            for topic, payload in messages:
                hear(monitor, topic, payload)
        snap = await monitor.analyse_once()
        assert (snap.throughput.tick, snap.throughput.chips_fresh) == (1, 128)
        assert snap.throughput.fleet_effective > 0.5 * snap.throughput.fleet_peak
        assert sum(monitor.status().ingest.rejected.values()) == 0
        assert (monitor.status().ingest.messages["binary"], monitor.status().ingest.frames["binary"]) == (18, 18)

    async def test_json_frames_are_admitted_too(self, monitor: Monitor) -> None:
        """The JSON form feeds the same state as the binary form."""
        for messages in tick_messages(2, encode_json):
            for topic, payload in messages:
                hear(monitor, topic, payload)
        snap = await monitor.analyse_once()
        assert snap.throughput.chips_fresh == 128
        assert monitor.status().ingest.frames["json"] == 18

    @pytest.mark.parametrize(
        ("topic", "payload", "reason"),
        [
            (N0, b"", "empty"),
            (N0, b"RNRW\x01", "truncated"),
            (N0, b"\x00" * 100, "unknown_encoding"),
            (N0, b"{]", "bad_json"),
            (N0, json.dumps({"v": 9}).encode(), "bad_version"),
            (N0, b"R" * 70_000, "oversize"),
            ("not/telemetry", b"{}", "bad_topic"),
            ("rainier/v1/events/chip/3", b"{}", "bad_topic"),
            (N0, encode_json(NodeFrame("agent", 1, 1, 1.0, 0)), "clock_skew"),  # dated 1970
        ],
    )
    async def test_bad_payloads_are_counted_by_reason(
        self, monitor: Monitor, topic: str, payload: bytes, reason: str,
    ) -> None:
        """Each malformed payload is rejected under its own reason, without raising."""
        hear(monitor, topic, payload)
        await monitor.analyse_once()
        assert dict(monitor.status().ingest.rejected) == {reason: 1}

    async def test_bad_frames_leave_good_state_alone(self, monitor: Monitor) -> None:
        """Interleaving garbage and misaddressed frames with a good tick changes nothing of it."""
        good = tick_messages(2)
        for topic, payload in good[0]:
            hear(monitor, topic, payload)
        await monitor.analyse_once()
        before = {name: values.copy() for name, values in monitor.core.state.chips.gauges.items()}
        node0_topic, node0_payload = good[1][0]
        hear(monitor, "rainier/v1/telemetry/s0/u1/n3", node0_payload)  # node 0's frame on node 7's topic
        hear(monitor, node0_topic, node0_payload[:-1])
        hear(monitor, node0_topic, b"RNRW" + b"\xff" * 60)
        await monitor.analyse_once()
        after = monitor.core.state.chips.gauges
        assert all(np.array_equal(before[name], after[name], equal_nan=True) for name in before)
        assert monitor.status().ingest.rejected["topic_mismatch"] == 1
        assert sum(monitor.status().ingest.rejected.values()) == 3


    async def test_nan_in_a_binary_frame_is_rejected_at_admission(self, monitor: Monitor) -> None:
        """A binary frame with NaN (checked per batch, not per frame) is rejected whole as non_finite."""
        topo = build_topology("demo")
        now = time.time()
        model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=now)
        frames = list(tick_frames(topo, model.step(0), publisher="sim"))
        topic, frame = frames[0]
        chips = frame.chips.copy()  # type: ignore[union-attr]
        chips["power_w"][2] = np.inf
        bad = NodeFrame(frame.publisher, 0, 0, now, 0, chips, frame.links, frame.efa, frame.cooling)  # type: ignore[union-attr]
        site_topic, site_frame = frames[-1]
        facility = site_frame.facility.copy()  # type: ignore[union-attr]
        facility["outside_c"] = np.nan
        bad_site = FacilityFrame("sim", 0, 0, now, 0, facility)
        hear(monitor, topic, encode_binary(bad))
        hear(monitor, site_topic, encode_binary(bad_site))
        for good_topic, good in frames[1:-1]:
            hear(monitor, good_topic, encode_binary(good))
        await monitor.analyse_once()
        assert dict(monitor.status().ingest.rejected) == {"non_finite": 2}
        assert (monitor.core.state.chips.samples[:16] == 0).all()
        assert (monitor.core.state.chips.samples[16:] == 1).all()
        assert monitor.core.state.facility.samples[0] == 0


class TestEvents:
    async def test_a_burst_of_events_is_announced_in_batches_between_which_the_loop_runs(
        self, monitor: Monitor, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """1,000 events (a site falling silent) go out 128 at a time, and other tasks run between batches."""
        analyse = monitor.core.analyse
        event = Event(1, "node", 0, "healthy", "lost", ("silent",), 1)
        monkeypatch.setattr(monitor.core, "analyse",
                            lambda *a, **kw: dataclasses.replace(analyse(*a, **kw), events=[event] * 1_000))
        turns = 0

        async def take_turns() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        seen: list[int] = []
        monkeypatch.setattr(monitor.events, "announce", lambda _event: seen.append(turns))
        other = asyncio.create_task(take_turns())
        await monitor.analyse_once()
        other.cancel()
        assert list(Counter(seen).values()) == [128] * 7 + [104]


class TestProbes:
    async def test_ready_needs_mqtt_and_a_tick(self, monitor: Monitor) -> None:
        """/readyz says not ready until connected and a tick has been analysed."""
        assert monitor.ready().reason == "mqtt not connected"
        monitor.connection.connected = True
        assert monitor.ready().reason == "no telemetry analysed yet"
        for topic, payload in tick_messages(1)[0]:
            hear(monitor, topic, payload)
        await monitor.analyse_once()
        assert monitor.ready().ok


    async def test_a_lost_feed_is_not_ready_and_one_event_under_the_shards_id(self) -> None:
        """Connected, yet every node of shard 1/2 silent together: /readyz 503 naming the feed, and one `feed`
        event under id 1 (the shard's), no `node lost`; its nodes heard again: ready, and the feed healthy."""
        tick_s = 0.25  # twelve ticks' sample times within the admission's lead slack of the wall clock
        t = FakeTime()
        clock = ListeningClock(t, max_step_s=1.0)
        monitor = Monitor(build_topology("demo"), MonitorConfig(tick_s=tick_s, max_frame_bytes=65_536), clock=clock,
                          shard=Shard(1, 2))
        monitor.connection.connected = True
        clock.hear("disconnected")
        announced: list[Event] = []
        real = monitor.events.announce
        monitor.events.announce = lambda event: (announced.append(event), real(event))[1]  # type: ignore[method-assign]
        topo = build_topology("demo")
        model = FleetModel(topo, np.random.default_rng(0), tick_s=tick_s, start_s=time.time() - 12 * tick_s)
        for k in range(16):
            frames = tick_frames(topo, model.step(k), publisher="sim")
            for topic, frame in frames if k < 4 or k >= 10 else []:
                hear(monitor, topic, encode_binary(frame))
            await monitor.analyse_once()
            if k == 8:
                assert monitor.ready() == Verdict(False, "feed lost: 4 of 4 nodes silent together")
            t.t += tick_s
        assert [(e.entity, e.id, e.after) for e in announced] == [("feed", 1, "lost"), ("feed", 1, "healthy")]
        assert monitor.ready().ok


class FakeTime:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class TestListeningClock:
    def test_runs_only_while_connected_and_keeping_up(self) -> None:
        """The clock stands still while deaf for any reason and runs again once every reason is lifted."""
        t = FakeTime()
        clock = ListeningClock(t)
        t.t += 0.3
        assert clock.now() == 0.0  # not yet connected
        clock.hear("disconnected")
        t.t += 0.3
        assert clock.now() == pytest.approx(0.3)
        clock.deafen("overloaded")
        clock.deafen("disconnected")
        t.t += 0.4
        clock.hear("disconnected")
        t.t += 0.4
        assert clock.now() == pytest.approx(0.3)
        clock.hear("overloaded")
        t.t += 0.2
        assert clock.now() == pytest.approx(0.5)

    def test_a_stalled_process_gains_one_step_not_the_stall(self) -> None:
        """A process stopped for a minute (SIGSTOP, no CPU) finds its clock moved by max_step_s only."""
        t = FakeTime()
        clock = ListeningClock(t, max_step_s=0.5)
        clock.hear("disconnected")
        for _ in range(10):
            t.t += 0.1
            clock.observe()
        t.t += 60.0
        assert clock.now() == pytest.approx(1.0 + 0.5)


class TestBacklog:
    def test_a_full_inbox_drops_its_oldest_and_counts_them(self) -> None:
        """Past max_backlog_bytes the oldest messages go, counted in messages and bytes."""
        monitor = Monitor(build_topology("demo"), MonitorConfig(max_frame_bytes=65_536),
                          max_backlog_bytes=100_000)
        ticks = tick_messages(6)
        sizes = [len(p) for messages in ticks for _t, p in messages]
        for messages in ticks:
            for topic, payload in messages:
                hear(monitor, topic, payload)
        backlog = monitor.status().backlog
        assert backlog is not None
        assert backlog.bytes <= 100_000 < backlog.bytes + sizes[0]
        assert backlog.dropped_messages + backlog.messages == len(sizes)
        assert backlog.dropped_bytes + backlog.bytes == sum(sizes)

    async def test_a_window_takes_at_most_half_the_backlog_bound(self) -> None:
        """A full inbox is analysed in windows of at most max_backlog_bytes / 2, oldest first, nothing skipped."""
        monitor = Monitor(build_topology("demo"), MonitorConfig(max_frame_bytes=65_536),
                          max_backlog_bytes=100_000)
        for messages in tick_messages(3):
            for topic, payload in messages:
                hear(monitor, topic, payload)
        queued = len(monitor.inbox)
        first = monitor.inbox.take_window()
        assert sum(len(m.payload) for m in first[:-1]) < 50_000 <= sum(len(m.payload) for m in first)
        rest = monitor.inbox.take_window()
        assert len(first) + len(rest) == queued
        assert (len(monitor.inbox), monitor.inbox.bytes) == (0, 0)

    async def test_a_monitor_that_falls_behind_says_so_and_judges_no_silence(self) -> None:
        """Six ticks arriving at once after a stall: drops counted, overload raised, no node or chip lost."""
        t = FakeTime()
        monitor = Monitor(build_topology("demo"), MonitorConfig(max_frame_bytes=65_536),
                          max_backlog_bytes=100_000, clock=ListeningClock(t))
        monitor.clock.hear("disconnected")
        ticks = tick_messages(12)
        for messages in ticks[:2]:
            t.t += 1.0
            for topic, payload in messages:
                hear(monitor, topic, payload)
            await monitor.analyse_once()
        t.t += 6.0  # stalled: six ticks of telemetry wait in the broker
        for messages in ticks[2:8]:
            for topic, payload in messages:
                hear(monitor, topic, payload)
        snap = await monitor.analyse_once()
        assert monitor.load.overloaded
        assert monitor.inbox.dropped_messages > 0
        assert not monitor.ready().ok
        for messages in ticks[8:]:
            t.t += 1.0
            for topic, payload in messages:
                hear(monitor, topic, payload)
            snap = await monitor.analyse_once()
        assert not monitor.load.overloaded
        assert sum(monitor.events.counts.values()) == 0
        assert snap.throughput.chips_fresh == 128
        ingest = monitor.status().ingest
        assert ingest.frames_lost + ingest.frames_missing > 0  # dropped messages show as gaps
