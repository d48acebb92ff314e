"""Specification of what the monitor admits before any decoding (issue 35,
"Genuine frames first"), and of its judgement of silence while it is
behind ("Overload never blinds"): a broken header is refused at once, by
the decoding's own reason, charged to nobody; the next frame of a topic's
confirmed stream is charged to that topic's confirmed share, anything else
to its unconfirmed share; so garbage, forgeries, replays and floods cost
their sender alone, a legitimate change of publisher still goes through,
and a node that falls silent while the monitor is behind is still found."""

from __future__ import annotations

import dataclasses
import json
import random
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.admission import BURST_TICKS, Admission, Confirmed, SharePolicy
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.ingest import Message
from rainierd.errors import FrameError
from rainierd.fleet.topology import build_topology
from rainierd.monitor import ListeningClock, Monitor
from rainierd.monitor.admission import confirmed_of
from rainierd.monitor.clock import ReceiveClock
from rainierd.monitor.inbox import Inbox
from rainierd.monitor.overload import LoadJudge
from rainierd.monitor.rejections import RejectionLog
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches, tick_frames
from rainierd.wire import NodeFrame, decode_frame, encode_binary, encode_json
from rainierd.wire.peek import peek
from rainierd.wire.records import NodeBatch
from tests.helpers import hear
from tests.unit.core.ingest.test_hostile_input import CORPUS, mutate

TOPO = build_topology("demo")
TICK_S = 1.0


def fleet(ticks: int, *, start_s: float, publisher: str = "sim") -> list[list[tuple[str, NodeFrame]]]:
    """Return ``ticks`` ticks of the demo fleet's node frames, sampled a tick apart from ``start_s``."""
    model = FleetModel(TOPO, np.random.default_rng(0), tick_s=TICK_S, start_s=start_s)
    return [[(t, f) for t, f in tick_frames(TOPO, model.step(k), publisher=publisher, sites=range(0))
             if isinstance(f, NodeFrame)] for k in range(ticks)]


def hostile(captured: NodeFrame, rng: random.Random, *, forged: bool = True) -> list[bytes]:
    """Return what a fuzzer sends on a node's topic, made from a frame of the node it captured (one the monitor
    has had): broken headers, the frame replayed, mangled, under another id (``forged``), an hour ahead."""
    real = encode_binary(captured)
    out = [
        bytes([rng.choice(b"abcXYZ\x00")]) + rng.randbytes(64),  # no encoding
        b"RNRW\x07" + rng.randbytes(60),  # a version nobody speaks
        b"RXYZ" + rng.randbytes(200),  # bad magic
        real[:rng.randrange(50, len(real) - 1)],  # truncated
        real + b"\x00" * 8,  # trailing bytes
        b"",
        real,  # a replay
        encode_json(captured)[:rng.randrange(20, 300)],  # truncated JSON in the node's name
        encode_binary(dataclasses.replace(captured, seq=captured.seq + 1, t_s=captured.t_s + 3_600)),  # an hour on
    ]
    if forged:
        out.append(encode_binary(dataclasses.replace(captured, publisher=f"forged-{rng.randrange(10**6)}")))
    return out


class Admitted:
    """An admission with a core behind it, on clocks the test moves: ``put`` a message, ``analyse`` a window."""

    def __init__(self, policy: SharePolicy | None = None, *, max_backlog_bytes: int = 2**26) -> None:
        self.now = [0.0]
        self.start_s = time.time() - 30
        self.core = MonitorCore(TOPO, MonitorConfig(max_frame_bytes=65_536, tick_s=TICK_S))
        self.admission = Admission(policy or SharePolicy(), tick_s=TICK_S)
        self.inbox = Inbox(max_frame_bytes=65_536, max_backlog_bytes=max_backlog_bytes, listening_s=lambda: self.now[0],
                           rejections=RejectionLog(), admission=self.admission, monotonic_s=lambda: self.now[0],
                           receive_clock=ReceiveClock(wall=lambda: self.start_s, monotonic=lambda: self.now[0]))
        self.confirmed: Confirmed | None = None

    def analyse(self) -> dict[str, int]:
        """Analyse what waits, hand the streams back to the admission; return what was applied and refused."""
        window = self.inbox.take_window()
        analysis = self.core.analyse(window, now_s=self.now[0])
        self.core.ingest.record(analysis.flush)
        self.confirmed = confirmed_of(self.core.ingest, self.confirmed)
        self.admission.learn(self.confirmed)
        return {"applied": analysis.flush.applied, **analysis.flush.rejected}


