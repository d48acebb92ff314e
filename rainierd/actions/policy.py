"""The advisory policy: from one analysis's unhealthy entities, their jobs and the monitor's own condition, one
recommended action per node, priced, timed, held, braked and remembered (docs/actions.md has the rule, a worked
example and every default).

**Which action.** Each unhealthy entity's rule (``actions/rules.py``, the table the runbooks are written from) says
what its cause calls for once it has stood the hold, and what follows once it still stands a bound later (a reset
that did not restore, a silence grown long). Where a rule's step is **priced**, the cost decides: the node's causes
cost its job ``loss`` FLOP/s (the job model's charge, ``JobLoss.charged``), its job delivers ``job`` FLOP/s healthy;
leaving them costs ``loss x horizon_s``, moving the job costs ``job x restart_s``; the dear action when the first is
the larger, the cheap one otherwise (a node in no job, or with no job model, is not priced dear: an unknown cost is
not a large one; ``actions/pricing.py``). A node's advisory is the most disruptive its causes call for (``ACTIONS``
is ordered).

**When to act.** A drain chosen by its cost, for a job that checkpoints regularly (``actions/checkpoints.py``) and
is not stalled (``actions/pricing.py``), is proposed for the job's next checkpoint when the FLOP its causes cost
until then is less than the work since its last checkpoint that a restart now would redo (``Cost``, in every
advisory of a job: the share, both sides of the break-even, the checkpoint's time and both sides of the wait).

**When proposed.** An advisory is ``pending`` until the causes calling for its action have stood ``hold_s``
(each cause's onset is when this policy first saw it unhealthy, so a flap that clears and comes back starts
again), then ``proposed``, unless something correlated holds it back (``suppressed``, ``suppressed_by`` says
what): the monitor's feed lost (``feed_lost``), its broker session down (``broker_down``), the monitor
overloaded (``monitor_behind``), its UltraServer's cooling degraded or ``ultraserver_nodes`` of its nodes
needing action at once (``correlated:ultraserver:s<site>/u<index>``), node cooling on ``site_cooling_ultraservers``
UltraServers of its site (``correlated:site:s<id>``), its job in a checkpoint or restarting
(``job_phase:<phase>``), or a brake (``brake``).  A proposal stays proposed while any of its causes stands (a
later outage does not withdraw it); an escalation within the same budget raises its action at once, while a
proposed ``watch`` or reset that comes to need a cordon, drain or replace is braked afresh; once its causes
all clear it is ``expired`` and kept ``expired_keep_s``; an advisory never proposed is dropped when its causes
clear.

**The brakes** (``actions/brake.py``) admit the advisories ready to be proposed, most disruptive and
costliest first, within their bounds; the rest are ``suppressed`` by them.  Resets count in their own budget
(``reset_brake``), cordons, drains and replaces in the other; a watch in neither.  Existing proposals stay.

Pure: arrays and frozen values in, a frozen ``ActionsView`` out; the wall time is handed in.  The grouping is
vectorised over the unhealthy entities; per node it builds the advisory's few objects (only unhealthy nodes:
~1,000 entities cost a few ms, benchmarks/actions.py).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

import numpy as np

from rainierd._types import F64, I64, B
from rainierd.actions.brake import Brake
from rainierd.actions.checkpoints import CheckpointClock
from rainierd.actions.config import ActionConfig
from rainierd.actions.ledger import Ledger
from rainierd.actions.model import ACTIONS, RESETS, ActionsView, Advisory, Cause, Cost, LedgerRecord, Protected
from rainierd.actions.pricing import PricedJobs, action_text, cost_text
from rainierd.actions.rules import RULES, Priced, Step
from rainierd.core import (
    CHECKPOINT,
    CULPRIT_KINDS,
    PHASE_NAMES,
    RESTARTING,
    HealthView,
    JobLoss,
    JobMembership,
    JobPhases,
)
from rainierd.core.detect import STATE_NAMES, reason_names
from rainierd.fleet import Topology
from rainierd.fleet.ids import entity_id, hostname_of, node_id, site_id, ultraserver_id

WATCH, RESET_LINK, RESET_PORT, CORDON, DRAIN, REPLACE = (ACTIONS.index(a) for a in ACTIONS)
_RESET_CODES: Final = frozenset(ACTIONS.index(a) for a in RESETS)
# The kinds of entity that can be a node's own cause, in the order a node's causes are listed.
NODE_KINDS: Final = ("node", "chip", "neuronlink", "efa")
_KIND_BITS: Final = 40  # an entity's key: its kind's index above its id
_HELD_PHASES: Final = (CHECKPOINT, RESTARTING)


@dataclass(frozen=True, slots=True)
class MonitorCondition:
    """What the monitor knows of itself at an analysis: whether its broker session is up and it keeps up."""

    connected: bool = True
    overloaded: bool = False


@dataclass(frozen=True, slots=True)
class ActionTotals:
    """Cumulative counts since the monitor started: non-watch proposals by action (escalations included) and
    the brakes' trips (both budgets)."""

    proposed: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(ACTIONS, 0)))
    brake_trips: int = 0


