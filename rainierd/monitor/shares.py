"""Per-publisher fairness before any decoding: each telemetry topic (a node's
topic, a batch topic, a site's facility topic) gets a share of frames and of
payload bytes per tick, and what it sends beyond its share is dropped here,
counted under ``over_share``, so one publisher flooding its own topic costs
every other publisher nothing: not a place in the backlog, not a
microsecond of decoding.

A share is a token bucket per topic, O(1) a message (one dict look-up and a
few float operations): it refills at ``frames_per_tick`` frames and
``bytes_per_tick`` bytes a tick and holds at most one tick's worth plus the
burst a genuine publisher may send (a simulator's outbox replayed after a
broker outage is a few ticks of frames at once).  A genuine stream publishes
one frame a tick on its topic (docs/wire-format.md), so it never meets its
share.

The table of buckets is bounded (``max_topics``): a bucket idle for a whole
burst time is full again, the same as a new one, so it is forgotten when the
table is full; a topic that finds the table full of busy ones is dropped as
``too_many_topics`` (more distinct topics than any fleet the monitor was
sized for publish at once: an intruder's, not a fleet's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import structlog

from rainierd.monitor.rejections import worth_logging

__all__ = ["BURST_TICKS", "SharePolicy", "Shares", "Verdict"]

log = structlog.get_logger("rainierd.monitor")

Verdict = Literal["ok", "over_share", "too_many_topics"]

_FRAMES, _BYTES, _LAST_S, _DROPPED = 0, 1, 2, 3
BURST_TICKS: Final = 5.0
"""A share holds this many ticks' worth: a simulator replays its outbox of 4 ticks after a broker outage,
then sends the live tick."""


@dataclass(frozen=True, slots=True)
class SharePolicy:
    """What one telemetry topic may send (the ``share_*`` settings)."""

    frames_per_tick: float = 4.0
    bytes_per_tick: int = 4 * 2**20
    max_topics: int = 131_072

    def shares(self, *, tick_s: float) -> Shares:
        """Return a table of shares under this policy for ticks of ``tick_s``."""
        return Shares(frames_per_tick=self.frames_per_tick, bytes_per_tick=self.bytes_per_tick,
                      burst_ticks=BURST_TICKS, tick_s=tick_s, max_topics=self.max_topics)
_TOPIC_CHARS: Final = 200  # a topic is the sender's words: logged truncated


class Shares:
    """The token buckets of every topic heard recently, and what each has had dropped."""

    def __init__(
        self, *, frames_per_tick: float, bytes_per_tick: float, burst_ticks: float, tick_s: float, max_topics: int,
    ) -> None:
        self.frames_per_tick, self.bytes_per_tick = frames_per_tick, bytes_per_tick
        self.frames_per_s = frames_per_tick / tick_s
        self.bytes_per_s = bytes_per_tick / tick_s
        self.max_frames = frames_per_tick * burst_ticks
        self.max_bytes = bytes_per_tick * burst_ticks
        self.refill_s = burst_ticks * tick_s  # idle this long, a bucket is full again
        self.max_topics = max_topics
        # topic -> [frame tokens, byte tokens, last refill (monotonic s), dropped this episode (0: none)]
        self._buckets: dict[str, list[float]] = {}
        self._last_prune_s = float("-inf")
        self.episodes = 0  # topics that went over their share, one per episode
        self.table_full = 0  # messages dropped because the table held only busy topics

    def __len__(self) -> int:
        return len(self._buckets)

    def admit(self, topic: str, size: int, now_s: float) -> Verdict:
        """Take one message of ``size`` bytes on ``topic`` from its share; return what became of it."""
        bucket = self._buckets.get(topic)
        if bucket is None:
            if len(self._buckets) >= self.max_topics and not self._prune(now_s):
                self.table_full += 1
                if worth_logging(self.table_full - 1, self.table_full):
                    log.warning("too many telemetry topics at once; dropping the new ones", topic=topic[:_TOPIC_CHARS],
                                max_topics=self.max_topics, occurrences=self.table_full)
                return "too_many_topics"
            bucket = self._buckets[topic] = [self.max_frames, self.max_bytes, now_s, 0.0]
        else:
            elapsed = now_s - bucket[_LAST_S]
            bucket[_LAST_S] = now_s
            bucket[_FRAMES] = min(self.max_frames, bucket[_FRAMES] + elapsed * self.frames_per_s)
            bucket[_BYTES] = min(self.max_bytes, bucket[_BYTES] + elapsed * self.bytes_per_s)
        if bucket[_FRAMES] >= 1.0 and bucket[_BYTES] >= size:
            bucket[_FRAMES] -= 1.0
            bucket[_BYTES] -= size
            full = bucket[_FRAMES] >= self.max_frames - 1.0 and bucket[_BYTES] >= self.max_bytes - size
            if bucket[_DROPPED] and full:  # within its share for a whole burst again: the episode is over
                log.info("publisher back within its share", topic=topic[:_TOPIC_CHARS],
                         dropped=int(bucket[_DROPPED]))
                bucket[_DROPPED] = 0.0
            return "ok"
        if not bucket[_DROPPED]:
            self.episodes += 1
            if worth_logging(self.episodes - 1, self.episodes):
                log.warning("publisher over its share; dropping its excess", topic=topic[:_TOPIC_CHARS],
                            frames_per_tick=self.frames_per_tick, bytes_per_tick=self.bytes_per_tick,
                            bytes=size, episodes=self.episodes)
        bucket[_DROPPED] += 1.0
        return "over_share"

    def _prune(self, now_s: float) -> bool:
        """Forget the buckets that are full again (idle a burst time); return whether room was made.

        O(topics), so at most once a burst time: a flood of new topics finds
        the table full and is refused without a walk each.
        """
        if now_s - self._last_prune_s < self.refill_s:
            return False
        self._last_prune_s = now_s
        idle_before = now_s - self.refill_s
        self._buckets = {topic: bucket for topic, bucket in self._buckets.items()
                         if bucket[_LAST_S] > idle_before}
        return len(self._buckets) < self.max_topics
