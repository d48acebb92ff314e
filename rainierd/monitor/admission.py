"""Genuine frames first: whose share each telemetry message is charged to,
decided on the event loop in a microsecond or two, before any decoding.

Why: a topic's share (``shares``) used to admit the first messages of a tick
whatever they were, so garbage or a flood on a node's topic (a broker
without the ACL, or a fuzzer with a node's password) spent the share and
got the node's own frame dropped as ``over_share``: 8 nodes went ``lost``
and the fleet's FP8 to 0 in issue 35's run.  Now every message is first
read for what it says of itself (``wire/peek.py``) and then:

* **refused at once**, counted under the reason the decoding would give, if
  it is no telemetry frame at all (``empty``, ``unknown_encoding``) or its
  binary header is broken (``truncated``, ``bad_magic``, ``bad_version``,
  ``bad_kind``, ``bad_header``, ``trailing_bytes``, a ``non_finite``
  sample time); on a topic that is no telemetry topic, as ``bad_topic``,
  which the decoding checks first.  It is charged to nobody's share;
* charged to its topic's **confirmed** share when it is the next frame of
  the stream the topic carries, as the core's sequence accounting last
  applied it (``Confirmed``, handed over after each analysis): the node
  (or site) its topic names, that stream's publisher, sampled after the
  stream's last applied frame and after every frame this share admitted
  for it since (a replay is not the next frame), and not further ahead of
  the publisher's own clock, as the monitor knows it (its receive offset),
  than the stream's lead slack.  A batch is the next frame of its topic when
  every publisher it carries names a live stream and it was sent after the
  last one admitted;
* charged to its topic's **unconfirmed** share otherwise: another
  publisher (a fail-over, a restart under a new id, an intruder), a replay,
  a frame whose JSON does not say plainly who sent it, and everything at
  start before the first analysis.  It is half the confirmed share, enough
  for a new publisher's confirming frames (``core/streams.py``) and an
  outbox replayed after an outage, never the node's own frames' room.

Both are decoded and judged alike afterwards (``core/ingest``): the share
decides what is kept when a topic carries more than it may, never what a
frame is believed to be.  So garbage or a flood costs its sender its own
share and nobody else: not the node whose topic it is, nor its neighbours.

What it cannot tell: a forger that copies a node's publisher id and sends
the stream's next frames before the node does (without the ACL anyone can
read the id off the broker) is charged to the node's confirmed share, as
it is believed by the core; the shipped ACL (only the node's agent writes
its topic) is the defence (docs/security.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from rainierd.core.ingest import Ingest
from rainierd.errors import FrameError
from rainierd.monitor.shares import SharePolicy
from rainierd.wire.peek import Peek, peek
from rainierd.wire.topics import TELEMETRY_ROOT, parse_topic

__all__ = ["Admission", "Confirmed", "Fate"]

Fate = Literal["confirmed", "unconfirmed", "over_share", "over_share_unconfirmed", "too_many_topics"]
_MAX_BATCH_TOPICS: Final = 65_536  # batch topics whose last admitted batch is remembered (a fleet has ~800)
_NOTHING: Final[tuple[str | None, ...]] = ()


@dataclass(frozen=True, eq=False)
class _Side:
    """One family of streams (nodes or sites) as of an analysis: plain lists, read a message at a time."""

    publisher: tuple[str | None, ...] = _NOTHING  # the stream's publisher (None: no frame applied yet)
    t_s: tuple[float, ...] = ()  # the last applied frame's sample time
    offset_s: tuple[float, ...] = ()  # the floor of its receive lag (NaN: not known)
    changed: tuple[int, ...] = ()  # streams whose publisher is not the one of the previous value
    index: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))  # the core's numbering
    t_s_array: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))  # t_s, for the next diff


@dataclass(frozen=True, eq=False)
class Confirmed:
    """Whose frames each node's and site's topic carries, as the core's sequence accounting last applied them.

    Built in the analysis thread after each window (``of``), handed to the
    loop's ``Admission.learn``; replaced, never mutated.
    """

    nodes: _Side = field(default_factory=_Side)
    sites: _Side = field(default_factory=_Side)
    publishers: frozenset[str] = frozenset()  # every publisher a stream names now
    lead_slack_s: float = 5.0  # how far ahead of its own clock a stream's next frame may be (core/streams.py)
    count: int = 0  # publisher ids the core numbered (a change of the numbering shows here)
    # The fleet's sample clock as the last window moved it: the median, over the nodes whose stream advanced,
    # of their newest sample time (NaN: none advanced).  Each node counts once, however many frames it sent.
    heard_t_s: float = math.nan

    @classmethod
    def of(cls, ingest: Ingest, previous: Confirmed | None = None) -> Confirmed:
        """Return ``ingest``'s streams as of now, reusing ``previous``'s lists where nothing changed.

        About a millisecond at ``rainier`` (31,200 nodes) a tick, a few more the
        tick a publisher changes.
        """
        accounting = ingest.accounting
        count = accounting.publisher_count
        same_numbering = previous is not None and previous.count == count
        names: list[str] | None = None

        def side(streams_index: npt.NDArray[np.int64], t_s: npt.NDArray[np.float64],
                 offset_s: npt.NDArray[np.float64], before: _Side) -> _Side:
            nonlocal names
            if same_numbering and np.array_equal(streams_index, before.index):
                return _Side(before.publisher, tuple(t_s.tolist()), tuple(offset_s.tolist()), (), before.index,
                             t_s.copy())
            if names is None:
                names = accounting.publisher_names()
            publisher = tuple(names[i] if i >= 0 else None for i in streams_index.tolist())
            changed = tuple(i for i, (old, new) in enumerate(zip(before.publisher, publisher, strict=False))
                            if old != new) if before.publisher else tuple(range(len(publisher)))
            return _Side(publisher, tuple(t_s.tolist()), tuple(offset_s.tolist()), changed, streams_index.copy(),
                         t_s.copy())

        was = previous or cls()
        nodes, sites = accounting.nodes, accounting.sites
        node_side = side(nodes.publisher, nodes.t_s, nodes.offset_s, was.nodes)
        site_side = side(sites.publisher, sites.t_s, sites.offset_s, was.sites)
        if names is None and previous is not None:
            publishers = previous.publishers
        else:
            publishers = frozenset(p for p in (*node_side.publisher, *site_side.publisher) if p is not None)
        before = was.nodes.t_s_array
        advanced = np.isfinite(nodes.t_s)
        if before.shape == nodes.t_s.shape:
            advanced &= nodes.t_s != before
        heard = float(np.median(nodes.t_s[advanced])) if advanced.any() else math.nan
        return cls(node_side, site_side, publishers, nodes.lead_slack_s, count, heard)


class Admission:
    """Each topic's two shares, and what the loop knows of the streams (``learn``), for ``admit``."""

    def __init__(self, policy: SharePolicy, *, tick_s: float) -> None:
        self.confirmed_share = policy.shares(tick_s=tick_s)
        self.unconfirmed_share = policy.unconfirmed(tick_s=tick_s)
        self.confirmed = Confirmed()
        # The newest sample time each stream's confirmed share admitted (-inf: none since its publisher changed).
        self._node_newest: list[float] = []
        self._site_newest: list[float] = []
        self._batch_newest: dict[str, float] = {}
        # Of the message ``admit`` last let through: its share's messages dropped on its topic since the one before.
        self.shed = 0

    def __len__(self) -> int:
        return len(self.confirmed_share) + len(self.unconfirmed_share)

    def learn(self, confirmed: Confirmed) -> None:
        """Take the streams as the last analysis left them (on the loop, between messages)."""
        self.confirmed = confirmed
        self._node_newest = _newest(self._node_newest, confirmed.nodes)
        self._site_newest = _newest(self._site_newest, confirmed.sites)

    def sweep(self, now_s: float) -> None:
        """Forget the topics not heard for a whole window, in both shares (``Shares.sweep``)."""
        self.confirmed_share.sweep(now_s)
        self.unconfirmed_share.sweep(now_s)

    def admit(self, topic: str, payload: bytes, *, now_s: float, rx_wall_s: float) -> Fate:
        """Charge one message to its share; return what became of it (``confirmed`` or ``unconfirmed``:
        admitted, ``shed`` set; else the reason it is dropped).

        Raises FrameError, charging nobody, for a payload the decoding would refuse by its header alone.
        """
        try:
            said = peek(payload)
        except FrameError:
            if parse_topic(topic) is None:  # the decoding judges the topic first
                raise FrameError("bad_topic", "not a telemetry topic") from None
            raise
        size = len(payload)
        t_s = said.t_s
        if said.kind == "node":
            confirmed = self._next(topic, said, rx_wall_s, side=self.confirmed.nodes, newest=self._node_newest,
                                   suffix=f"/n{said.entity}")
        elif said.kind == "facility":
            confirmed = self._next(topic, said, rx_wall_s, side=self.confirmed.sites, newest=self._site_newest,
                                   suffix=f"/s{said.entity}/facility")
        elif said.kind == "batch":
            confirmed = self._next_batch(topic, said, rx_wall_s)
        else:
            confirmed = False
        if confirmed:
            verdict = self.confirmed_share.admit(topic, size, now_s)
            if verdict == "ok":
                self.shed = self.confirmed_share.shed
                if said.kind == "node":
                    self._node_newest[said.entity] = t_s
                elif said.kind == "facility":
                    self._site_newest[said.entity] = t_s
                else:
                    self._remember_batch(topic, t_s)
                return "confirmed"
            return verdict
        verdict = self.unconfirmed_share.admit(topic, size, now_s)
        if verdict == "ok":
            self.shed = self.unconfirmed_share.shed
            return "unconfirmed"
        return "over_share_unconfirmed" if verdict == "over_share" else verdict

    def _next(self, topic: str, said: Peek, rx_wall_s: float, *, side: _Side, newest: list[float],
              suffix: str) -> bool:
        """Return whether a node's (or site's) frame is the next one of the stream its topic carries."""
        entity, publishers, t_s = said.entity, said.publishers, said.t_s
        if not (0 <= entity < len(side.publisher) and publishers and topic.endswith(suffix)):
            return False
        if publishers[0] != side.publisher[entity] or not t_s > max(side.t_s[entity], newest[entity]):
            return False
        # Ahead of the publisher's own clock by more than the slack: not believed without confirmation (held by the
        # core as a time_jump), and never the mark the next frames must pass.  An unknown offset (NaN) judges nothing.
        return not t_s - (rx_wall_s - side.offset_s[entity]) > self.confirmed.lead_slack_s

    def _next_batch(self, topic: str, said: Peek, rx_wall_s: float) -> bool:
        """Return whether a batch is its topic's next: its site's, of live streams only, sent after the last."""
        site, publishers, t_s = said.entity, said.publishers, said.t_s
        if not topic.startswith(f"{TELEMETRY_ROOT}/s{site}/") or not self.confirmed.publishers.issuperset(publishers):
            return False
        return t_s > self._batch_newest.get(topic, -math.inf) and not t_s - rx_wall_s > self.confirmed.lead_slack_s

    def _remember_batch(self, topic: str, t_s: float) -> None:
        if len(self._batch_newest) >= _MAX_BATCH_TOPICS and topic not in self._batch_newest:
            self._batch_newest.clear()  # a fleet's few hundred batch topics are back within a tick
        self._batch_newest[topic] = t_s


def _newest(newest: list[float], side: _Side) -> list[float]:
    """Return the newest sample time admitted for each stream, carried over unless its publisher changed."""
    n = len(side.publisher)
    if len(newest) != n:
        return [-math.inf] * n
    for i in side.changed:
        newest[i] = -math.inf
    return newest