def _budget(action: int) -> int:
    """Return which budget an action counts in: 0 none (watch), 1 the resets', 2 the brake's."""
    return 0 if action == WATCH else 1 if action in _RESET_CODES else 2


def entity_actions(kind: str, states: I64, reasons: I64, held_s: F64, config: ActionConfig,
                   ) -> tuple[I64, I64]:
    """Return the action (an index into ``ACTIONS``) each unhealthy entity of ``kind`` calls for when its cost
    is cheap, and when it is dear (the same where its rule's step is not priced), from its state
    (``STATE_NAMES[kind]`` index), reason mask and how long it has been unhealthy (``actions/rules.py``);
    vectorised over the entities."""
    names = STATE_NAMES[kind]
    cheap = np.full(states.size, WATCH, np.int64)
    dear = np.full(states.size, WATCH, np.int64)
    free = np.ones(states.size, bool)  # not yet matched by an earlier rule

    def put(where: B, step: Step) -> None:
        low, high = (step.cheap, step.dear) if isinstance(step, Priced) else (step, step)
        cheap[where], dear[where] = ACTIONS.index(low), ACTIONS.index(high)

    for rule in RULES:
        if rule.entity != kind:
            continue
        match = free & np.isin(states, [names.index(s) for s in rule.states])
        if rule.reasons_any:
            match &= (reasons & rule.reasons_any) != 0
        if not match.any():
            continue
        put(match, rule.first)
        if rule.after is not None and rule.then is not None:
            put(match & (held_s >= getattr(config, rule.after)), rule.then)
        free &= ~match
    return cheap, dear


@dataclass(slots=True)
class _NodeRecord:
    """One node's advisory from tick to tick."""

    first_s: float  # its earliest standing cause's onset
    state: str = "pending"
    action: int = WATCH
    proposed_s: float | None = None
    expired_s: float | None = None
    last: Advisory | None = None
    signature: tuple[object, ...] = ()  # what ``last`` was built from


@dataclass(frozen=True, eq=False)
class _Entities:
    """This tick's unhealthy node-level entities, sorted by node: one row each."""

    kind: I64  # index into NODE_KINDS
    id: I64
    node: I64
    state: I64
    reasons: I64
    since: F64
    cheap: I64  # the action it calls for when its node's causes are cheap, and when dear
    dear: I64
    flops: F64  # what the job model charges it (0: nothing, or no jobs)

    def rows(self, action: I64) -> I64:
        """Return every field of each row as one int64 row: a node's rows' bytes say whether it changed."""
        return np.stack([self.kind, self.id, self.state, self.reasons, self.since.view(np.int64),
                         self.flops.view(np.int64), action], axis=1)


@dataclass(frozen=True, eq=False)
class _Nodes:
    """This tick's unhealthy nodes, one row each, and where each one's entities are (``starts``, ``ends``)."""

    node: I64
    starts: I64
    ends: I64
    job: I64  # the node's job number (-1: none, or no jobs)
    flops: F64  # what its causes cost its job
    since: F64  # its earliest cause's onset
    dear: B  # its causes cost more over the horizon than a restart of its job does
    action: I64  # the most disruptive of its causes' actions
    hold_from: F64  # the onset of the causes calling for that action
    entity_action: I64  # each entity's action, as its node is priced (``_Entities`` order)


