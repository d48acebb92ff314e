"""Per-publisher fairness before any decoding: each telemetry topic (a node's
topic, a batch topic, a site's facility topic) gets a share of frames and of
payload bytes per tick, and what it sends beyond its share is dropped here,
counted under ``over_share``, so one publisher flooding its own topic costs
every other publisher nothing: not a place in the backlog, not a
microsecond of decoding.  ``Admission`` keeps three tables of them: each
topic's confirmed publisher's share, and half-shares for what anyone else
sends on it (``_admission``).

A share is counted over fixed windows of ``BURST_TICKS`` ticks on the
monitor's monotonic clock: a topic may send ``frames_per_tick`` messages and
``bytes_per_tick`` bytes a tick on average over the window, in any rhythm
within it (a simulator's outbox replayed after a broker outage is 4 ticks of
frames at once).  A genuine stream publishes one frame a tick on its topic
(docs/wire-format.md), so it never meets its share.  The check is O(1) a
message: one dict look-up, one comparison of window numbers, two additions
(a token bucket cost twice as much a message, measured: docs/security.md).

The table of topics is bounded (``max_topics``): a topic not heard for a
whole window is forgotten (``sweep``, once a window; or at once when the
table is full); a topic that finds the table full of busy ones is dropped as
``too_many_topics`` (more distinct topics than any fleet the monitor was
sized for publish at once: an intruder's, not a fleet's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import structlog

from rainierd.runtime import worth_logging

log = structlog.get_logger("rainierd.admission")

Verdict = Literal["ok", "over_share", "too_many_topics"]

BURST_TICKS: Final = 5
"""A share is counted over windows of this many ticks: a simulator replays its outbox of 4 ticks after a
broker outage, then sends the live tick."""
_WINDOW, _FRAMES, _BYTES, _DROPPED, _EPISODE, _SHED = 0, 1, 2, 3, 4, 5
_TOPIC_CHARS: Final = 200  # a topic is the sender's words: logged truncated


@dataclass(frozen=True, slots=True)
class SharePolicy:
    """What one telemetry topic may send (the ``share_*`` settings)."""

    frames_per_tick: float = 4.0
    bytes_per_tick: int = 4 * 2**20
    max_topics: int = 131_072

    def shares(self, *, tick_s: float) -> Shares:
        """Return a table of shares under this policy for ticks of ``tick_s``: each topic's confirmed publisher's."""
        return Shares(frames_per_tick=self.frames_per_tick, bytes_per_tick=self.bytes_per_tick,
                      burst_ticks=BURST_TICKS, tick_s=tick_s, max_topics=self.max_topics)

    def unconfirmed(self, *, tick_s: float) -> Shares:
        """Return a table of what each topic carries from anyone else (``Admission``): half the messages, the
        same bytes.  At the defaults 2 a tick, 10 at once: a new publisher's confirming frames
        (3 over a tick, core/streams.py) and an outbox replayed after an outage (4 ticks, then the live one)."""
        return Shares(frames_per_tick=self.frames_per_tick / 2, bytes_per_tick=self.bytes_per_tick,
                      burst_ticks=BURST_TICKS, tick_s=tick_s, max_topics=self.max_topics, name="unconfirmed")


class Shares:
    """What every topic heard recently has sent in the current window, and what it has had dropped."""

    def __init__(
        self, *, frames_per_tick: float, bytes_per_tick: float, burst_ticks: int, tick_s: float, max_topics: int,
        name: str = "confirmed",
    ) -> None:
        self.name = name  # in its log lines: whose share it is
        self.frames_per_tick, self.bytes_per_tick = frames_per_tick, bytes_per_tick
        self.max_frames = int(frames_per_tick * burst_ticks)
        self.max_bytes = int(bytes_per_tick * burst_ticks)
        self.window_s = burst_ticks * tick_s
        self._per_s = 1.0 / self.window_s
        self.max_topics = max_topics
        # topic -> [window number, messages and bytes in it, dropped in it, in an episode (0/1)]
        self._topics: dict[str, list[int]] = {}
        self._swept = -1  # the window of the last sweep
        self.episodes = 0  # topics that went over their share, one per episode
        self.table_full = 0  # messages dropped because the table held only busy topics
        # Of the message ``admit`` last let through: its topic's messages dropped since the one before it
        # (Message.shed: its frames' seq may lead by that many, and the gap is counted lost).
        self.shed = 0

    def __len__(self) -> int:
        return len(self._topics)

    def admit(self, topic: str, size: int, now_s: float) -> Verdict:
        """Count one message of ``size`` bytes on ``topic`` against its share; return what became of it."""
        window = int(now_s * self._per_s)
        sent = self._topics.get(topic)
        if sent is None:
            if len(self._topics) >= self.max_topics and not self._forget_idle(window):
                self.table_full += 1
                if worth_logging(self.table_full - 1, self.table_full):
                    log.warning("too many telemetry topics at once; dropping the new ones", topic=topic[:_TOPIC_CHARS],
                                max_topics=self.max_topics, occurrences=self.table_full, share=self.name)
                return "too_many_topics"
            sent = self._topics[topic] = [window, 0, 0, 0, 0, 0]
        elif sent[_WINDOW] != window:
            self._next_window(topic, sent, window)
        if sent[_FRAMES] < self.max_frames and sent[_BYTES] + size <= self.max_bytes:
            sent[_FRAMES] += 1
            sent[_BYTES] += size
            self.shed, sent[_SHED] = sent[_SHED], 0
            return "ok"
        sent[_DROPPED] += 1
        sent[_SHED] += 1
        if not sent[_EPISODE]:
            sent[_EPISODE] = 1
            self.episodes += 1
            if worth_logging(self.episodes - 1, self.episodes):
                log.warning("publisher over its share; dropping its excess", topic=topic[:_TOPIC_CHARS],
                            frames_per_tick=self.frames_per_tick, bytes_per_tick=self.bytes_per_tick,
                            bytes=size, episodes=self.episodes, share=self.name)
        return "over_share"

    def _next_window(self, topic: str, sent: list[int], window: int) -> None:
        """Start ``topic``'s count afresh; a window (or more) within its share ends its episode."""
        if sent[_EPISODE] and (not sent[_DROPPED] or window > sent[_WINDOW] + 1):
            log.info("publisher back within its share", topic=topic[:_TOPIC_CHARS], share=self.name)
            sent[_EPISODE] = 0
        sent[_WINDOW], sent[_FRAMES], sent[_BYTES], sent[_DROPPED] = window, 0, 0, 0

    def sweep(self, now_s: float) -> None:
        """Forget the topics not heard for a whole window, once a window, so a burst of topics leaves no memory
        behind (O(topics): at rainier, 32,000 topics, ~3 ms every 5 ticks)."""
        self._forget_idle(int(now_s * self._per_s))

    def _forget_idle(self, window: int) -> bool:
        """Forget the topics last heard before the previous window; return whether the table has room.

        At most once a window: a flood of new topics into a full table is
        refused without a walk each.
        """
        if window == self._swept:
            return len(self._topics) < self.max_topics
        self._swept = window
        # A topic with frames shed since it last got one through is kept: they explain its next frame's lead.
        self._topics = {topic: sent for topic, sent in self._topics.items()
                        if sent[_WINDOW] >= window - 1 or sent[_SHED]}
        return len(self._topics) < self.max_topics