class TestPeek:
    @given(st.data())
    @settings(max_examples=400, deadline=None)
    def test_what_the_header_refuses_the_decoding_refuses_for_the_same_reason(self, data: st.DataObject) -> None:
        """For real frames bit-flipped, truncated, padded or given absurd integers, and for random bytes: a payload
        ``peek`` refuses, ``decode_frame`` refuses for the same reason, and one it decodes ``peek`` reads."""
        if data.draw(st.booleans()):
            payload = data.draw(st.binary(max_size=512))
        else:
            payload = mutate(CORPUS[data.draw(st.integers(0, len(CORPUS) - 1))][1], data)
        try:
            decode_frame(payload, max_bytes=1 << 20)
        except FrameError as exc:
            decoded: str | None = exc.reason
        else:
            decoded = None
        try:
            peek(payload)
        except FrameError as exc:
            peeked: str | None = exc.reason
        else:
            peeked = None
        if peeked is not None:
            assert peeked == decoded
        else:  # what a JSON frame's decoding refuses (its version, say) a peek does not read
            assert payload[:1] == b"{" or decoded not in {"empty", "unknown_encoding", "truncated", "bad_magic",
                                                          "bad_version", "bad_kind"}

    def test_a_json_frame_says_its_publisher_node_and_sample_time_in_its_first_bytes(self) -> None:
        """rainierd's JSON encoding is read for kind, node, publisher and t_s; an escaped publisher, or one written
        past the first 512 bytes, reads as unknown."""
        _, frame = fleet(1, start_s=1.8e9)[0][2]
        said = peek(encode_json(frame))
        assert (said.encoding, said.kind, said.entity, said.publishers, said.t_s) == (
            "json", "node", 2, ("sim",), frame.t_s)
        doc = json.loads(encode_json(frame))
        escaped = json.dumps({**doc, "publisher": "s\\u0069m"}).replace("\\\\", "\\").encode()
        assert peek(escaped).publishers == ()
        late = {key: doc[key] for key in doc if key != "publisher"} | {"publisher": "sim"}
        assert peek(json.dumps(late).encode()).publishers == ()


