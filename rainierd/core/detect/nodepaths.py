"""A node's network paths judged as one: every EFA port, or every NeuronLink,
of one node carrying far less than the nodes that carry the same work.

Why a judgement of its own: the path detectors compare a port with the other
ports of its node, and a link with its node's links of its kind, because only
those were sampled in the same frame, over the same seconds (issue 22: agents
sample out of phase, with their own skew, through a training step whose
traffic swings x16).  So a node whose ports or links all slow together (a
NIC, PCIe or firmware limit; a job's pace) raises none of them, and without
this module nothing would say so at all.

Here a node is compared with its **peers**, the nodes that carry the same
work: its job's nodes when jobs are known (``node_group``), else its
UltraServer's.  Their samples cover other seconds, so each node's traffic is
first smoothed over whole training steps: three cascaded exponential averages
of its interval rates (``smooth_s`` each), which pass a level and damp the
step's ripple ~(2 pi smooth_s / step)^3-fold (a 6 s step at x16: under 1 %),
whatever phase, skew or jitter each agent's intervals had.  A node's reference
is the median of its peers' smoothed levels (without its own), and it is slow
while its level stays under ``band`` of that.

No node can convict another (issue 35; docs/detection.md has the case): every
figure here is one node's agent's word, and one agent reporting its EFA bytes
x3 made both healthy nodes of a 3-node job slow against the median of their two
peers, their mean.  So a node is judged only with at least ``min_peers`` (3)
peers reporting, whose median without its own no single one can carry past the
others (with fewer it is unknown, ``unknown``); a node whose level stays over
``implausible_above`` of its peers' (with two peers or more) is left out of
every other node's reference at once and not judged itself, and is counted
implausible once that has held ``implausible_after_s``.  A slow node whose own
level also fell under ``own_drop_below`` of its usual one (learned over
``usual_s`` while it was judged well) carries ``own_drop``: evidence of its
own that no peer's lie can give, which the advisory needs before it drains.

It is judged only while its peers carry steady traffic: not while the
reference is idle (under ``idle_below`` of its own recent peak: a checkpoint,
a restart, an idle UltraServer), nor within ``settle_s`` of the reference
moving (more than ``steady_within`` off its own slower average: a job phase
beginning or ending, when a node whose agent samples seconds after its peers
lags them), nor before the node has ``warmup_s`` of its own history.  So a
whole UltraServer or job moving together (a job phase, ``core/jobphase.py``)
raises nothing: its nodes move with their reference.  A sample after a gap (a
broker outage, a silent agent) counts as one of its node's own periods in
every average and every count of seconds, never as the gap (``_held``).  A node with fewer than
``min_peers`` peers reporting (a job of up to three nodes, an UltraServer with
three present nodes) is not judged.

The finding is one ``path_degraded`` state on the node entity (its reasons
``efa_node_slow`` and ``neuronlink_node_slow``: ``detect/__init__.py`` folds it
into the node's states), never one fault per port or link.

Per tick: each path detector hands one figure a node (a reshape and a mean
over its ports or link kinds); the smoothing is a few passes over the nodes,
and the peers' medians one sort of the nodes by (group, level) (~31k nodes at
rainier), a second one only in a tick where some claim is implausible: no
Python loop over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, NamedTuple

import numpy as np

from rainierd._types import F32, I64, B
from rainierd.core.detect._common import Reason
from rainierd.core.detect._peers import peer_groups
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState

PATH_SIGNALS: Final = ("efa", "neuronlink")
_REASONS: Final = {"efa": Reason.EFA_NODE_SLOW, "neuronlink": Reason.NEURONLINK_NODE_SLOW}
NODE_PATHS_HEALTHY, NODE_PATHS_DEGRADED = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePathParams:
    """When a node's paths are slow against its peers' (docs/detection.md, "Peers and time bases")."""

    smooth_s: float = 6.0  # each of the three cascaded averages (a training step: seconds)
    band: float = 0.7  # a node whose level stays under this share of its peers' is slow
    idle_below: float = 0.2  # peers under this share of their recent peak are idle: not judged
    peak_halflife_s: float = 600.0  # how fast the recent peak forgets
    steady_s: float = 10.0  # the reference's slower average, against which it is steady
    steady_within: float = 0.25  # the reference this far off its slower average is moving: not judged
    settle_s: float = 20.0  # seconds of steady, busy peers before judging
    # A node's own history before it is judged: its averages start from one interval's rate, anywhere between
    # the step's low and high (x16 apart); after ten averaging times that start weighs under 1 %.
    warmup_s: float = 60.0
    raise_after_s: float = 5.0
    clear_after_s: float = 10.0
    # Statistics no one member can move (issue 35): a node is judged only against at least this many peers, the
    # median of theirs without its own; one member then cannot move it outside the others' range.
    min_peers: int = 3
    # A node whose level stays over this multiple of its peers' median (with two peers or more) for
    # implausible_after_s claims traffic its job cannot carry: it is counted implausible and left out of every
    # other node's reference.  Nodes carrying the same work carry the same traffic (a collective's ring sends and
    # receives alike): a peer of a 3-node job with its traffic at 0 leaves the others 2x the mean of theirs.
    implausible_above: float = 2.5
    implausible_after_s: float = 5.0
    # A slow node's own level under this share of its usual one (learned over usual_s while its peers said it
    # was well) is its own evidence, which a liar among its peers cannot give (actions/policy.py).
    own_drop_below: float = 0.85
    usual_s: float = 300.0

    def __post_init__(self) -> None:
        if not (0.0 < self.band < 1.0 and 0.0 <= self.idle_below < 1.0 and self.smooth_s > 0
                and self.steady_s > 0 and self.steady_within > 0 and self.peak_halflife_s > 0
                and self.min_peers >= 1 and self.implausible_above > 1.0 and self.implausible_after_s >= 0
                and 0.0 < self.own_drop_below < 1.0 and self.usual_s > 0):
            raise ValueError(f"node path thresholds out of range: {self}")


class NodeSignal(NamedTuple):
    """One path kind's figure per node for this analysis: its interval's mean rate (any unit, NaN: unknown),
    the interval in seconds, and whether the node has a new sample."""

    rate: F32
    dt_s: F32
    fresh: B

    @classmethod
    def of(cls, values: F32, dt_s: F32, fresh: B, *, per_node: int, values_per_node: int | None = None) -> NodeSignal:
        """Return the figure of each node from its entities' (``per_node`` a node, in node order): the mean of
        their finite ``values`` (``values_per_node`` a node, if another count), the first one's interval, and
        whether any is fresh."""
        any_fresh: B = np.asarray(fresh.reshape(-1, per_node).any(axis=1), dtype=bool)
        return cls(node_mean(values, values_per_node or per_node), dt_s[::per_node], any_fresh)

    @classmethod
    def unknown(cls, n: int) -> NodeSignal:
        """Return the figure of ``n`` nodes none of which has a sample."""
        return cls(np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32), np.zeros(n, dtype=bool))


def group_others_median(values: F32, group: I64) -> F32:
    """Return, per entry, the median of the other finite values of its group (NaN where it is NaN, in no group
    (-1) or alone), by one sort of the entries by (group, value)."""
    out = np.full(values.shape, np.nan, np.float32)
    idx = np.flatnonzero(np.isfinite(values) & (group >= 0))
    if not idx.size:
        return out
    # One sort by group plus the value scaled into [0, 1): the order of np.lexsort((value, group)) within float64's
    # 2^-52 (values closer than ~1e-11 of their spread may swap, which moves no median by more), at 0.5 ms over
    # rainier's 31k nodes against 24 for np.lexsort and 8 for two argsorts.
    picked = values[idx].astype(np.float64)
    low, span = float(picked.min()), float(picked.max() - picked.min())
    picked -= low
    picked /= span * (1.0 + 2.0**-20) if span > 0 else 1.0
    picked += group[idx]
    order = np.argsort(picked)
    g, v = group[idx][order], values[idx][order]
    starts = np.ones(g.size, dtype=bool)
    starts[1:] = g[1:] != g[:-1]
    first_at = np.flatnonzero(starts)
    which = np.cumsum(starts) - 1
    first = first_at[which]
    others = np.diff(np.append(first_at, g.size))[which] - 1
    rank = np.arange(g.size) - first
    # The others' middle places, then each moved past the entry itself where it lies at or above it.
    lo, hi = np.maximum(others - 1, 0) // 2, others // 2
    lo += lo >= rank
    hi += hi >= rank
    np.minimum(lo, others, out=lo)  # an entry alone in its group (others 0): any place of it; NaN below
    np.minimum(hi, others, out=hi)
    median = ((v[first + lo] + v[first + hi]) / 2).astype(np.float32)
    median[others < 1] = np.nan
    out[idx[order]] = median
    return out


def group_others_count(values: F32, group: I64) -> I64:
    """Return, per entry, how many other finite values its group has (0 in no group (-1))."""
    member = group >= 0
    finite = np.isfinite(values) & member
    size = np.bincount(group[finite], minlength=int(group.max(initial=-1)) + 1)
    out = np.zeros(values.shape, np.int64)
    out[member] = size[group[member]] - finite[member]
    return out


@dataclass(eq=False)
class _Smoothed:
    """One path kind's per-node state: the cascaded levels, the reference's peak and slow average, how long the
    node has been judgeable, its own usual level, and its claims above its peers'."""

    levels: F32  # (3, nodes)
    peak: F32
    slow_ref: F32
    settled_s: F32
    history_s: F32  # seconds of the node's own samples since its averages started
    ratio: F32  # the latest level / reference (NaN: not known)
    usual: F32  # the node's own level while judged and not slow (NaN: not yet): what corroborates a slowdown
    peers: I64  # its peers with a figure at its last sample, those whose claims are implausible left out
    above_s: F32  # seconds its level has stood over implausible_above of its peers', while they were steady
    implausible: B  # above them for implausible_after_s: its readings are nobody's reference
    onsets: int = 0  # nodes that became implausible since the start

    @classmethod
    def empty(cls, n: int) -> _Smoothed:
        nan = np.full(n, np.nan, np.float32)
        return cls(np.full((3, n), np.nan, np.float32), np.zeros(n, np.float32), nan.copy(),
                   np.zeros(n, np.float32), np.zeros(n, np.float32), nan.copy(), nan.copy(),
                   np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, dtype=bool))