class ActionPolicy:
    """Turns each analysis into an ``ActionsView`` (module docstring); keeps its nodes' records, the brakes'
    windows, the jobs' checkpoint clocks and the ledger between analyses."""

    def __init__(self, topology: Topology, config: ActionConfig | None = None, *, ledger: Ledger | None = None,
                 ) -> None:
        self.topology = topo = topology
        self.config = config = config or ActionConfig()
        self.ledger = ledger or Ledger(flags=config.lemon_flags, days=config.lemon_days,
                                       history=config.ledger_history)
        self._node_site = topo.node_site
        self.brake = Brake(topo, max_nodes=config.brake_max_nodes, max_fraction=config.brake_max_fraction,
                           window_s=config.brake_window_s)
        self.reset_brake = Brake(topo, max_nodes=config.reset_brake_max_nodes,
                                 max_fraction=config.reset_brake_max_fraction, window_s=config.brake_window_s)
        self.checkpoints = CheckpointClock(intervals=config.checkpoint_intervals, jitter=config.checkpoint_jitter)
        self._keys = np.zeros(0, np.int64)  # every unhealthy entity's key, ascending, and when first seen
        self._first_s = np.zeros(0, np.float64)
        self._nodes: dict[int, _NodeRecord] = {}
        self._proposed: Counter[str] = Counter(dict.fromkeys(ACTIONS, 0))

    @property
    def totals(self) -> ActionTotals:
        """Return the cumulative proposals and brake trips (both budgets')."""
        return ActionTotals(MappingProxyType(dict(self._proposed)), self.brake.trips + self.reset_brake.trips)

    def update(
        self, health: HealthView, *, t_s: float, jobs: JobMembership | None = None, loss: JobLoss | None = None,
        phases: JobPhases | None = None, condition: MonitorCondition | None = None,
    ) -> ActionsView:
        """Fold in one analysis (``t_s``: its wall time) and return every node's advisory."""
        condition = condition or MonitorCondition()
        self.checkpoints.update(jobs, phases, t_s=t_s)
        priced = PricedJobs.of(jobs, loss)
        entities = self._entities(health, t_s, loss)
        nodes = self._group(entities, priced)
        action = nodes.entity_action
        held = self._correlated(health, entities, action, condition)
        phase_of_node = self._phases(jobs, phases)
        config = self.config
        seen: set[int] = set()
        candidates: list[tuple[int, float, int, int, int]] = []  # (-action, -flops, node, start, end)
        built: dict[int, tuple[str, str | None]] = {}
        for n, a, f, since, hold_from, s, e in zip(
                nodes.node.tolist(), nodes.action.tolist(), nodes.flops.tolist(), nodes.since.tolist(),
                nodes.hold_from.tolist(), nodes.starts.tolist(), nodes.ends.tolist(), strict=True):
            seen.add(n)
            rec = self._nodes.get(n)
            if rec is None or rec.state == "expired":
                rec = self._nodes[n] = _NodeRecord(first_s=since)
            rec.first_s = since
            if rec.state == "proposed" and a > rec.action and _budget(a) != _budget(rec.action):
                # Watching a node is not acting on it, and resetting one of its links moves no job: an action of
                # another budget it now needs is held and braked afresh (its causes' hold has stood already).
                rec.state, rec.proposed_s = "pending", None
            if rec.state == "proposed":
                if a > rec.action:  # an escalation within its budget is proposed at once: it is under action
                    self._flag(n, a, entities, slice(s, e), t_s=t_s)
                rec.action = max(rec.action, a)
                built[n] = ("proposed", None)
                continue
            rec.action = a
            by = held.get(n)
            if by is None and n in phase_of_node:
                by = f"job_phase:{phase_of_node[n]}"
            if t_s - hold_from < config.hold_s:
                built[n] = ("pending", None)
            elif by is not None:
                built[n] = ("suppressed", by)
            elif a == WATCH:
                rec.proposed_s = t_s
                built[n] = ("proposed", None)
            else:
                candidates.append((-a, -f, n, s, e))
                built[n] = ("pending", None)  # until its brake admits it
        self._propose(sorted(c for c in candidates if _budget(-c[0]) == 2), self.brake, built, entities, t_s)
        self._propose(sorted(c for c in candidates if _budget(-c[0]) == 1), self.reset_brake, built, entities, t_s)
        lemons = self._lemons(t_s)
        advisories = self._advisories(entities, nodes, action, built, priced, t_s=t_s,
                                      lemons={r.node for r in lemons})
        advisories.extend(self._expire(seen, t_s))
        advisories.sort(key=_order)
        return ActionsView(t_s, config.dry_run, tuple(advisories), self.brake.status(), lemons,
                           self.reset_brake.status())

    # -- the entities, their nodes and what holds them back ------------------------------

    def _entities(self, health: HealthView, t_s: float, loss: JobLoss | None) -> _Entities:
        """Return the node-level unhealthy entities, their node, actions and onset; remember when each was first
        seen (vectorised: keys merged with a sorted search)."""
        topo = self.topology
        parts: list[tuple[int, I64, I64, I64, I64]] = []
        node_of = {"node": None, "chip": topo.chip_node, "neuronlink": topo.link_node, "efa": topo.efa_node}
        for k, name in enumerate(NODE_KINDS):
            found = health.ids.get(name)
            if found is None or not found.size:
                continue
            to_node = node_of[name]
            parts.append((k, found.astype(np.int64), (found if to_node is None else to_node[found]).astype(np.int64),
                          health.states[name].astype(np.int64), health.reasons[name].astype(np.int64)))
        if not parts:
            self._keys, self._first_s = np.zeros(0, np.int64), np.zeros(0, np.float64)
            empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
            return _Entities(empty_i, empty_i, empty_i, empty_i, empty_i, empty_f, empty_i, empty_i, empty_f)
        kind = np.concatenate([np.full(p[1].size, p[0], np.int64) for p in parts])
        ids, node, state, reasons = (np.concatenate([p[i] for p in parts]) for i in range(1, 5))
        keys = (kind << _KIND_BITS) | ids
        at = np.minimum(np.searchsorted(self._keys, keys), max(self._keys.size - 1, 0))
        known = (self._keys[at] == keys) if self._keys.size else np.zeros(keys.size, bool)
        since = np.where(known, self._first_s[at] if self._keys.size else 0.0, t_s)
        order = np.argsort(keys)
        self._keys, self._first_s = keys[order], since[order]
        cheap = np.empty(keys.size, np.int64)
        dear = np.empty(keys.size, np.int64)
        flops = np.zeros(keys.size, np.float64)
        for k, name in enumerate(NODE_KINDS):
            rows = np.flatnonzero(kind == k)
            if not rows.size:
                continue
            cheap[rows], dear[rows] = entity_actions(name, state[rows], reasons[rows], t_s - since[rows], self.config)
            if loss is not None and name in CULPRIT_KINDS:
                flops[rows] = loss.charged(name, ids[rows])[1]
        by_node = np.lexsort((ids, kind, node))
        return _Entities(kind[by_node], ids[by_node], node[by_node], state[by_node], reasons[by_node],
                         since[by_node], cheap[by_node], dear[by_node], flops[by_node])

    def _group(self, entities: _Entities, priced: PricedJobs | None) -> _Nodes:
        """Return the unhealthy nodes, each priced (dear or cheap) and with its action and hold's start."""
        nodes = entities.node
        if not nodes.size:
            empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
            return _Nodes(empty_i, empty_i, empty_i, empty_i, empty_f, empty_f, np.zeros(0, bool), empty_i, empty_f,
                          empty_i)
        starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
        ends = np.r_[starts[1:], nodes.size].astype(np.int64)
        node = nodes[starts]
        flops = np.add.reduceat(entities.flops, starts)
        job = np.full(node.size, -1, np.int64)
        dear = np.zeros(node.size, bool)
        if priced is not None:
            job = priced.membership.node_job[node].astype(np.int64)
            dear = priced.dear(job, flops, self.config)
        action = np.where(np.repeat(dear, ends - starts), entities.dear, entities.cheap)
        node_action = np.maximum.reduceat(action, starts)
        # The hold runs from the onset of the causes calling for the node's action: a link that goes down on a
        # node watched for a while is held its own hold_s.
        calling = action == np.repeat(node_action, ends - starts)
        hold_from = np.minimum.reduceat(np.where(calling, entities.since, np.inf), starts)
        return _Nodes(node, starts, ends, job, flops, np.minimum.reduceat(entities.since, starts), dear,
                      node_action, hold_from, action)

    def _correlated(self, health: HealthView, entities: _Entities, action: I64, condition: MonitorCondition,
                    ) -> dict[int, str]:
        """Return, per node with a cause too widespread to be its own, what holds its advisory back."""
        if not entities.node.size:
            return {}
        topo, config = self.topology, self.config
        nodes = np.unique(entities.node)
        if health.feed.lost or not condition.connected or condition.overloaded:
            why = "feed_lost" if health.feed.lost else "broker_down" if not condition.connected else "monitor_behind"
            return dict.fromkeys(nodes.tolist(), why)
        held: dict[int, str] = {}
        # A site whose node cooling spans several UltraServers, or with UltraServers' cooling degraded there.
        cooling_us = topo.node_ultraserver[entities.node[(entities.kind == NODE_KINDS.index("node"))
                                                         & (entities.state == STATE_NAMES["node"].index(
                                                             "cooling_degraded"))]]
        us_cooling = health.ids.get("ultraserver", np.zeros(0, np.int64))
        hot_us = np.union1d(cooling_us, us_cooling)
        hot_sites = np.bincount(topo.ultraserver_site[hot_us], minlength=topo.n_sites)
        site = self._node_site[nodes]
        for n, s in zip(nodes.tolist(), site.tolist(), strict=True):
            if hot_sites[s] >= config.site_cooling_ultraservers:
                held[n] = f"correlated:site:s{s}"
        # An UltraServer whose cooling is degraded, or many of whose nodes need action at once (watched nodes,
        # a job's stragglers say, do not crowd it).
        us = topo.node_ultraserver[nodes]
        acting = topo.node_ultraserver[np.unique(entities.node[action != WATCH])]
        crowded = np.bincount(acting, minlength=topo.n_ultraservers) >= config.ultraserver_nodes
        crowded[us_cooling] = True
        for n, u in zip(nodes[crowded[us]].tolist(), us[crowded[us]].tolist(), strict=True):
            held.setdefault(n, f"correlated:ultraserver:{ultraserver_id(topo, u)}")
        return held

    @staticmethod
    def _phases(jobs: JobMembership | None, phases: JobPhases | None) -> dict[int, str]:
        """Return the nodes whose job is in a checkpoint or restarting, and the phase."""
        if jobs is None or phases is None or not phases.n_jobs or phases.n_jobs != jobs.n_jobs:
            return {}
        quiet = np.isin(phases.phase, _HELD_PHASES)
        if not quiet.any():
            return {}
        job = jobs.node_job.astype(np.int64)
        held = np.flatnonzero((job >= 0) & quiet[np.maximum(job, 0)])
        return {n: PHASE_NAMES[int(phases.phase[job[n]])] for n in held.tolist()}

    # -- the brakes ---------------------------------------------------------------------

    def _propose(self, candidates: list[tuple[int, float, int, int, int]], brake: Brake,
                 built: dict[int, tuple[str, str | None]], entities: _Entities, t_s: float) -> None:
        """Propose the candidates ``brake`` admits, most disruptive and costliest first; suppress the rest."""
        admitted = set(brake.admit([n for _, _, n, _, _ in candidates], t_s=t_s))
        for _, _, n, s, e in candidates:
            if n not in admitted:
                built[n] = ("suppressed", "brake")
                continue
            rec = self._nodes[n]
            rec.proposed_s = t_s
            built[n] = ("proposed", None)
            self._flag(n, rec.action, entities, slice(s, e), t_s=t_s)

    # -- advisories ---------------------------------------------------------------------

    def _flag(self, n: int, action: int, entities: _Entities, rows: slice, *, t_s: float) -> None:
        self._proposed[ACTIONS[action]] += 1
        self.ledger.flag(self.topology.node_name(n), t_s=t_s, action=ACTIONS[action],
                         cause=self._cause_line(entities, rows))

    def _cause_line(self, entities: _Entities, at: slice) -> str:
        """Return one line naming a node's causes, the worst first."""
        rows = sorted(range(at.start, at.stop), key=lambda i: -int(max(entities.cheap[i], entities.dear[i])))
        shown = [f"{self._name(int(entities.kind[i]), int(entities.id[i]))} "
                 f"{STATE_NAMES[NODE_KINDS[int(entities.kind[i])]][int(entities.state[i])]}" for i in rows[:3]]
        more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
        return ", ".join(shown) + more

    def _name(self, kind: int, entity: int) -> str:
        """Return what an SRE reads for an entity: its canonical id (docs/ids.md)."""
        return entity_id(self.topology, NODE_KINDS[kind], entity)

    def _advisories(self, entities: _Entities, nodes: _Nodes, action: I64, built: dict[int, tuple[str, str | None]],
                    priced: PricedJobs | None, *, t_s: float, lemons: set[str]) -> list[Advisory]:
        """Return each unhealthy node's advisory, in its state of this tick."""
        rows = entities.rows(action)
        clocks = {} if priced is None else {j: self.checkpoints.of(priced.membership.ids[j])
                                             for j in set(nodes.job.tolist()) if j >= 0}
        advisories = []
        for n, s, e, j, f, dear in zip(nodes.node.tolist(), nodes.starts.tolist(), nodes.ends.tolist(),
                                       nodes.job.tolist(), nodes.flops.tolist(), nodes.dear.tolist(), strict=True):
            rec = self._nodes[n]
            rec.state, by = built[n]
            job = priced.membership.ids[j] if priced is not None and j >= 0 else None
            lemon = self.topology.node_name(n) in lemons
            healthy = float(priced.healthy[j]) if priced is not None and j >= 0 else None
            # An advisory whose every part is as last tick is last tick's object: a standing incident of a
            # thousand nodes costs a comparison a node, not a thousand rebuilt advisories.
            signature = (rows[s:e].tobytes(), rec.state, by, rec.action, rec.proposed_s, job, lemon, healthy,
                         clocks.get(j))
            if rec.last is None or signature != rec.signature:
                cost = None if priced is None or j < 0 else priced.cost(
                    j, f, self.config, dear=dear and rec.action == DRAIN, clock=clocks.get(j), t_s=t_s)
                rec.last = self._advisory(n, rec, entities, slice(s, e), by=by, job=job, lemon=lemon, cost=cost)
                rec.signature = signature
            advisories.append(rec.last)
        return advisories

    def _advisory(self, n: int, rec: _NodeRecord, entities: _Entities, rows: slice, *, by: str | None,
                  job: str | None, lemon: bool, cost: Cost | None) -> Advisory:
        topo = self.topology
        s, e = rows.start, rows.stop
        causes = tuple(
            Cause(NODE_KINDS[k], i, self._name(k, i), STATE_NAMES[NODE_KINDS[k]][st], _reason_names(r), since)
            for k, i, st, r, since in zip(entities.kind[s:e].tolist(), entities.id[s:e].tolist(),
                                          entities.state[s:e].tolist(), entities.reasons[s:e].tolist(),
                                          entities.since[s:e].tolist(), strict=True))
        protects = () if job is None else (Protected(job, float(entities.flops[s:e].sum())),)
        held = {"pending": f"pending until held {self.config.hold_s:.0f} s",
                "suppressed": f"held back by {by}", "proposed": "proposed"}[rec.state]
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rec.first_s))
        reason = (f"{action_text(ACTIONS[rec.action], cost)}: {self._cause_line(entities, rows)} since {since}; "
                  f"{held}; {cost_text(job, cost, self.config)}")
        us = int(topo.node_ultraserver[n])
        return Advisory(node_id(topo, n), n, site_id(int(topo.ultraserver_site[us])), ultraserver_id(topo, us),
                        ACTIONS[rec.action], rec.state, reason, causes, protects, rec.first_s, rec.proposed_s, None,
                        by, lemon, hostname_of(topo, n), cost)

    def _expire(self, seen: set[int], t_s: float) -> list[Advisory]:
        """Expire the proposals whose causes all cleared, drop the rest of the cleared, and return the expired
        still kept."""
        out = []
        for n in [n for n in self._nodes if n not in seen]:
            rec = self._nodes[n]
            if rec.proposed_s is None or rec.last is None:
                del self._nodes[n]
                continue
            if rec.state != "expired":
                rec.state, rec.expired_s = "expired", t_s
                rec.last = _expired(rec.last, t_s)
            if rec.expired_s is not None and t_s - rec.expired_s >= self.config.expired_keep_s:
                del self._nodes[n]
                continue
            out.append(rec.last)
        return out

    def _lemons(self, t_s: float) -> tuple[LedgerRecord, ...]:
        self.ledger.prune(t_s)
        return self.ledger.lemons()


@functools.cache
def _reason_names(mask: int) -> tuple[str, ...]:
    """Return the names of the reasons in ``mask`` (few distinct masks: remembered)."""
    return tuple(reason_names(mask))


def _order(advisory: Advisory) -> tuple[bool, int, float, int]:
    """Return where an advisory sorts: standing before expired, most disruptive, then costliest, first."""
    return (advisory.state == "expired", -ACTIONS.index(advisory.action), -advisory.protects_flops,
            advisory.index)


def _expired(advisory: Advisory, t_s: float) -> Advisory:
    return replace(advisory, state="expired", expired_s=t_s, suppressed_by=None,
                   reason=f"expired: its causes cleared; was {advisory.reason}")
