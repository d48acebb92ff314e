"""Loss of the monitor's feed: most of the nodes it was hearing falling silent
together while it stays connected is the transport's failure (a broker node
lost under the publishers, a partition between their broker and the
monitor's), not the nodes'.

Why a detector of its own: node silence is judged per node (``cooling``: a
node is lost when every chip of it is stale), so a broker node's loss under
one publisher read as every node of that publisher lost at once, 32 pages
for one fault that a fail-over mends in seconds.  The rule here, on the
listening clock (``FleetState.now_s``), once per analysis and vectorised:

* the **base** is the nodes heard in the last ``heard_within_s`` (a minute;
  at least two of a node's own stale intervals), less those already judged
  lost;
* when a node falls silent (every chip stale), the newest last receipt among
  the silent nodes is the candidate **onset**.  The feed is **lost** when,
  of the base nodes that should have been heard since the onset (heard
  after it, or overdue: unheard for their period and a tick), at least
  ``lost_share``, and at least ``min_nodes``, were not: they are overdue
  now, their last receipt within their own stale interval of the onset,
  before or after it.  A node that fell silent on its own, earlier, is not
  part of it, and a node whose next frame is not due yet counts neither way;
* when the feed is not lost by that count but would be if the nodes heard
  after the onset that are past their period (not yet overdue) were
  overdue, the silent nodes **wait**: their silence is not judged in this
  analysis.  Within a tick those nodes are heard or overdue, so a node's
  own loss is reported a tick late at most, and only then.

Why "after it" too: the nodes' last frames before the feed stops need not
come together.  A starved publisher spreads a tick's frames over most of
the tick (the NATS cluster's simulator, four nodes a batch, on a loaded
2-core machine: one tick's eight batches over 0.46 s), and a broker node
killed while it forwards a tick passes only part of it.  The nodes whose
last frame came first then fall silent an analysis before the rest.
Counted as heard, the rest's later frames made the first nodes' silence
their own (a CI rehearsal: one shard reported four nodes, one batch,
``lost`` and back, the rest then read as the feed lost), though the rest
have been silent since, overdue: the same silence.  And when their frames
came a tick after the first's or later, the rest are not yet overdue when
the first fall silent: only a tick later can the two be told apart, so the
first wait that tick.

One ``feed`` entity (a single id: the monitor's, or its shard's) carries the
state, so the loss is one event, one series and one alert.

Why "overdue", not "silent": a node's stale interval is its own
(``stale_after_s``, or ``stale_after_ticks`` of its publisher's period where
that is longer: ``FleetState.stale_after``), so when the feed stops,
publishers at neuron-monitor's 5 s fall silent up to 15 s after it, one by
one as their phases come, while agents at 1 s are silent after 3 s.  Judged
on silence alone, the first would be lost one at a time and the second
before the first counted.  A publisher whose frame is overdue by a tick is
evidence at once; it is held when it falls silent in its turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rainierd._types import F64, B
from rainierd.core.detect._common import Reason
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState

FEED_HEALTHY, FEED_LOST = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedParams:
    """When many nodes' silence is the feed's (docs/reliability.md justifies the defaults)."""

    lost_share: float = 0.5  # of the nodes heard in the last heard_within_s, silent together
    min_nodes: int = 2  # fewer silent together is a node failure, never the feed's
    heard_within_s: float = 60.0
    # Measured NATS fail-over under a publisher is ~10 s (docs/scaling.md); a minute is several of them.
    hold_s: float = 60.0
    stale_after_s: float = 3.0  # set from the monitor's configuration (stale_after_ticks x tick)
    tick_s: float = 1.0  # set from the monitor's configuration: a frame is overdue a tick after its period

    def __post_init__(self) -> None:
        if not 0.0 < self.lost_share <= 1.0 or self.min_nodes < 1:
            raise ValueError(f"lost_share must be in (0, 1] and min_nodes >= 1: {self}")
        if not self.hold_s >= 0.0 or not self.heard_within_s > self.stale_after_s or not self.tick_s > 0.0:
            raise ValueError(f"hold_s must be >= 0, heard_within_s above stale_after_s and tick_s positive: {self}")


@dataclass(frozen=True, slots=True)
class FeedView:
    """The feed's state at one analysis (plain values: readers on another thread take this)."""

    lost: bool = False
    silent_nodes: int = 0  # held nodes still silent: the nodes the feed's loss is hiding
    base_nodes: int = 0  # nodes heard in the last heard_within_s, or held
    since_s: float = float("nan")  # listening time of the loss's onset (NaN: not lost)

    @property
    def reason(self) -> str:
        """Return a one-line account for a probe."""
        return f"feed lost: {self.silent_nodes} of {self.base_nodes} nodes silent together"