class TestAdmission:
    def test_garbage_is_refused_by_its_reason_and_costs_the_node_nothing(self) -> None:
        """After a tick is applied, 2,000 hostile payloads made from it on node 3's topic ahead of its next frame:
        the broken ones refused at once by their reason, the rest charged to node 3's unconfirmed share; its frame
        and every other node's are applied, nothing lost."""
        a = Admitted()
        first, second = fleet(2, start_s=a.start_s)
        for topic, frame in first:
            a.inbox.put(topic, encode_binary(frame))
        assert a.analyse()["applied"] == TOPO.n_nodes
        a.now[0] = float(BURST_TICKS)  # the next share window
        topic3, captured = first[3]
        rng = random.Random(3)
        for _ in range(200):
            for payload in hostile(captured, rng):
                a.inbox.put(topic3, payload)
        for topic, frame in second:
            a.inbox.put(topic, encode_binary(frame))
        refused = a.inbox.receipts.refused
        assert refused["empty"] == refused["bad_magic"] == refused["bad_version"] == refused["truncated"] == 200
        assert refused["over_share"] == 0
        assert refused["over_share_unconfirmed"] == 4 * 200 - 2 * BURST_TICKS
        assert a.analyse()["applied"] == TOPO.n_nodes
        assert (a.core.stats.frames_lost, a.core.stats.frames_missing) == (0, 0)

    def test_replays_and_frames_far_ahead_go_to_the_unconfirmed_share(self) -> None:
        """The node's own frame twice, or under its own id an hour ahead: unconfirmed, and the mark the next frame
        must pass is not moved, so the node's next frame is still confirmed."""
        a = Admitted()
        ticks = fleet(3, start_s=a.start_s)
        for topic, frame in ticks[0]:
            a.inbox.put(topic, encode_binary(frame))
        a.analyse()
        topic, frame = ticks[1][0]
        assert a.admission.admit(topic, encode_binary(frame), now_s=1.0, rx_wall_s=frame.t_s) == "confirmed"
        assert a.admission.admit(topic, encode_binary(frame), now_s=1.0, rx_wall_s=frame.t_s) == "unconfirmed"
        ahead = dataclasses.replace(ticks[2][0][1], t_s=frame.t_s + 3_600)
        assert a.admission.admit(topic, encode_binary(ahead), now_s=1.0, rx_wall_s=frame.t_s) == "unconfirmed"
        _, after = ticks[2][0]
        assert a.admission.admit(topic, encode_binary(after), now_s=2.0, rx_wall_s=after.t_s) == "confirmed"

    def test_batches_and_json_of_live_streams_are_confirmed(self) -> None:
        """A batch whose entries are live streams', and a JSON frame of the node's publisher, are confirmed; a
        batch carrying an unknown publisher, and a JSON frame without a readable publisher, are not."""
        a = Admitted()
        model = FleetModel(TOPO, np.random.default_rng(0), tick_s=TICK_S, start_s=a.start_s)
        for topic, frame in tick_frames(TOPO, model.step(0), publisher="sim"):
            a.inbox.put(topic, encode_binary(frame))
        a.analyse()
        sample = model.step(1)
        topic, batch = next(tick_batches(TOPO, sample, publisher="sim", nodes_per_batch=TOPO.n_nodes))
        assert isinstance(batch, NodeBatch)
        wall = float(batch.t_s)
        assert a.admission.admit(topic, encode_binary(batch), now_s=1.0, rx_wall_s=wall) == "confirmed"
        later = dataclasses.replace(batch, t_s=batch.t_s + 0.1, publisher="stranger")
        assert a.admission.admit(topic, encode_binary(later), now_s=1.0, rx_wall_s=wall) == "unconfirmed"
        frames = [(t, f) for t, f in tick_frames(TOPO, model.step(2), publisher="sim") if isinstance(f, NodeFrame)]
        topic, frame = frames[1]
        assert a.admission.admit(topic, encode_json(frame), now_s=2.0, rx_wall_s=frame.t_s) == "confirmed"
        doc = json.loads(encode_json(frames[2][1]))
        moved = json.dumps({**{k: v for k, v in doc.items() if k != "publisher"}, "publisher": "sim"}).encode()
        assert a.admission.admit(frames[2][0], moved, now_s=2.0, rx_wall_s=frame.t_s) == "unconfirmed"

    def test_a_new_publisher_is_confirmed_through_the_unconfirmed_share_under_a_garbage_flood(self) -> None:
        """Node 2's agent restarts under a new id while garbage (broken frames, replays of its old frames) floods its
        topic: the new id's frames get through the unconfirmed share, the core takes them (one publisher
        change), and from then on they are the topic's confirmed frames."""
        a = Admitted()
        ticks = fleet(12, start_s=a.start_s)
        renamed = fleet(12, start_s=a.start_s, publisher="sim-restarted")
        rng = random.Random(2)
        fates: list[str] = []
        watched = {encode_binary(frame) for frames in renamed for _, frame in frames[2:3]}
        admit = a.admission.admit

        def recorded(topic: str, payload: bytes, **clocks: float) -> str:
            fate = admit(topic, payload, **clocks)
            if payload in watched:
                fates.append(fate)
            return fate

        a.admission.admit = recorded  # type: ignore[method-assign,assignment]
        for k in range(12):
            a.now[0] = float(k)
            for topic, frame in ticks[k]:
                if frame.node == 2 and k >= 4:
                    for payload in hostile(ticks[3][2][1], rng, forged=False) * 20:
                        a.inbox.put(topic, payload)
                    a.inbox.put(topic, encode_binary(renamed[k][2][1]))
                    continue
                a.inbox.put(topic, encode_binary(frame))
            a.analyse()
        assert a.core.stats.publisher_changes == 1
        # Its first two frames while the old id is silent less than 2 ticks; the second takes the node over
        # (core/streams.py), and every frame after it is the topic's confirmed publisher's.
        assert fates == ["unconfirmed"] * 2 + ["confirmed"] * 6
        assert a.confirmed is not None
        assert a.confirmed.nodes.publisher[2] == "sim-restarted"

    def test_a_full_backlog_drops_the_unconfirmed_frames_first(self) -> None:
        """Past max_backlog_bytes the unconfirmed queue's oldest go first: the confirmed frames all stay, and the
        window keeps the order they arrived in."""
        a = Admitted(SharePolicy(frames_per_tick=1_000.0), max_backlog_bytes=100_000)
        ticks = fleet(2, start_s=a.start_s)
        for topic, frame in ticks[0]:
            a.inbox.put(topic, encode_binary(frame))
        a.analyse()
        for topic, frame in ticks[1]:
            a.inbox.put(topic, encode_binary(frame))
            for k in range(10):
                forged = dataclasses.replace(frame, publisher=f"forged-{k}")
                a.inbox.put(topic, encode_binary(forged))
        assert a.inbox.dropped_messages > 0
        window = a.inbox.take_window() + a.inbox.take_window()  # each at most half the bound
        confirmed = [m for m in window if decode_frame(m.payload, max_bytes=1 << 20)[0].publisher == "sim"]
        assert [m.topic for m in confirmed] == [t for t, _ in ticks[1]]
        assert window[-1] != confirmed[-1]  # the forged frames that stayed came after the last genuine one