def _blend(average: F32, value: F32, weight: F32, where: B) -> None:
    """Move ``average`` toward ``value`` by ``weight`` where ``where`` (seeded with ``value`` where NaN), in place."""
    moved = average + weight * (value - average)
    np.copyto(moved, value, where=np.isnan(average))
    np.copyto(average, moved, where=where)


@dataclass(eq=False)
class NodePathDetector:
    """Each node's EFA and NeuronLink traffic against its peers', over whole training steps."""

    state: FleetState
    params: NodePathParams = field(default_factory=NodePathParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        n = topo.n_nodes
        self.smoothed = {name: _Smoothed.empty(n) for name in PATH_SIGNALS}
        self.tracker = StateTracker.create(n, raise_after_s=[0.0, p.raise_after_s], clear_after_s=p.clear_after_s)
        self._ultraserver_group = np.where(topo.node_present, topo.node_ultraserver, -1).astype(np.int64)

    def peers(self, node_group: I64 | None) -> I64:
        """Return each node's peer group: its job (``node_group``, -1 for none) where it has one, else its
        UltraServer (among the nodes in no job); -1 for a node the inventory leaves out."""
        return peer_groups(self._ultraserver_group, node_group)

    def update(self, tick: int, signals: dict[str, NodeSignal], *, node_group: I64 | None = None) -> Transitions:
        """Fold in each path kind's node figures; return the nodes' changes of state."""
        n = self.tracker.state.size
        group = self.peers(node_group)
        candidate = np.zeros(n, np.int8)
        reasons = np.zeros(n, np.int32)
        evidence = np.zeros(n, dtype=bool)
        seconds = np.zeros(n, np.float32)
        for name, signal in signals.items():
            held = self._held(signal.dt_s)
            judged, slow, dropped = self._judge(self.smoothed[name], signal, group, held)
            np.bitwise_or(reasons, np.int32(_REASONS[name]), out=reasons, where=slow)
            np.bitwise_or(reasons, np.int32(Reason.OWN_DROP), out=reasons, where=dropped)
            candidate[slow] = NODE_PATHS_DEGRADED
            evidence |= judged
            np.fmax(seconds, held, out=seconds, where=judged)
        return self.tracker.update(candidate, reasons, evidence, tick, seconds=seconds)

    def _reference(self, level: F32, fresh: B, group: I64) -> tuple[F32, I64, B]:
        """Return each fresh node's reference (the median of its peers' levels without its own), how many peers
        it has, and which nodes claim over ``implausible_above`` of theirs: those are left out of every other
        node's reference, and keep the reference of all their peers (module docstring)."""
        heard = np.where(fresh, level, np.float32(np.nan)).astype(np.float32)
        everyone = group_others_median(heard, group)
        count = group_others_count(heard, group)
        with np.errstate(invalid="ignore"):
            above = fresh & (count >= 2) & (level > np.float32(self.params.implausible_above) * everyone)
        if not above.any():
            return everyone, count, above
        believed = np.where(above, np.float32(np.nan), heard).astype(np.float32)
        reference = np.where(above, everyone, group_others_median(believed, group)).astype(np.float32)
        peers = np.where(above, count, group_others_count(believed, group))
        return reference, peers, above

    def _held(self, dt_s: F32) -> F32:
        """Return the seconds each node's sample counts for: its interval, at most the node's own period
        (``core/cadence.py``; unknown: the interval), 0 where unknown.

        One sample after a gap is one interval's figure, not the gap's (issue 38: the first frames after a
        broker outage).  A NeuronLink's pace is a gauge over the agent's own interval, caught at its own place
        in a step whose traffic swings x16; weighted by a 35 s gap it was the whole of all three averages, and
        a node caught in the step's low beside peers caught in its high stood at 0.4 of them, slow and fallen
        from its usual level, in one analysis.  Its period is a median of its last intervals, each the time
        between frames over the sequence numbers between them: a gap moves it by nothing.
        """
        dt = np.fmax(np.nan_to_num(dt_s, nan=0.0), np.float32(0.0))
        held: F32 = np.fmin(dt, self.state.node_cadence.period_s).astype(np.float32)
        return held

    def _judge(self, s: _Smoothed, signal: NodeSignal, group: I64, dt: F32) -> tuple[B, B, B]:
        """Fold one path kind's sample, counted as ``dt`` seconds (``_held``), into its smoothed state; return
        (judged, slow, slow with its own level fallen too) per node."""
        p = self.params
        fresh = signal.fresh & np.isfinite(signal.rate) & (dt > 0)
        weight = (1.0 - np.exp(-dt / np.float32(p.smooth_s))).astype(np.float32)
        value = signal.rate.astype(np.float32)
        for stage in s.levels:
            _blend(stage, value, weight, fresh)
            value = stage
        level = s.levels[-1]
        np.add(s.history_s, dt, out=s.history_s, where=fresh)
        reference, peers, above = self._reference(level, fresh, group)
        np.copyto(s.peers, peers, where=fresh)
        known = fresh & np.isfinite(reference)
        decay = np.exp2(-dt / np.float32(p.peak_halflife_s)).astype(np.float32)
        np.copyto(s.peak, np.fmax(s.peak * decay, reference), where=known)
        steady_weight = (1.0 - np.exp(-dt / np.float32(p.steady_s))).astype(np.float32)
        _blend(s.slow_ref, reference, steady_weight, known)
        with np.errstate(invalid="ignore", divide="ignore"):
            busy = known & (reference > np.float32(p.idle_below) * s.peak) & (reference > 0)
            steady = np.abs(reference / s.slow_ref - np.float32(1.0)) <= np.float32(p.steady_within)
            ratio = (level / reference).astype(np.float32)
        settling = busy & steady
        np.copyto(s.settled_s, np.where(settling, s.settled_s + dt, np.float32(0.0)), where=fresh)
        settled = settling & (s.settled_s >= np.float32(p.settle_s)) & (s.history_s >= np.float32(p.warmup_s))
        self._implausible(s, settled & above, fresh, dt)
        judged = settled & ~above & (peers >= p.min_peers)
        np.copyto(s.ratio, ratio, where=fresh)
        np.copyto(s.ratio, np.float32(np.nan), where=fresh & ~busy)
        slow = judged & (ratio < np.float32(p.band))
        with np.errstate(invalid="ignore"):
            dropped = slow & (level < np.float32(p.own_drop_below) * s.usual)  # NaN (none learned) compares False
        # Its own level is learned while its peers say it is well, so a slowdown never becomes its usual.
        usual_weight = (1.0 - np.exp(-dt / np.float32(p.usual_s))).astype(np.float32)
        _blend(s.usual, level, usual_weight, judged & ~slow & (self.tracker.state == NODE_PATHS_HEALTHY))
        return judged, slow, dropped

    def _implausible(self, s: _Smoothed, claim: B, fresh: B, dt: F32) -> None:
        """Hold each node's claim over its peers' for ``implausible_after_s`` before it is counted implausible
        (a fresh sample that does not claim it ends the claim); count the nodes that become so."""
        np.copyto(s.above_s, np.where(claim, s.above_s + dt, np.float32(0.0)), where=fresh)
        flagged = (s.above_s > 0) & (s.above_s >= np.float32(self.params.implausible_after_s))
        s.onsets += int(np.count_nonzero(flagged & ~s.implausible))
        s.implausible = flagged

    def implausible(self) -> dict[str, I64]:
        """Return, per path kind, the nodes whose claim is implausible now (far over their peers')."""
        return {name: np.flatnonzero(s.implausible) for name, s in self.smoothed.items()}

    def implausible_onsets(self) -> dict[str, int]:
        """Return, per path kind, how many times a node became implausible since the start."""
        return {name: s.onsets for name, s in self.smoothed.items()}

    def unknown(self, present: B) -> dict[str, int]:
        """Return, per path kind, the ``present`` nodes that had fewer than ``min_peers`` peers with a figure
        at their last sample (or none yet): no peer judgement can be made of them."""
        return {name: int(np.count_nonzero(present & (s.peers < self.params.min_peers)))
                for name, s in self.smoothed.items()}

    def fractions(self, name: str) -> tuple[I64, F32]:
        """Return the nodes ``path_degraded`` for path kind ``name`` (``PATH_SIGNALS``) and the share of their
        peers' traffic each carries (in [0.05, 1]): what the throughput model prices their paths at."""
        bad = self.tracker.unhealthy()
        bad = bad[(self.tracker.reason[bad] & np.int32(_REASONS[name])) != 0]
        kept = np.clip(np.nan_to_num(self.smoothed[name].ratio[bad], nan=1.0), 0.05, 1.0).astype(np.float32)
        return bad, kept

    def slowest_by_ultraserver(self, name: str) -> F32:
        """Return each UltraServer's lowest node fraction for path kind ``name`` (1 where no node is slow)."""
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        nodes, kept = self.fractions(name)
        np.minimum.at(out, topo.node_ultraserver[nodes], kept)
        return out


def node_mean(values: F32, per_node: int) -> F32:
    """Return each node's mean of its entities' finite ``values`` (NaN where none is finite)."""
    grid = values.reshape(-1, per_node)
    total = np.zeros(grid.shape[0], np.float32)
    count = np.zeros(grid.shape[0], np.float32)
    # Column by column (at most the 16 ports or 2 link kinds of a node): a numpy reduction along a short row
    # pays per row, ~10 ms over rainier's 500k ports against ~1.5 ms this way.
    for column in grid.T:
        finite = np.isfinite(column)
        np.add(total, column, out=total, where=finite)
        count += finite
    with np.errstate(invalid="ignore", divide="ignore"):
        mean: F32 = np.where(count > 0, total / count, np.float32(np.nan)).astype(np.float32)
    return mean
