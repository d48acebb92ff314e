"""The one table of rejection rules, for every frame a window holds: node
frames, batches and site (facility) frames alike, so each reason is defined
once (docs/wire-format.md lists them).

A rule looks at a whole ``Window`` and returns which of its frames fail it;
``judge`` applies the table in order and charges each frame to the first rule
it fails, before anything changes.  What a frame is checked against (how many
entities there are, which exist, which site and UltraServer each belongs to,
which ids each owns) is its family's ``Family``.  The sequence rules
(``stale_seq``, ``seq_jump``) are the accounting's: they depend on the stream,
not on the frame alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from rainierd._types import I64, B
from rainierd.core.ingest._window import Window
from rainierd.fleet import Topology
from rainierd.wire import BUCKETS, FACILITY_DTYPE, ID_FIELDS, RECORD_DTYPES, float_fields

# Whatever the receiving clock, no sample is taken after the year 5138: beyond, t_s is garbage.
LATEST_PLAUSIBLE_S: Final = 1e11
_FLOATS: Final = {kind: float_fields(dtype) for kind, dtype in (*RECORD_DTYPES.items(), ("facility", FACILITY_DTYPE))}
_BITS: Final = {kind: {name: 1 << i for i, name in enumerate(dtype.names or ())}
                for kind, dtype in (*RECORD_DTYPES.items(), ("facility", FACILITY_DTYPE))}


@dataclass(frozen=True, eq=False)
class Owned:
    """The records of one kind that carry ids: ``per`` a node, owned by ``owner[id]``, in one contiguous run."""

    per: int
    owner: I64


@dataclass(frozen=True, eq=False)
class Family:
    """What the frames of one family (nodes, or sites) are checked against."""

    count: int  # entities: ids 0 .. count - 1
    present: B  # which of them the inventory holds
    site: I64  # each entity's site
    ultraserver: I64  # each entity's UltraServer (-1: not meaningful)
    bucket: I64  # each entity's topic bucket (-1: not meaningful)
    owned: dict[str, Owned] = field(default_factory=dict)  # kinds whose records name their entity's ids
    expected: dict[str, int] = field(default_factory=dict)  # kinds a frame carries exactly this many of

    @classmethod
    def nodes(cls, topo: Topology) -> Family:
        """Return what node frames are checked against: the nodes, their chips, links and EFA ports."""
        owned = {"chips": Owned(topo.chips_per_node, topo.chip_node),
                 "links": Owned(topo.links_per_node, topo.link_node),
                 "efa": Owned(topo.efa_ports_per_node, topo.efa_node)}
        assert set(owned) == {kind for kind, name in ID_FIELDS.items() if name is not None}
        buckets = np.asarray(topo.node_ultraserver, np.int64) % BUCKETS
        return cls(topo.n_nodes, topo.node_present, topo.node_site, topo.node_ultraserver, buckets, owned)

    @classmethod
    def sites(cls, topo: Topology) -> Family:
        """Return what facility frames are checked against: the sites, one facility record each."""
        every = np.arange(topo.n_sites, dtype=np.int64)
        none = np.full(topo.n_sites, -1, np.int64)
        return cls(topo.n_sites, np.ones(topo.n_sites, bool), every, none, none, expected={"facility": 1})


class _Case:
    """One window under judgement, with what several rules share worked out once."""

    def __init__(self, w: Window, family: Family, max_clock_skew_s: float) -> None:
        self.w, self.family, self.max_clock_skew_s = w, family, max_clock_skew_s
        self.outside = (w.entity >= family.count) | (w.entity < 0)
        self.entity = np.where(self.outside, 0, w.entity)  # a safe index: outside entities fail unknown_node
        self._frame_of: dict[str, I64] = {}
        self._ids: dict[str, tuple[I64, B] | None] = {}

    def frame_of(self, kind: str) -> I64:
        """Return the entry each record of ``kind`` belongs to."""
        if kind not in self._frame_of:
            self._frame_of[kind] = np.repeat(np.arange(self.w.size), self.w.counts[kind])
        return self._frame_of[kind]

    def ids(self, kind: str) -> tuple[I64, B] | None:
        """Return (ids as int64, which are not the frame's entity's) for ``kind``; None if all are, in order."""
        if kind in self._ids:
            return self._ids[kind]
        w, owned = self.w, self.family.owned[kind]
        per, n = owned.per, w.size
        column = w.columns[kind][ID_FIELDS[kind]]  # type: ignore[index]
        result: tuple[I64, B] | None = None
        if bool((w.counts[kind] == per).all()) and bool(
                (column.reshape(n, per) - (self.entity * per)[:, None] == np.arange(per)).all()):
            # The usual frame carries its node's whole complement in id
            # order: one comparison proves every id owned and none twice.
            w.complete.add(kind)
        else:
            ids = column.astype(np.int64)
            mine = self.entity[self.frame_of(kind)]
            known = ids < owned.owner.size
            wrong = ~known
            wrong[known] = owned.owner[ids[known]] != mine[known]
            result = ids, wrong
        self._ids[kind] = result
        return result

    def kinds(self) -> list[str]:
        """Return the record kinds some frame of the window carries."""
        return [kind for kind, counts in self.w.counts.items() if counts.any()]


def _unknown_node(c: _Case) -> B:
    """The entity is beyond the fleet, or not in the inventory."""
    return c.outside | ~c.family.present[c.entity]


def _topic_mismatch(c: _Case) -> B:
    """The topic is of another family, or names another site, bucket, UltraServer or node than the frame.

    A batch on bucket 2's topic reaches bucket 2's shard only, so a node of bucket 3 in it is not that
    shard's to apply (and would reach no shard that owns it).
    """
    w, f = c.w, c.family
    mismatch: B = ~w.topic_fits | ((w.want_site >= 0) & (f.site[c.entity] != w.want_site)) | (
        (w.want_ultraserver >= 0) & (f.ultraserver[c.entity] != w.want_ultraserver)) | (
        (w.want_node >= 0) & (c.entity != w.want_node)) | (
        (w.want_bucket >= 0) & (f.bucket[c.entity] != w.want_bucket))
    return mismatch


def _duplicate_node(c: _Case) -> B:
    """One batch lists the node (or site) more than once: every entry of it is refused, as neither can be
    told the genuine one (a node's frames come one per batch; consecutive frames, in consecutive batches)."""
    w = c.w
    if w.size < 2 or bool((w.part[1:] != w.part[:-1]).all()):
        return np.zeros(w.size, dtype=bool)  # one entry a part (node frames): nothing to compare
    key = w.part * (c.family.count + 1) + c.entity
    ordered = np.sort(key)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if not twice.size:
        return np.zeros(w.size, dtype=bool)
    return np.isin(key, twice)


def _bad_header(c: _Case) -> B:
    """A kind the family carries a fixed number of (a site's one facility record) comes in another number."""
    bad = np.zeros(c.w.size, dtype=bool)
    for kind, count in c.family.expected.items():
        bad |= c.w.counts[kind] != count
    return bad


def _non_finite(c: _Case) -> B:
    """The sample time, or a float field of a record, is NaN or infinite."""
    bad = ~np.isfinite(c.w.t_s)
    for kind in c.kinds():
        known = c.w.known.get(kind)
        for name in _FLOATS[kind]:
            if isinstance(known, int) and not known & _BITS[kind][name]:
                continue  # no frame of the window carries it: nothing to read (its column would be zeros)
            finite = np.isfinite(c.w.columns[kind][name])
            if not finite.all():
                bad[c.frame_of(kind)[~finite]] = True
    return bad


def _clock_skew(c: _Case) -> B:
    """The sample time is more than ``max_clock_skew_s`` from the monitor's wall clock at receipt, or absurd.

    A clock that far off would misdate every rate and lag.
    """
    with np.errstate(invalid="ignore"):
        return (np.abs(c.w.rx_wall_s - c.w.t_s) > c.max_clock_skew_s) | (np.abs(c.w.t_s) > LATEST_PLAUSIBLE_S)


def _unknown_id(c: _Case) -> B:
    """A record names an id that is not its frame's entity's (another node's, or beyond the fleet)."""
    bad = np.zeros(c.w.size, dtype=bool)
    for kind in c.kinds():
        if kind in c.family.owned and (ids := c.ids(kind)) is not None:
            bad[c.frame_of(kind)[ids[1]]] = True
    return bad


def _duplicate_id(c: _Case) -> B:
    """A frame lists one of its entity's ids twice."""
    bad = np.zeros(c.w.size, dtype=bool)
    for kind in c.kinds():
        if kind not in c.family.owned or (ids := c.ids(kind)) is None:
            continue
        per, (every, wrong) = c.family.owned[kind].per, ids
        owned = ~wrong
        frame_of = c.frame_of(kind)[owned]
        # Ids of a node are one contiguous range, so (frame, id - base) is
        # dense: an id listed twice in one frame shows as a count of 2.
        key = frame_of * per + (every[owned] - c.entity[frame_of] * per)
        twice = np.bincount(key, minlength=c.w.size * per)[key] > 1
        bad[frame_of[twice]] = True
    return bad


RULES: Final[dict[str, Callable[[_Case], B]]] = {
    "unknown_node": _unknown_node,
    "topic_mismatch": _topic_mismatch,
    "duplicate_node": _duplicate_node,
    "bad_header": _bad_header,
    "non_finite": _non_finite,
    "clock_skew": _clock_skew,
    "unknown_id": _unknown_id,
    "duplicate_id": _duplicate_id,
}
"""Every rule a frame must pass, in the order a frame that fails several is charged to the first."""
REASONS: Final = tuple(RULES)


def judge(w: Window, family: Family, *, max_clock_skew_s: float, rejected: Counter[str]) -> B:
    """Return which frames of ``w`` pass every rule; count the others in ``rejected`` by their first reason.

    Sets ``w.complete`` to the kinds whose records are every frame's whole
    complement, in id order (the store takes those through slices).
    """
    case = _Case(w, family, max_clock_skew_s)
    bad = np.zeros(w.size, dtype=bool)
    for reason, rule in RULES.items():
        newly = rule(case) & ~bad
        if newly.any():
            rejected[reason] += int(newly.sum())
            bad |= newly
    return ~bad