class TestMonitor:
    async def test_garbage_ahead_of_every_frame_costs_no_node_a_frame(self) -> None:
        """Twelve ticks, each with 300 hostile payloads on every node's topic (made from its last frame) ahead of the
        node's own frame: every genuine frame is applied, none lost, no node judged silent, every chip fresh."""
        clock = [100.0]
        monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536, tick_s=TICK_S),
                          clock=ListeningClock(lambda: clock[0]))
        monitor.inbox.monotonic_s = lambda: clock[0]
        monitor.clock.hear("disconnected")
        ticks = fleet(12, start_s=time.time() - 12)
        rng = random.Random(0)
        for k, frames in enumerate(ticks):
            clock[0] += TICK_S
            for (topic, frame), (_, captured) in zip(frames, ticks[k - 1], strict=True):
                if k >= 2:
                    for payload in hostile(captured, rng) * 30:
                        hear(monitor, topic, payload)
                hear(monitor, topic, encode_binary(frame))
            snap = await monitor.analyse_once()
        ingest = monitor.status().ingest
        assert ingest.frames_applied == 12 * TOPO.n_nodes
        assert (ingest.frames_lost, ingest.frames_missing) == (0, 0)
        assert sum(monitor.events.counts.values()) == 0
        assert snap.throughput.chips_fresh == TOPO.n_chips

    async def test_a_node_silent_while_the_monitor_is_behind_is_still_judged_lost(self) -> None:
        """Every frame reaches the monitor 3 s late (a broker queueing them: overloaded for receive lag) and node 5
        stops publishing: node 5 is judged lost within its stale interval and a few ticks of the fleet's data,
        no other node is, and the monitor catches up once frames arrive on time."""
        mono = [0.0]
        start_s = time.time() - 60
        monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536, tick_s=TICK_S),
                          clock=ListeningClock(lambda: mono[0], max_step_s=10.0))
        monitor.inbox.monotonic_s = lambda: mono[0]
        monitor.inbox.receive_clock = ReceiveClock(wall=lambda: start_s, monotonic=lambda: mono[0])
        monitor.clock.hear("disconnected")
        ticks = fleet(40, start_s=start_s)
        lost_at = None
        overloaded = []
        for k, frames in enumerate(ticks):
            late_s = 3.0 if 10 <= k < 30 else 0.1
            mono[0] = k * TICK_S + late_s
            for topic, frame in frames:
                if not (frame.node == 5 and 14 <= k < 30):
                    hear(monitor, topic, encode_binary(frame))
            await monitor.analyse_once()
            overloaded.append(monitor.load.overloaded)
            if lost_at is None and monitor.events.counts.get(("node", "lost")):
                lost_at = k
        assert sum(overloaded[10:30]) >= 15  # behind for most of the late stretch
        assert lost_at is not None, "node 5 fell silent while the monitor was behind and was never judged lost"
        assert lost_at - 13 <= 3 + 3  # its stale interval (3 ticks) and a few ticks of slack
        assert monitor.events.counts.get(("node", "lost")) == 1
        assert not monitor.load.overloaded


def test_a_paced_clock_moves_only_by_credit_and_never_faster_than_time() -> None:
    """Paced, the listening clock stands until credited; a credit moves it at most as far as it would have run
    since it was paced; deaf, nothing moves it; unpaced, it follows the monotonic clock again."""
    t = [0.0]
    clock = ListeningClock(lambda: t[0], max_step_s=10.0)
    clock.hear("disconnected")
    t[0] = 1.0
    assert clock.now() == 1.0
    clock.pace("overloaded")
    t[0] = 3.0
    assert clock.now() == 1.0
    assert clock.credit(0.5) == 0.5
    assert clock.credit(5.0) == 1.5  # 2 s would have passed: 0.5 + 1.5
    assert clock.now() == 3.0
    clock.deafen("disconnected")
    t[0] = 4.0
    assert clock.credit(1.0) == 0.0
    clock.hear("disconnected")
    clock.unpace("overloaded")
    t[0] = 5.0
    assert clock.now() == 4.0


