"""The advisory policy: from one analysis's unhealthy entities, their jobs and the monitor's own condition, one
recommended action per node, held, braked and remembered (docs/actions.md has the table and every default).

**Which action.** Each unhealthy entity calls for the least disruptive action that fixes it
(``entity_actions``): a throttled or straggling chip is watched; a degraded NeuronLink is reset, and drained
once it is down or still degraded ``link_escalate_s`` after its onset; an EFA port degraded or down is
drained (traffic moves off a slow path only with the job), as is one whose device was reported gone (stale); a
failed chip is drained (its executions failing or timing out, its device gone), and replaced when its HBM or
its SRAM reported an uncorrectable ECC error; a node whose cooling is degraded is cordoned; a node whose paths are
slow against its peers' is watched, and drained once its own traffic fell too (``own_drop``: a judgement by its
peers alone is one a lying peer could make); a silent node or chip is watched, and cordoned once silent
``silent_long_s``.  A node's advisory is the most disruptive its causes call
for (``ACTIONS`` is ordered).

**When.** An advisory is ``pending`` until the causes calling for its action have stood ``hold_s`` (each
cause's onset is when this policy first saw it unhealthy, so a flap that clears and comes back starts again), then
``proposed``, unless something correlated holds it back (``suppressed``, ``suppressed_by`` says what): the
monitor's feed lost (``feed_lost``), its broker session down (``broker_down``), the monitor overloaded
(``monitor_behind``), its UltraServer's cooling degraded or ``ultraserver_nodes`` of its nodes needing action
at once (``correlated:ultraserver:s<site>/u<index>``), node cooling on ``site_cooling_ultraservers`` UltraServers of its
site (``correlated:site:s<id>``), its job in a checkpoint or restarting (``job_phase:<phase>``), or the
brake (``brake``).  A proposal stays proposed while any of its causes stands (a later outage does not
withdraw it; an escalation raises its action, but a proposed ``watch`` that comes to need an action is held
and braked afresh); once they all clear it is ``expired`` and kept
``expired_keep_s``; an advisory never proposed is dropped when its causes clear.

**The brake** (``actions/brake.py``) admits the non-watch advisories ready to be proposed, most disruptive
and costliest first, within its bounds; the rest are ``suppressed`` by it.  Existing proposals stay.

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

from rainierd._types import F64, I64
from rainierd.actions.brake import Brake
from rainierd.actions.config import ActionConfig
from rainierd.actions.ledger import Ledger
from rainierd.actions.model import ACTIONS, ActionsView, Advisory, Cause, LedgerRecord, Protected
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
from rainierd.core.detect import STATE_NAMES, Reason, reason_names
from rainierd.fleet import Topology
from rainierd.fleet.ids import entity_id, hostname_of, node_id, site_id, ultraserver_id
from rainierd.fleet.units import flops_text

WATCH, RESET_LINK, DRAIN, CORDON, REPLACE = (ACTIONS.index(a) for a in ACTIONS)
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
    the brake's trips."""

    proposed: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(ACTIONS, 0)))
    brake_trips: int = 0


def entity_actions(kind: str, states: I64, reasons: I64, held_s: F64, config: ActionConfig) -> I64:
    """Return the action (an index into ``ACTIONS``) each unhealthy entity of ``kind`` calls for, from its state
    (``STATE_NAMES[kind]`` index), reason mask and how long it has been unhealthy; vectorised."""
    names = STATE_NAMES[kind]
    out = np.full(states.size, WATCH, np.int64)

    def state(name: str) -> np.ndarray:
        return np.asarray(states == names.index(name))

    if kind == "neuronlink":
        out[state("degraded")] = RESET_LINK
        out[state("down") | (state("degraded") & (held_s >= config.link_escalate_s))] = DRAIN
    elif kind == "efa":
        out[state("degraded") | state("down") | state("stale")] = DRAIN
    elif kind == "chip":
        failed = state("failed")
        out[failed] = DRAIN
        out[failed & ((reasons & int(Reason.ECC_UNCORRECTED | Reason.SRAM_ECC_UNCORRECTED)) != 0)] = REPLACE
        out[state("stale") & (held_s >= config.silent_long_s)] = CORDON
    elif kind == "node":
        out[state("cooling_degraded")] = CORDON
        # Slow against its peers alone is watched: a peer that inflates its traffic could have made it look so.
        # Its own level fallen too corroborates it (detect/nodepaths.py); its own ports' and links' states call
        # for their own actions (docs/actions.md, "Evidence of its own").
        out[state("path_degraded") & ((reasons & int(Reason.OWN_DROP)) != 0)] = DRAIN
        out[state("lost") & (held_s >= config.silent_long_s)] = CORDON
    return out


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
    action: I64
    flops: F64  # what the job model charges it (0: nothing, or no jobs)

    def rows(self) -> I64:
        """Return every field of each row as one int64 row: a node's rows' bytes say whether it changed."""
        return np.stack([self.kind, self.id, self.state, self.reasons, self.since.view(np.int64),
                         self.flops.view(np.int64), self.action], axis=1)


