"""Specification of the monitor's receive-lag judgement (monitor/load.py on
core/streams.py's floors, stamped by monitor/inbox.py's receive clock):
publishers whose clocks are off, who sample out of phase and with jitter,
and a monitor whose own clock steps, are never overload; frames that queue
before the monitor, in every stream at once, are.

Windows are cut as the analysis loop cuts them (monitor/loop.py): a tick
after the last, or earlier (not before half a tick) once arrivals pause, so
a window holds a varying subset of the publishers.
"""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.core.streams import Streams
from rainierd.monitor.clock import ListeningClock, ReceiveClock
from rainierd.monitor.inbox import Inbox
from rainierd.monitor.overload import LoadJudge
from rainierd.monitor.rejections import RejectionLog

TICK_S = 0.25  # the tick of the publisher (issue 22): windows of a few publishers each
PUBLISHERS = 24  # one a node, as its 384-chip inventory had


class Fleet:
    """``PUBLISHERS`` node agents publishing for ``seconds`` to one monitor whose clocks the test drives."""

    def __init__(self, *, seed: int, skew_s: float, seconds: float = 300.0) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.skew_s = rng.uniform(-skew_s, skew_s, PUBLISHERS)
        phase = rng.uniform(0.0, TICK_S, PUBLISHERS)
        ticks = int(seconds / TICK_S)
        sampled = np.arange(ticks)[None, :] * TICK_S + phase[:, None] + rng.normal(0.0, 0.025, (PUBLISHERS, ticks))
        self.node = np.repeat(np.arange(PUBLISHERS), ticks)
        self.seq = (rng.integers(0, 2**31, PUBLISHERS)[:, None] + np.arange(ticks)[None, :]).ravel().astype(np.uint64)
        self.t_s = (sampled + self.skew_s[:, None]).ravel()  # what each agent's own clock says
        self.sent_s = sampled.ravel() + rng.exponential(0.002, sampled.size)  # transport: a few ms
        self.seconds = seconds

    def judge(self, *, queued: tuple[float, float, float] | None = None,
              monitor_step: tuple[float, float] | None = None) -> tuple[LoadJudge, list[float]]:
        """Run the monitor over the fleet; return its judge and when each overload episode began.

        ``queued`` (start, end, delay): frames sent in [start, end) reach the inbox ``delay`` later.
        ``monitor_step`` (at, by): the monitor host's wall clock steps by ``by`` seconds at ``at``.
        """
        now = [0.0]
        wall = [1.7e9]

        at_s, by_s = monitor_step if monitor_step is not None else (float("inf"), 0.0)

        def wall_s() -> float:
            return wall[0] + now[0] + (by_s if now[0] >= at_s else 0.0)

        inbox = Inbox(max_frame_bytes=1_024, max_backlog_bytes=2**24, listening_s=lambda: now[0],
                      rejections=RejectionLog(), monotonic_s=lambda: now[0],
                      receive_clock=ReceiveClock(wall=wall_s, monotonic=lambda: now[0]))
        judge = LoadJudge(tick_s=TICK_S, clock=ListeningClock(lambda: now[0]))
        streams = Streams(PUBLISHERS, tick_s=TICK_S)
        arrive = self.sent_s.copy()
        if queued is not None:
            start, end, delay = queued
            arrive[(self.sent_s >= start) & (self.sent_s < end)] += delay
        order = np.argsort(arrive, kind="stable")
        began: list[float] = []
        at, cut = 0, 0.0
        while cut < self.seconds:
            cut += float(self.rng.uniform(TICK_S / 2, TICK_S))
            frames = []
            while at < order.size and arrive[order[at]] < cut:
                now[0] = float(arrive[order[at]])
                inbox.put(f"n{order[at]}", b"{}")
                frames.append(int(order[at]))
                at += 1
            now[0] = cut
            received = np.array([m.rx_wall_s for m in inbox.take_window()])
            before = judge.episodes
            excess, entity = self._advance(streams, np.array(frames, np.int64), received, now[0])
            judge.judge(waited_s=0.0, elapsed_s=0.001, dropped_messages=0, receive_lag_s=np.zeros(0),
                        receive_excess_s=excess, receive_entity=entity,
                        streams_heard=int(np.unique(self.node[frames]).size))
            if judge.episodes > before:
                began.append(round(cut, 2))
        return judge, began

    def _advance(self, streams: Streams, frames: np.ndarray, received: np.ndarray,
                 listening_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Account for a window's frames, each node's in order (one generation at a time, as the ingest does)."""
        excess, entity = [np.zeros(0)], [np.zeros(0, np.int64)]
        node = self.node[frames]
        by_node = np.argsort(node, kind="stable")
        first = np.r_[True, node[by_node][1:] != node[by_node][:-1]]
        generation = np.empty(frames.size, np.int64)
        at = np.arange(frames.size)
        generation[by_node] = at - np.maximum.accumulate(np.where(first, at, 0))
        for g in range(int(generation.max(initial=-1)) + 1):
            pick = generation == g
            f = frames[pick]
            advance = streams.advance(self.node[f], self.node[f], self.seq[f], self.t_s[f],
                                      rx_s=np.full(f.size, listening_s), wall_s=received[pick])
            excess.append(advance.excess_lag_s[advance.keep])
            entity.append(self.node[f][advance.keep])
        return np.concatenate(excess), np.concatenate(entity)


class TestReceiveLag:
    @pytest.mark.parametrize("seed", [0, 1])
    def test_skewed_agents_out_of_phase_are_never_overload(self, seed: int) -> None:
        """Clocks off by up to 1.5 s either way, random phases, 25 ms jitter, windows of a varying subset of
        the publishers: no overload episode in five minutes."""
        judge, began = Fleet(seed=seed, skew_s=1.5).judge()
        assert began == []
        assert judge.episodes == 0

    @pytest.mark.parametrize("seed", [0, 1])
    def test_every_stream_queueing_is_overload(self, seed: int) -> None:
        """The same publishers, every frame sent in a 10 s stretch reaching the monitor 3 s late (a broker or
        socket queueing them): one episode, from the first late window, ended once they arrive on time."""
        judge, began = Fleet(seed=seed, skew_s=1.5).judge(queued=(100.0, 110.0, 3.0))
        assert len(began) == 1
        assert 103.0 <= began[0] <= 104.0
        assert not judge.overloaded

    def test_one_late_stream_is_not_overload(self) -> None:
        """One publisher's frames 3 s late for a minute (its own network, or a lie): not the monitor's load."""
        fleet = Fleet(seed=3, skew_s=1.5)
        late = (fleet.node == 5) & (fleet.sent_s >= 100.0) & (fleet.sent_s < 160.0)
        fleet.sent_s[late] += 3.0
        _, began = fleet.judge()
        assert began == []

    @pytest.mark.parametrize("by_s", [2.0, -2.0, 30.0])
    def test_a_step_of_the_monitors_own_clock_is_not_overload(self, by_s: float) -> None:
        """The monitor host's clock stepped (NTP, an operator) by seconds: every lag would move at once, but the
        receive clock is monotonic, so nothing is late."""
        _, began = Fleet(seed=4, skew_s=1.5).judge(monitor_step=(120.0, by_s))
        assert began == []


class TestReceiveClock:
    def test_receipts_follow_the_monotonic_clock_from_the_wall_clock_at_start(self) -> None:
        """Messages are stamped with the wall clock as it read at the inbox's start plus the monotonic seconds
        since: a later step of the wall clock never reaches them."""
        mono, wall = [10.0], [1.7e9]
        inbox = Inbox(max_frame_bytes=1_024, max_backlog_bytes=2**20, listening_s=lambda: 0.0,
                      rejections=RejectionLog(), receive_clock=ReceiveClock(wall=lambda: wall[0],
                                                                            monotonic=lambda: mono[0]))
        mono[0], wall[0] = 12.5, 1.7e9 + 2.5 + 7.0  # 2.5 s on, and the wall clock stepped 7 s ahead
        inbox.put("a", b"{}")
        assert [m.rx_wall_s for m in inbox.take_window()] == [1.7e9 + 2.5]
        assert inbox.receive_clock.now() == 1.7e9 + 2.5