@pytest.mark.parametrize("payload", [b"", b"x", b"RNRW", b"{"])
def test_a_message_too_short_to_say_anything_is_refused_or_unconfirmed(payload: bytes) -> None:
    """Nothing too short to read is ever charged to a confirmed share."""
    a = Admitted()
    try:
        fate = a.admission.admit("rainier/v1/telemetry/s0/b0/u0/n0", payload, now_s=0.0, rx_wall_s=0.0)
    except FrameError:
        return
    assert fate == "unconfirmed"


def test_messages_put_are_stamped_as_before() -> None:
    """The inbox stamps what it admits with the listening and receive clocks and its shed count, as before."""
    a = Admitted()
    topic, frame = fleet(1, start_s=a.start_s)[0][0]
    a.now[0] = 2.0
    a.inbox.put(topic, encode_binary(frame))
    assert a.inbox.take_window() == [Message(2.0, topic, encode_binary(frame), a.start_s + 2.0, 0)]


def test_while_behind_the_clock_follows_what_is_heard_but_never_a_window_that_dropped() -> None:
    """Overloaded, the listening clock moves by the fleet's sample clock from one window to the next (a running
    maximum); a window whose inbox overflowed moves the mark without crediting the jump."""
    t = [0.0]
    clock = ListeningClock(lambda: t[0], max_step_s=10.0)
    clock.hear("disconnected")
    judge = LoadJudge(tick_s=TICK_S, clock=clock)
    none, nodes = np.zeros(0), np.zeros(0, np.int64)

    def window(*, dropped: int, heard_t_s: float) -> float:
        t[0] += 1.0
        judge.judge(waited_s=0.0, elapsed_s=0.0, dropped_messages=dropped, receive_lag_s=none,
                    receive_excess_s=none, receive_entity=nodes, streams_heard=8, heard_t_s=heard_t_s)
        return clock.now()

    assert window(dropped=1, heard_t_s=100.0) == 1.0  # behind from here: the clock ran until now
    assert judge.overloaded
    assert window(dropped=1, heard_t_s=100.5) == 1.5  # half a second of the fleet's samples heard
    assert window(dropped=1, heard_t_s=100.2) == 1.5  # older frames: no step back, no step on
    assert window(dropped=2, heard_t_s=104.0) == 1.5  # dropped from a full inbox: the jump is not credited
    assert window(dropped=2, heard_t_s=105.0) == 2.5


async def test_a_backlog_in_the_inbox_ages_no_node_while_the_monitor_is_behind() -> None:
    """The analysis runs one tick in four (starved of CPU) and takes at most half the backlog bound a window, so
    frames wait in the inbox for windows on end while the fleet publishes every tick: the monitor is behind, and
    no health event is raised, no node lost nor the feed (a frame waiting keeps its arrival stamp while the clock
    moves on, so only a window that took everything may move it: benchmarks ingest raised 1,300 false events
    before)."""
    mono = [0.0]
    start_s = time.time() - 60
    tick_bytes = sum(len(encode_binary(f)) for _, f in fleet(1, start_s=start_s)[0])
    monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536, tick_s=TICK_S),
                      clock=ListeningClock(lambda: mono[0], max_step_s=10.0), max_backlog_bytes=7 * tick_bytes)
    monitor.inbox.monotonic_s = lambda: mono[0]
    monitor.inbox.receive_clock = ReceiveClock(wall=lambda: start_s, monotonic=lambda: mono[0])
    monitor.clock.hear("disconnected")
    ticks = fleet(48, start_s=start_s)
    behind = 0
    for k, frames in enumerate(ticks):
        mono[0] = k * TICK_S + 0.05
        for topic, frame in frames:
            hear(monitor, topic, encode_binary(frame))
        if k < 8 or k % 4 == 0:
            await monitor.analyse_once()
            behind += monitor.load.overloaded
    assert behind >= 5
    assert sum(monitor.events.counts.values()) == 0, dict(monitor.events.counts)