@dataclass(eq=False)
class FeedDetector:
    """The feed of one monitor (or shard), and which nodes' silence it holds back."""

    state: FleetState
    params: FeedParams = field(default_factory=FeedParams)

    def __post_init__(self) -> None:
        n = self.state.topology.n_nodes
        self.tracker = StateTracker.create(1, raise_after_s=[0.0, 0.0], clear_after_s=0.0)
        self.held = np.zeros(n, dtype=bool)
        self.since_s = float("nan")
        self.onset_rx_s = float("nan")  # the newest last receipt among the nodes silent at the loss's onset
        self.view = FeedView()

    @property
    def lost(self) -> bool:
        """Return whether the feed is lost now."""
        return bool(self.tracker.state[0] == FEED_LOST)

    def update(
        self, tick: int, *, node_rx_s: F64, node_silent: B, node_lost: B, node_stale_s: F64 | None = None,
        node_period_s: F64 | None = None,
    ) -> tuple[Transitions, B]:
        """Judge the feed; return (its change, the nodes whose silence is not to be judged now).

        ``node_rx_s`` is each node's newest receipt on the listening clock
        (NaN: never heard), ``node_silent`` whether every chip of it is stale,
        ``node_lost`` whether it is already judged lost, ``node_stale_s`` each
        node's stale interval and ``node_period_s`` its period (None, or NaN
        for a node: ``stale_after_s`` and the tick).
        """
        p, now = self.params, self.state.now_s
        stale_s: float | F64 = p.stale_after_s if node_stale_s is None else node_stale_s
        due_s: float | F64 = 2 * p.tick_s if node_period_s is None else np.fmax(node_period_s, p.tick_s) + p.tick_s
        with np.errstate(invalid="ignore"):
            heard = (now - node_rx_s) < np.maximum(p.heard_within_s, 2 * stale_s)  # NaN (never heard): not heard
        gone = heard & node_silent & ~node_lost
        lost = self.lost
        waiting = np.zeros_like(self.held)  # silent nodes whose judgement waits for the late ones, this analysis
        if not lost and gone.any():
            onset = float(node_rx_s[gone].max())
            quiet, due, late = self._quiet(onset, node_rx_s, heard & ~node_lost, stale_s, due_s)
            with np.errstate(invalid="ignore"):
                same = gone & (node_rx_s >= onset - stale_s)  # fell silent within a stale interval of the onset
            if quiet >= p.min_nodes and quiet >= p.lost_share * due:
                lost, self.since_s, self.onset_rx_s = True, now, onset
                np.copyto(self.held, same)
            elif quiet + late >= p.min_nodes and quiet + late >= p.lost_share * due:
                # The late are heard or overdue within a tick: the feed's loss, or not, is known by then.  Only
                # while the silence is under a tick old, so a node's own loss is reported a tick late at most.
                with np.errstate(invalid="ignore"):
                    waiting = same & ((now - node_rx_s - stale_s < p.tick_s) & gone).any()
        elif lost:
            self.held |= gone  # falling silent while the feed is lost: the same cause, most likely
        self.held &= node_silent  # heard again: its own judgement resumes
        believed = not now - self.since_s < p.hold_s  # NaN (never lost) counts as believed
        silent = int(self.held.sum())
        base = int((heard | self.held).sum())
        if lost:
            # The held stay in, judged lost or not once the hold is over: the feed returns when they are heard.
            quiet, due, _ = self._quiet(self.onset_rx_s, node_rx_s, (heard & ~node_lost) | self.held, stale_s, due_s)
            if quiet < p.min_nodes or quiet < p.lost_share * due:
                lost = False
        if not lost and believed:
            self.held[:] = False
        hold = (self.held if not believed else np.zeros_like(self.held)) | waiting
        change = self.tracker.update(np.array([FEED_LOST if lost else FEED_HEALTHY], np.int8),
                                     np.array([int(Reason.FEED_LOST) if lost else 0], np.int32),
                                     np.ones(1, dtype=bool), tick, seconds=0.0)
        if not lost:
            self.since_s = self.since_s if hold.any() else float("nan")
        self.view = FeedView(lost, silent if lost else 0, base, self.since_s if lost else float("nan"))
        return change, hold

    def _quiet(
        self, onset_s: float, node_rx_s: F64, base: B, stale_s: float | F64, due_s: float | F64,
    ) -> tuple[int, int, int]:
        """Return (nodes of ``base`` not heard since ``onset_s`` though due, nodes of it that were due since:
        heard after it, or overdue now, and of those heard after it, the late: past their period, not overdue).

        Quiet is overdue with a last receipt within a stale interval of the onset, either side of it: a node
        heard after the onset and not since is part of the same silence (the feed's last tick came spread out,
        or in part: the nodes whose last frame came first fall silent an analysis before the rest), not evidence
        that the feed still worked.
        """
        now = self.state.now_s
        with np.errstate(invalid="ignore"):
            age = now - node_rx_s
            quiet = base & (node_rx_s >= onset_s - stale_s) & (node_rx_s <= onset_s + stale_s) & (age >= due_s)
            spoke = base & (node_rx_s > onset_s) & ~quiet
            late = spoke & (node_rx_s <= onset_s + stale_s) & (age > due_s - self.params.tick_s)
        return int(quiet.sum()), int((quiet | spoke).sum()), int(late.sum())
