"""Genuine frames first: whose share each telemetry message is charged to,
decided on the receiver's event loop (the monitor's inbox, an aggregator)
in a microsecond or two, before any decoding.

Why: a topic's share (``_shares``) used to admit the first messages of a tick
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
  the stream the topic carries, as the receiver's accounting last applied
  it (``Confirmed``: the monitor's core after each analysis, an
  aggregator's batches after each tick): the node
  (or site) its topic names, that stream's publisher, sampled after the
  stream's last applied frame and after every frame this share admitted
  for it since (a replay is not the next frame), and not further ahead of
  the publisher's own clock, as the monitor knows it (its receive offset),
  than the stream's lead slack.  A batch is the next frame of its topic when
  every publisher it carries names a live stream and it was sent after the
  last one admitted;
* charged to its topic's **unconfirmed** share otherwise, which is half
  the confirmed one and has two parts: the *candidates*, frames any
  publisher could send next (sampled after the stream's last applied frame,
  not further ahead than the slack: a fail-over, a restart under a new id,
  everything at start before the first analysis), and the rest (replays,
  frames sampled before the stream's last or far ahead of it, a frame whose
  JSON does not say plainly when it was sampled).  So a flood of replays or
  of frames from nowhere leaves a new publisher its confirming frames
  (``core/streams.py``) and an outbox replayed after an outage, and none of
  it ever takes the node's own frames' room.

Both are decoded and judged alike afterwards (the monitor's core): the share
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

from rainierd.admission._quota import SharePolicy
from rainierd.errors import FrameError
from rainierd.wire import TELEMETRY_ROOT, Peek, parse_topic, peek

Fate = Literal["confirmed", "unconfirmed", "over_share", "over_share_unconfirmed", "too_many_topics"]
_MAX_BATCH_TOPICS: Final = 65_536  # batch topics whose last admitted batch is remembered (a fleet has ~800)
_CONFIRMED, _CANDIDATE, _OTHER = 0, 1, 2
_NOTHING: Final[tuple[str | None, ...]] = ()


@dataclass(frozen=True, eq=False)
class StreamsView:
    """One family of streams (nodes or sites) as the receiver knows them: plain tuples, read a message at a time."""

    publisher: tuple[str | None, ...] = _NOTHING  # each stream's publisher (None: no frame of it yet)
    t_s: tuple[float, ...] = ()  # its last frame's sample time (-inf: none)
    offset_s: tuple[float, ...] = ()  # the floor of its receive lag, receipt minus sample time (NaN: not known)
    changed: tuple[int, ...] = ()  # streams whose publisher is not the one of the view it was made after
    t_s_array: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))  # ``t_s``, for the next diff
    key: object = None  # what the view was made from, for its maker to tell that nothing changed

    @classmethod
    def of(cls, publisher: tuple[str | None, ...], t_s: npt.NDArray[np.float64], offset_s: npt.NDArray[np.float64],
           *, before: StreamsView, key: object = None) -> StreamsView:
        """Return the view of these streams; ``publisher`` is ``before.publisher`` itself when none changed."""
        if publisher is before.publisher:
            changed: tuple[int, ...] = ()
        elif len(before.publisher) == len(publisher):
            changed = tuple(i for i, (old, new) in enumerate(zip(before.publisher, publisher, strict=True))
                            if old != new)
        else:
            changed = tuple(range(len(publisher)))
        return cls(publisher, tuple(t_s.tolist()), tuple(offset_s.tolist()), changed, t_s.copy(), key)


@dataclass(frozen=True, eq=False)
class Confirmed:
    """Whose frames each node's and site's topic carries, as the receiver's accounting last applied them.

    The monitor makes it from its core's sequence accounting after each
    analysis (``monitor/admission.py``), an aggregator from the frames it
    batched (``aggregate``), each in its worker thread; ``Admission.learn``
    takes it on the loop.  Replaced, never mutated.
    """

    nodes: StreamsView = field(default_factory=StreamsView)
    sites: StreamsView = field(default_factory=StreamsView)
    publishers: frozenset[str] = frozenset()  # every publisher a stream names now
    lead_slack_s: float = 5.0  # how far ahead of its own clock a stream's next frame may be (core/streams.py)
    # The fleet's sample clock as the last window moved it: the median, over the nodes whose stream advanced,
    # of their newest sample time (NaN: none advanced).  Each node counts once, however many frames it sent.
    heard_t_s: float = math.nan

    @classmethod
    def of(cls, nodes: StreamsView, sites: StreamsView, *, previous: Confirmed | None,
           lead_slack_s: float) -> Confirmed:
        """Return the streams as the two views say, with what ``previous`` allows to be reused."""
        was = previous or cls()
        if previous is not None and nodes.publisher is was.nodes.publisher and sites.publisher is was.sites.publisher:
            publishers = was.publishers
        else:
            publishers = frozenset(p for p in (*nodes.publisher, *sites.publisher) if p is not None)
        t_s, before = nodes.t_s_array, was.nodes.t_s_array
        advanced = np.isfinite(t_s)
        if before.shape == t_s.shape:
            advanced &= t_s != before
        heard = float(np.median(t_s[advanced])) if advanced.any() else math.nan
        return cls(nodes, sites, publishers, lead_slack_s, heard)


class Admission:
    """Each topic's three shares (confirmed, candidates, the rest), and what the loop knows of the streams
    (``learn``), for ``admit``."""

    def __init__(self, policy: SharePolicy, *, tick_s: float) -> None:
        self.confirmed_share = policy.shares(tick_s=tick_s)
        self.unconfirmed_share = policy.unconfirmed(tick_s=tick_s)  # candidates: what any publisher could send next
        self.other_share = policy.unconfirmed(tick_s=tick_s)  # the rest: replays, frames from nowhere
        self.confirmed = Confirmed()
        # The newest sample time each stream's confirmed share admitted (-inf: none since its publisher changed).
        self._node_newest: list[float] = []
        self._site_newest: list[float] = []
        self._batch_newest: dict[str, float] = {}
        self._suffixes: list[str] = []  # how each node's topic ends
        self._max_topics = policy.max_topics
        # Messages each topic had dropped over any of its shares since it last had one admitted: a stream's next
        # frame may lead by that many (core/streams.py, ``shed``), whichever share its numbers went to.
        self._shed: dict[str, int] = {}
        # Of the message ``admit`` last let through: its topic's messages dropped since the one before.
        self.shed = 0

    def __len__(self) -> int:
        return len(self.confirmed_share) + len(self.unconfirmed_share) + len(self.other_share)

    def learn(self, confirmed: Confirmed) -> None:
        """Take the streams as the last analysis left them (on the loop, between messages)."""
        if len(self._suffixes) != len(confirmed.nodes.publisher):
            self._suffixes = [f"/n{node}" for node in range(len(confirmed.nodes.publisher))]
        self.confirmed = confirmed
        self._node_newest = _newest(self._node_newest, confirmed.nodes)
        self._site_newest = _newest(self._site_newest, confirmed.sites)

    def sweep(self, now_s: float) -> None:
        """Forget the topics not heard for a whole window, in every share (``Shares.sweep``)."""
        self.confirmed_share.sweep(now_s)
        self.unconfirmed_share.sweep(now_s)
        self.other_share.sweep(now_s)

    def admit(self, topic: str, payload: bytes, *, now_s: float, rx_wall_s: float, said: Peek | None = None) -> Fate:
        """Charge one message to its share; return what became of it (``confirmed`` or ``unconfirmed``:
        admitted, ``shed`` set; else the reason it is dropped).

        ``said`` is ``peek(payload)`` when the caller has read the header
        already (an aggregator reads a node frame's once, for this and its
        batching), else it is read here.

        Raises FrameError, charging nobody, for a payload the decoding would refuse by its header alone.
        """
        said = _peeked(topic, payload) if said is None else said
        size = len(payload)
        if said.kind == "node":
            rank = self._rank(topic, said, rx_wall_s, side=self.confirmed.nodes, newest=self._node_newest,
                              suffix=self._node_suffix(said.entity))
        elif said.kind == "facility":
            rank = self._rank(topic, said, rx_wall_s, side=self.confirmed.sites, newest=self._site_newest,
                              suffix=f"/s{said.entity}/facility")
        elif said.kind == "batch":
            rank = self._rank_batch(topic, said, rx_wall_s)
        else:
            rank = _OTHER
        if rank == _CONFIRMED:
            verdict = self.confirmed_share.admit(topic, size, now_s)
            if verdict == "ok":
                self.shed = self._shed.pop(topic, 0)
                if said.kind == "node":
                    self._node_newest[said.entity] = said.t_s
                elif said.kind == "facility":
                    self._site_newest[said.entity] = said.t_s
                else:
                    self._remember_batch(topic, said.t_s)
                return "confirmed"
            self._dropped(topic)
            return verdict
        # A candidate (any publisher's frame that could be the stream's next) has the unconfirmed share of its topic;
        # anything else one of its own, so replays and frames from nowhere never crowd a new publisher out.
        shares = self.unconfirmed_share if rank == _CANDIDATE else self.other_share
        verdict = shares.admit(topic, size, now_s)
        if verdict == "ok":
            self.shed = self._shed.pop(topic, 0)
            return "unconfirmed"
        self._dropped(topic)
        return "over_share_unconfirmed" if verdict == "over_share" else verdict

    def _dropped(self, topic: str) -> None:
        if len(self._shed) >= self._max_topics and topic not in self._shed:
            self._shed.clear()  # as many topics dropping at once as the shares track: an intruder's, not a fleet's
        self._shed[topic] = self._shed.get(topic, 0) + 1

    def _node_suffix(self, node: int) -> str:
        """Return how a node's topic ends (``/n<node>``), made once a node (a format a message costs more)."""
        suffixes = self._suffixes
        if 0 <= node < len(suffixes):
            return suffixes[node]
        return f"/n{node}"

    def _rank(self, topic: str, said: Peek, rx_wall_s: float, *, side: StreamsView, newest: list[float],
              suffix: str) -> int:
        """Return whose share a node's (or site's) frame is: its stream's next frame (confirmed), a frame any
        publisher could send next (candidate), or anything else."""
        entity, t_s = said.entity, said.t_s
        if not side.publisher:  # nothing known yet (before the first analysis): anyone's frame could be next
            return _OTHER if math.isnan(t_s) else _CANDIDATE
        if not (0 <= entity < len(side.publisher) and topic.endswith(suffix)):
            return _OTHER
        # Sampled after the stream's last applied frame, and not further ahead of its publisher's clock (as the
        # monitor knows it: its receive offset) than the core believes without confirmation (a time_jump).  An
        # unknown offset (NaN) judges nothing; an unknown sample time (NaN) is never the next frame.
        if not t_s > side.t_s[entity] or t_s - (rx_wall_s - side.offset_s[entity]) > self.confirmed.lead_slack_s:
            return _OTHER
        if said.publishers[:1] != (side.publisher[entity],):
            return _CANDIDATE
        # The confirmed publisher's: its next frame once, a copy of what its share already admitted never.
        return _CONFIRMED if t_s > newest[entity] else _OTHER

    def _rank_batch(self, topic: str, said: Peek, rx_wall_s: float) -> int:
        """Return whose share a batch is: its topic's next batch of live streams only (confirmed), its topic's next
        of anyone (candidate), or anything else (sent before the last admitted, far ahead, or of another site)."""
        site, t_s = said.entity, said.t_s
        if not topic.startswith(f"{TELEMETRY_ROOT}/s{site}/"):
            return _OTHER
        if not t_s > self._batch_newest.get(topic, -math.inf) or t_s - rx_wall_s > self.confirmed.lead_slack_s:
            return _OTHER
        return _CONFIRMED if self.confirmed.publishers.issuperset(said.publishers) else _CANDIDATE

    def _remember_batch(self, topic: str, t_s: float) -> None:
        if len(self._batch_newest) >= _MAX_BATCH_TOPICS and topic not in self._batch_newest:
            self._batch_newest.clear()  # a fleet's few hundred batch topics are back within a tick
        self._batch_newest[topic] = t_s


def _peeked(topic: str, payload: bytes) -> Peek:
    """Return what ``payload`` says of itself; raise FrameError as its decoding would, judging the topic first."""
    try:
        return peek(payload)
    except FrameError:
        if parse_topic(topic) is None:
            raise FrameError("bad_topic", "not a telemetry topic") from None
        raise


def _newest(newest: list[float], side: StreamsView) -> list[float]:
    """Return the newest sample time admitted for each stream, carried over unless its publisher changed."""
    n = len(side.publisher)
    if len(newest) != n:
        return [-math.inf] * n
    for i in side.changed:
        newest[i] = -math.inf
    return newest