class ActionPolicy:
    """Turns each analysis into an ``ActionsView`` (module docstring); keeps its nodes' records, the brake's
    window and the ledger between analyses."""

    def __init__(self, topology: Topology, config: ActionConfig | None = None, *, ledger: Ledger | None = None,
                 ) -> None:
        self.topology = topo = topology
        self.config = config = config or ActionConfig()
        self.ledger = ledger or Ledger(flags=config.lemon_flags, days=config.lemon_days,
                                       history=config.ledger_history)
        self._node_site = topo.node_site
        self.brake = Brake(topo, config)
        self._keys = np.zeros(0, np.int64)  # every unhealthy entity's key, ascending, and when first seen
        self._first_s = np.zeros(0, np.float64)
        self._nodes: dict[int, _NodeRecord] = {}
        self._proposed: Counter[str] = Counter(dict.fromkeys(ACTIONS, 0))

    @property
    def totals(self) -> ActionTotals:
        """Return the cumulative proposals and brake trips."""
        return ActionTotals(MappingProxyType(dict(self._proposed)), self.brake.trips)

    def update(
        self, health: HealthView, *, t_s: float, jobs: JobMembership | None = None, loss: JobLoss | None = None,
        phases: JobPhases | None = None, condition: MonitorCondition | None = None,
    ) -> ActionsView:
        """Fold in one analysis (``t_s``: its wall time) and return every node's advisory."""
        condition = condition or MonitorCondition()
        entities = self._entities(health, t_s, loss)
        held = self._correlated(health, entities, condition)
        phase_of_node = self._phases(jobs, phases)
        config = self.config
        nodes = entities.node
        starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]]) if nodes.size else np.zeros(0, np.int64)
        ends = np.r_[starts[1:], nodes.size].astype(np.int64) if nodes.size else starts
        node_action = np.maximum.reduceat(entities.action, starts) if nodes.size else np.zeros(0, np.int64)
        node_flops = np.add.reduceat(entities.flops, starts) if nodes.size else np.zeros(0, np.float64)
        node_since = np.minimum.reduceat(entities.since, starts) if nodes.size else np.zeros(0, np.float64)
        # The hold runs from the onset of the causes calling for the node's action: a link that goes down on a
        # node watched for a while is held its own hold_s.
        calling = entities.action == np.repeat(node_action, ends - starts)
        held_since = (np.minimum.reduceat(np.where(calling, entities.since, np.inf), starts) if nodes.size
                      else np.zeros(0, np.float64))
        seen: set[int] = set()
        candidates: list[tuple[int, float, int, int, int]] = []  # (-action, -flops, node, start, end)
        built: dict[int, tuple[str, str | None]] = {}
        for n, a, f, since, hold_from, s, e in zip(
                nodes[starts].tolist(), node_action.tolist(), node_flops.tolist(), node_since.tolist(),
                held_since.tolist(), starts.tolist(), ends.tolist(), strict=True):
            seen.add(n)
            rec = self._nodes.get(n)
            if rec is None or rec.state == "expired":
                rec = self._nodes[n] = _NodeRecord(first_s=since)
            rec.first_s = since
            if rec.state == "proposed" and rec.action == WATCH and a != WATCH:
                # Watching a node is not acting on it: an action it now needs is held and braked afresh.
                rec.state, rec.proposed_s = "pending", None
            if rec.state == "proposed":
                if a > rec.action:  # an escalation is proposed at once: the node is under action
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
                built[n] = ("pending", None)  # until the brake admits it
        self._propose(sorted(candidates), built, entities, t_s)
        lemons = self._lemons(t_s)
        advisories = self._advisories(entities, starts, ends, built, jobs=jobs, lemons={r.node for r in lemons})
        advisories.extend(self._expire(seen, t_s))
        advisories.sort(key=_order)
        return ActionsView(t_s, config.dry_run, tuple(advisories), self.brake.status(), lemons)

    # -- the entities and what holds them back ------------------------------------------

    def _entities(self, health: HealthView, t_s: float, loss: JobLoss | None) -> _Entities:
        """Return the node-level unhealthy entities, their node, action and onset; remember when each was first
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
            return _Entities(empty_i, empty_i, empty_i, empty_i, empty_i, empty_f, empty_i, empty_f)
        kind = np.concatenate([np.full(p[1].size, p[0], np.int64) for p in parts])
        ids, node, state, reasons = (np.concatenate([p[i] for p in parts]) for i in range(1, 5))
        keys = (kind << _KIND_BITS) | ids
        at = np.minimum(np.searchsorted(self._keys, keys), max(self._keys.size - 1, 0))
        known = (self._keys[at] == keys) if self._keys.size else np.zeros(keys.size, bool)
        since = np.where(known, self._first_s[at] if self._keys.size else 0.0, t_s)
        order = np.argsort(keys)
        self._keys, self._first_s = keys[order], since[order]
        action = np.empty(keys.size, np.int64)
        flops = np.zeros(keys.size, np.float64)
        for k, name in enumerate(NODE_KINDS):
            rows = np.flatnonzero(kind == k)
            if not rows.size:
                continue
            action[rows] = entity_actions(name, state[rows], reasons[rows], t_s - since[rows], self.config)
            if loss is not None and name in CULPRIT_KINDS:
                flops[rows] = loss.charged(name, ids[rows])[1]
        by_node = np.lexsort((ids, kind, node))
        return _Entities(kind[by_node], ids[by_node], node[by_node], state[by_node], reasons[by_node],
                         since[by_node], action[by_node], flops[by_node])

    def _correlated(self, health: HealthView, entities: _Entities, condition: MonitorCondition) -> dict[int, str]:
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
        acting = topo.node_ultraserver[np.unique(entities.node[entities.action != WATCH])]
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

    # -- the brake ----------------------------------------------------------------------

    def _propose(self, candidates: list[tuple[int, float, int, int, int]], built: dict[int, tuple[str, str | None]],
                 entities: _Entities, t_s: float) -> None:
        """Propose the candidates the brake admits, most disruptive and costliest first; suppress the rest."""
        admitted = set(self.brake.admit([n for _, _, n, _, _ in candidates], t_s=t_s))
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
        rows = sorted(range(at.start, at.stop), key=lambda i: -int(entities.action[i]))
        shown = [f"{self._name(int(entities.kind[i]), int(entities.id[i]))} "
                 f"{STATE_NAMES[NODE_KINDS[int(entities.kind[i])]][int(entities.state[i])]}" for i in rows[:3]]
        more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
        return ", ".join(shown) + more

    def _name(self, kind: int, entity: int) -> str:
        """Return what an SRE reads for an entity: its canonical id (docs/ids.md)."""
        return entity_id(self.topology, NODE_KINDS[kind], entity)

    def _advisories(self, entities: _Entities, starts: I64, ends: I64, built: dict[int, tuple[str, str | None]],
                    *, jobs: JobMembership | None, lemons: set[str]) -> list[Advisory]:
        """Return each unhealthy node's advisory, in its state of this tick."""
        nodes = entities.node
        node_job = (jobs.node_job[nodes[starts]].astype(np.int64) if jobs is not None and jobs.node_job.size
                    else np.full(starts.size, -1, np.int64))
        rows = entities.rows()
        advisories = []
        for n, s, e, j in zip(nodes[starts].tolist(), starts.tolist(), ends.tolist(), node_job.tolist(),
                              strict=True):
            rec = self._nodes[n]
            rec.state, by = built[n]
            job = jobs.ids[j] if jobs is not None and j >= 0 else None
            lemon = self.topology.node_name(n) in lemons
            # An advisory whose every part is as last tick is last tick's object: a standing incident of a
            # thousand nodes costs a comparison a node, not a thousand rebuilt advisories.
            signature = (rows[s:e].tobytes(), rec.state, by, rec.action, rec.proposed_s, job, lemon)
            if rec.last is None or signature != rec.signature:
                rec.last = self._advisory(n, rec, entities, slice(s, e), by=by, job=job, lemon=lemon)
                rec.signature = signature
            advisories.append(rec.last)
        return advisories

    def _advisory(self, n: int, rec: _NodeRecord, entities: _Entities, rows: slice, *, by: str | None,
                  job: str | None, lemon: bool) -> Advisory:
        topo = self.topology
        s, e = rows.start, rows.stop
        causes = tuple(
            Cause(NODE_KINDS[k], i, self._name(k, i), STATE_NAMES[NODE_KINDS[k]][st], _reason_names(r), since)
            for k, i, st, r, since in zip(entities.kind[s:e].tolist(), entities.id[s:e].tolist(),
                                          entities.state[s:e].tolist(), entities.reasons[s:e].tolist(),
                                          entities.since[s:e].tolist(), strict=True))
        protects = () if job is None else (Protected(job, float(entities.flops[s:e].sum())),)
        action = ACTIONS[rec.action]
        held = {"pending": f"pending until held {self.config.hold_s:.0f} s",
                "suppressed": f"held back by {by}", "proposed": "proposed"}[rec.state]
        cost = (f"; protects {protects[0].job} ({flops_text(protects[0].flops)} lost to it)" if protects
                else "; in no job")
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rec.first_s))
        reason = f"{action}: {self._cause_line(entities, rows)} since {since}; {held}{cost}"
        us = int(topo.node_ultraserver[n])
        return Advisory(node_id(topo, n), n, site_id(int(topo.ultraserver_site[us])), ultraserver_id(topo, us),
                        action, rec.state, reason, causes, protects, rec.first_s, rec.proposed_s, None, by, lemon,
                        hostname_of(topo, n))

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
