"""The throughput model per training job: what each job loses, to which cause
and to which entity, wherever in the job the fault is (docs/throughput-model.md,
"Per job", has the formula and a worked example that tests/unit/core/test_jobmodel.py checks).

It exists because a job is a synchronous group: its step waits for its
slowest member chip and its slowest collective path (NeuronLink, EFA)
wherever they are, so one degraded link in one UltraServer costs every chip
of a job spanning three.  ``core/model.py`` charges each fault to its own
UltraServer only, which reports a third of such a job's loss.

The step formula is ``rainierd/fleet/pace.py``'s, priced with each job's slowest
member and paths: per node first (a node belongs to one job), then per job,
so a fault on a node of another job, even in the same UltraServer, is never
charged to this one.  A NeuronLink counts for a job when both its ends are
on the job's nodes.  A job with a failed or silent member stalls: it loses
its healthy share of its peak.  Nodes in no job are ``unallocated``: idle
capacity, never a loss.

Pure: the throughput, the detectors and the membership in, one frozen
``JobLoss`` out; vectorised over jobs and nodes (no Python loop over either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd._types import F32, F64, I64, B, Floats
from rainierd.core.detect import FAILED, HEALTHY, STALE, STRAGGLER, THROTTLED, FleetDetector
from rainierd.core.jobphase import PhaseParams, quiet_groups
from rainierd.core.jobs import JobMembership
from rainierd.core.model import HealthyShares, ModelParams, group_loss
from rainierd.core.throughput import Throughput
from rainierd.fleet import CAUSES

# What a culprit can be: ``JobLoss.culprit_kind`` indexes this tuple.
CULPRIT_KINDS: Final = ("chip", "neuronlink", "efa", "node")
_CHIP, _NEURONLINK, _EFA, _NODE = range(len(CULPRIT_KINDS))
# The step's terms a loss comes from, and the causes each one's loss goes to (``pace.CAUSES``' names):
# ``_culprits`` returns its rows in this order.
TERMS: Final = (("compute", ("straggler", "thermal_throttle")), ("neuronlink", ("degraded_neuronlink",)),
                ("efa", ("degraded_efa",)), ("stall", ("failed_chip", "stale_telemetry")))
TOP_CULPRITS: Final = 5  # culprits kept per job, the costliest first

# The same floor core/model.py puts under a speed or a path fraction (a dead path is a stall, not a 0).
_FLOOR: Final = 0.05
# When a job is quiet (a checkpoint, a restart): the phase tracker's rule, with the defaults the monitor runs it with.
_PHASES: Final = PhaseParams()


@dataclass(frozen=True, eq=False)
class JobLoss:
    """Per job (indexed like ``JobMembership.ids``): its size, its FP8 FLOP/s and what it loses, by cause and
    to whom; and the fleet's capacity in no job.

    ``culprit_kind[j, k]`` (an index into ``CULPRIT_KINDS``, -1 for none), ``culprit_id[j, k]`` and
    ``culprit_flops[j, k]`` are job ``j``'s ``k``-th costliest entity and its share of the job's loss.
    """

    chips: I64
    peak: F64
    effective: F64
    lost: dict[str, F64]  # cause -> per job, CAUSES' order
    stalled: B
    failed: B  # a member chip failed (the stall is charged to failed_chip; else, stalled, to stale_telemetry)
    s_min: F64  # the pace the job's slowest member allows (clock x relative efficiency), 1 when healthy
    slowest_is_straggler: B  # that member is a straggler (its compute term charged to straggler, else throttle)
    f_nl: F64  # the bandwidth share its slowest NeuronLink path keeps
    f_efa: F64  # the share its slowest EFA path keeps, its slowness priced in
    healthy_value: F64  # FLOP/s its chips deliver healthy, as learned while it ran: what a stall is priced against
    culprit_kind: I64
    culprit_id: I64
    culprit_flops: F64
    # Every entity charged something (the culprits are each job's top few of these), sorted by ``_key``: what an
    # event's entity is looked up in (``charged``).  Few rows: only unhealthy entities in jobs are charged.
    charged_key: I64
    charged_job: I64
    charged_flops: F64
    unallocated_peak: float  # peak FLOP/s of present nodes no job holds: idle, not lost

    @property
    def n_jobs(self) -> int:
        """Return how many jobs there are."""
        return int(self.peak.size)

    @property
    def lost_total(self) -> F64:
        """Return each job's lost FLOP/s over every cause."""
        return np.sum([self.lost[c] for c in CAUSES], axis=0, dtype=np.float64).reshape(self.n_jobs)

    @property
    def goodput_ratio(self) -> F64:
        """Return each job's effective over effective plus lost (NaN for a job holding no chip)."""
        whole = self.effective + self.lost_total
        out = np.full(self.n_jobs, np.nan)
        np.divide(self.effective, whole, out=out, where=whole > 0)
        return out

    @property
    def allocated_goodput_ratio(self) -> float:
        """Return the jobs' effective over their effective plus lost, together (NaN without jobs)."""
        effective = float(self.effective.sum())
        whole = effective + float(self.lost_total.sum())
        return effective / whole if whole > 0 else float("nan")

    def culprits(self, job: int) -> list[tuple[str, int, float]]:
        """Return job number ``job``'s culprits as (entity kind, entity id, FLOP/s), the costliest first."""
        kept = self.culprit_kind[job] >= 0
        return [(CULPRIT_KINDS[k], i, f) for k, i, f in zip(self.culprit_kind[job][kept].tolist(),
                                                            self.culprit_id[job][kept].tolist(),
                                                            self.culprit_flops[job][kept].tolist(), strict=True)]

    def charged(self, kind: str, ids: I64) -> tuple[I64, F64]:
        """Return, for each entity of ``kind`` (one of ``CULPRIT_KINDS``) in ``ids``, the job charging it and
        the FLOP/s it charges (-1 and 0 for an entity charged nothing: each entity is in one job at most).

        The same figures as the culprits', for every charged entity rather than each job's top few.
        """
        if not self.charged_key.size:
            return np.full(ids.size, -1, np.int64), np.zeros(ids.size)
        key = _key(np.full(ids.size, CULPRIT_KINDS.index(kind), np.int64), ids)
        at = np.minimum(np.searchsorted(self.charged_key, key), self.charged_key.size - 1)
        found = self.charged_key[at] == key
        return np.where(found, self.charged_job[at], -1), np.where(found, self.charged_flops[at], 0.0)


def _key(kind: I64, ids: I64) -> I64:
    """Return one sortable number for each (kind, id) pair."""
    return ids.astype(np.int64) * len(CULPRIT_KINDS) + kind


@dataclass(frozen=True, eq=False)
class Rows:
    """Entities that may cost a job something: one row each."""

    job: I64
    kind: I64
    id: I64
    value: F64  # its speed or path fraction until ranked (``_ranked``), then the FLOP/s it costs its job


def _ranked(entities: Rows, *, floor_of_job: F64, weight: F64) -> Rows:
    """Return what each entity of one term costs its job, from each one's speed or path fraction: the drop
    of the term were it healthy.

    Sorted by job, then value (the slowest first), the ``k``-th entity costs
    ``weight[job] x (1/v_k - 1/v_(k+1))``, the last one's successor being
    ``floor_of_job`` (what the job's healthy entities of that kind allow), each
    value capped at it: the costs add up to the term's loss above that floor.
    """
    order = np.lexsort((entities.value, entities.job))
    job, v = entities.job[order], entities.value[order]
    floor = floor_of_job[job]
    following = np.empty_like(v)
    following[:-1] = v[1:]
    last = np.ones(job.size, bool)
    last[:-1] = job[1:] != job[:-1]
    following[last] = floor[last]
    flops = weight[job] * (1.0 / np.minimum(v, floor) - 1.0 / np.minimum(following, floor))
    return Rows(job, entities.kind[order], entities.id[order], flops)


def _charged(found: list[Rows]) -> Rows:
    """Return the candidates that cost their job something (their value the FLOP/s), one row each."""
    job = np.concatenate([c.job for c in found])
    kind = np.concatenate([c.kind for c in found])
    ids = np.concatenate([c.id for c in found])
    flops = np.concatenate([c.value for c in found])
    costs = flops > 0
    job, kind, ids, flops = job[costs], kind[costs], ids[costs], flops[costs]
    # A node may cost its job through two terms (its EFA ports and its NeuronLinks both slow): one row, the sum.
    key = _key(kind, ids)
    unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if unique.size < key.size:
        return Rows(job[first], kind[first], ids[first], np.bincount(inverse, weights=flops).astype(np.float64))
    return Rows(job, kind, ids, flops)


def _top(charged: Rows, n_jobs: int, k: int) -> tuple[I64, I64, F64]:
    """Return the ``k`` costliest charged entities of each job as (kind, id, FLOP/s) arrays of shape (n_jobs, k)."""
    # Costliest first; ties by kind then id, so the order never depends on the candidates' order.
    order = np.lexsort((charged.id, charged.kind, -charged.value, charged.job))
    job, kind, ids, flops = charged.job[order], charged.kind[order], charged.id[order], charged.value[order]
    rank = np.arange(job.size) - np.searchsorted(job, job, side="left")
    keep = rank < k
    out_kind = np.full((n_jobs, k), -1, np.int64)
    out_id = np.full((n_jobs, k), -1, np.int64)
    out_flops = np.zeros((n_jobs, k))
    out_kind[job[keep], rank[keep]] = kind[keep]
    out_id[job[keep], rank[keep]] = ids[keep]
    out_flops[job[keep], rank[keep]] = flops[keep]
    return out_kind, out_id, out_flops


@dataclass(frozen=True, eq=False)
class Groups:
    """Which synchronous group (a job, or an UltraServer's capacity in no job) each node is in, arranged for
    reductions from nodes to groups; the per-job code calls a group a job."""

    n_jobs: int
    node_job: I64  # -1: in no job
    held: I64  # the nodes some job holds
    held_job: I64  # the job of each of those

    @classmethod
    def of(cls, membership: JobMembership) -> Groups:
        node_job = membership.node_job.astype(np.int64)
        held = np.flatnonzero(node_job >= 0)
        return cls(membership.n_jobs, node_job, held, node_job[held])

    def sum(self, node_values: Floats | B) -> F64:
        """Return each job's sum of its nodes' values."""
        return np.bincount(self.held_job, weights=node_values[self.held], minlength=self.n_jobs).astype(np.float64)

    def any(self, node_flags: B) -> B:
        """Return which jobs have a node flagged (few are: found through the flagged nodes)."""
        out = np.zeros(self.n_jobs, bool)
        job = self.node_job[np.flatnonzero(node_flags)]
        out[job[job >= 0]] = True
        return out

    def min(self, node_values: F32) -> F32:
        """Return each job's least of its nodes' values (inf for a job that holds no node)."""
        out = np.full(self.n_jobs, np.inf, node_values.dtype)
        np.minimum.at(out, self.held_job, node_values[self.held])
        return out

    def own(self, entity_node: I64) -> tuple[B, I64]:
        """Return which entities (by their node) are in a job, and the job of those that are."""
        job = self.node_job[entity_node]
        ours = job >= 0
        return ours, job[ours]


@dataclass(frozen=True, eq=False)
class _Pace:
    """Each job's slowest member and paths, and the unhealthy entities in jobs that set them."""

    s_min: F32  # in the chips' float32 (job_loss prices it widened to float64, as core/model.py does)
    slowest_is_straggler: B
    f_nl: F64
    f_efa: F64
    speed: F32  # per node and chip
    node_speed: F32  # each node's slowest chip's
    links: Rows  # the unhealthy links in jobs, each with its path fraction
    ports: Rows  # the unhealthy ports in jobs, each with its path fraction


def _pace(jobs: Groups, detector: FleetDetector, params: ModelParams) -> _Pace:
    """Return each job's pace terms: per node first, then per job, so no job sees another's entities."""
    topo = detector.state.topology
    n_nodes, cpn = topo.n_nodes, topo.chips_per_node
    # The compute term: the job's slowest chip, through each node's slowest (the first of ties, in chip order).
    speed = detector.chips.speed().reshape(n_nodes, cpn)
    node_speed = _row_min(speed)
    job_speed = jobs.min(node_speed)
    # The node that sets it: the first of the job's nodes whose slowest chip is that slow.
    setters = jobs.held[node_speed[jobs.held] == job_speed[jobs.held_job]]
    jobs_set, first = np.unique(jobs.node_job[setters], return_index=True)
    slowest_is_straggler = np.zeros(jobs.n_jobs, bool)
    setter_chip = setters[first] * cpn + speed[setters[first]].argmin(axis=1)
    slowest_is_straggler[jobs_set] = detector.chips.tracker.state[setter_chip] == STRAGGLER

    # NeuronLinks with both ends on the job's nodes; the EFA ports of the job's nodes.
    links, link_fraction = detector.links.slow_paths()
    link_job = jobs.node_job[topo.link_node[links]]  # the node of its end a
    ours = (link_job >= 0) & (link_job == jobs.node_job[topo.chip_node[topo.link_b[links]]])
    link_job = link_job[ours]
    ports, port_fraction = detector.efa.slow_paths(latency_share=params.efa_latency_share)
    mine, port_job = jobs.own(topo.efa_node[ports])
    links_c = Rows(link_job, np.full(link_job.size, _NEURONLINK), links[ours],
                          np.clip(link_fraction[ours], _FLOOR, 1.0).astype(np.float64))
    ports_c = Rows(port_job, np.full(port_job.size, _EFA), ports[mine],
                          np.clip(port_fraction[mine], _FLOOR, 1.0).astype(np.float64))
    # A node whose every link or port is slow against its peers (detect/nodepaths.py) is one slow path of its job,
    # charged to the node: its share of its peers' traffic is the fraction its paths keep.
    links_c = _with_nodes(links_c, jobs, *detector.node_paths.fractions("neuronlink"))
    ports_c = _with_nodes(ports_c, jobs, *detector.node_paths.fractions("efa"))
    return _Pace(
        s_min=np.clip(job_speed, _FLOOR, 1.0), slowest_is_straggler=slowest_is_straggler,
        f_nl=_slowest(jobs.n_jobs, links_c.job, links_c.value.astype(np.float32)),
        f_efa=_slowest(jobs.n_jobs, ports_c.job, ports_c.value.astype(np.float32)),
        speed=speed, node_speed=node_speed, links=links_c, ports=ports_c,
    )


def _with_nodes(paths: Rows, jobs: Groups, nodes: I64, fraction: F32) -> Rows:
    """Return ``paths`` with the slow nodes that are in a job added, each with its fraction (kind ``node``)."""
    ours, job = jobs.own(nodes)
    return Rows(np.concatenate([paths.job, job]),
                       np.concatenate([paths.kind, np.full(job.size, _NODE, np.int64)]),
                       np.concatenate([paths.id, nodes[ours]]),
                       np.concatenate([paths.value, np.clip(fraction[ours], _FLOOR, 1.0).astype(np.float64)]))


def _row_min(values: F32) -> F32:
    """Return each row's least value, by halving the rows: the same values as ``values.min(axis=1)`` in
    ~1.6 ms instead of ~4 at rainier (a float32 reduction along rows of 16 pays per row)."""
    while values.shape[1] > 1:
        half = (values.shape[1] + 1) // 2
        low = values[:, :half].copy()
        np.minimum(low[:, :values.shape[1] - half], values[:, half:], out=low[:, :values.shape[1] - half])
        values = low
    return values[:, 0]


def _slowest(n_jobs: int, job: I64, fraction: F32) -> F64:
    """Return each job's lowest path fraction, floored as core/model.py floors it (1: every path healthy)."""
    out = np.ones(n_jobs, np.float32)
    np.minimum.at(out, job, fraction)
    return np.clip(out, _FLOOR, 1.0).astype(np.float64)


def _own_share(
    jobs: Groups, shares: HealthyShares, healthy: F64, running: B, *, now_s: float, present: B, fallback: F64,
    quiet: B,
) -> F64:
    """Fold each running job's healthy share of peak into its nodes' shares, none of a ``quiet`` job's nor of
    the analyses either side of its quiet spell (``HealthyShares``); return each job's mean of its nodes'
    learned shares (``fallback`` where none is learned)."""
    node_healthy = np.full(jobs.node_job.size, np.nan)
    node_healthy[jobs.held] = healthy[jobs.held_job]
    node_running = np.zeros(jobs.node_job.size, bool)
    node_running[jobs.held] = running[jobs.held_job]
    node_steady = np.ones(jobs.node_job.size, bool)
    node_steady[jobs.held] = ~quiet[jobs.held_job]
    shares.update(node_healthy, node_running, now_s, steady=node_steady)
    learned = (jobs.node_job >= 0) & np.isfinite(shares.share) & present
    n_learned = np.bincount(jobs.node_job[learned], minlength=jobs.n_jobs)
    total = np.bincount(jobs.node_job[learned], weights=shares.share[learned], minlength=jobs.n_jobs)
    return np.divide(total, n_learned, out=fallback.copy(), where=n_learned > 0)


def _culprits(
    jobs: Groups, detector: FleetDetector, pace: _Pace, *, unhealthy: I64, running_effective: F64, stall_loss: F64,
    node_silent: B, params: ModelParams,
) -> tuple[Rows, list[Rows]]:
    """Return every entity that costs a job something, and what, one row each; and the same rows per term
    (``TERMS``' order) before an entity's terms are summed.  A running job's are its unhealthy chips,
    links and ports, each costing the drop of its term were it healthy; a stalled job's, the entities that
    stall it, sharing its loss."""
    topo, shares = detector.state.topology, params.shares
    state = detector.chips.tracker.state[unhealthy]
    slow_chips = unhealthy[(state == STRAGGLER) | (state == THROTTLED)]
    ours, slow_chip_job = jobs.own(topo.chip_node[slow_chips])
    slow_chips = slow_chips[ours]
    # What the job's healthy chips allow: the compute term's floor once every unhealthy chip is healthy
    # (recomputed only on the few nodes that have an unhealthy chip).
    healthy_speed = pace.node_speed.copy()
    touched = np.unique(topo.chip_node[unhealthy])
    speeds_there = pace.speed[touched].copy()
    speeds_there[detector.chips.tracker.state.reshape(pace.speed.shape)[touched] != HEALTHY] = np.inf
    healthy_speed[touched] = speeds_there.min(axis=1, initial=np.inf)
    floor = np.clip(jobs.min(healthy_speed), _FLOOR, 1.0).astype(np.float64)
    speeds = np.clip(pace.speed.reshape(-1)[slow_chips], _FLOOR, 1.0).astype(np.float64)
    chips = Rows(slow_chip_job, np.full(slow_chips.size, _CHIP), slow_chips, speeds)
    ones = np.ones(jobs.n_jobs)
    found = [
        _ranked(chips, floor_of_job=floor, weight=running_effective * (1.0 - shares.comm_share)),
        _ranked(pace.links, floor_of_job=ones, weight=running_effective * shares.comm_nl_share),
        _ranked(pace.ports, floor_of_job=ones, weight=running_effective * shares.comm_efa_share),
    ]
    failed_chips = unhealthy[state == FAILED]
    silent_nodes = np.flatnonzero(node_silent)
    stall_ids = np.concatenate([failed_chips, silent_nodes]).astype(np.int64)
    stall_kind = np.repeat(np.array([_CHIP, _NODE], np.int64), [failed_chips.size, silent_nodes.size])
    ours, stall_job = jobs.own(np.concatenate([topo.chip_node[failed_chips], silent_nodes]))
    stallers = np.bincount(stall_job, minlength=jobs.n_jobs)
    each = np.divide(stall_loss, stallers, out=np.zeros(jobs.n_jobs), where=stallers > 0)
    found.append(Rows(stall_job, stall_kind[ours], stall_ids[ours], each[stall_job]))
    return _charged(found), found


def job_loss(
    throughput: Throughput, detector: FleetDetector, membership: JobMembership, *, params: ModelParams,
    shares: HealthyShares | None = None,
) -> JobLoss:
    """Return each job's FP8 figures, its lost FLOP/s by cause and its top culprits.

    ``shares``, kept by the caller across analyses, holds each **node**'s
    healthy share of peak (``HealthyShares.empty(topology.n_nodes, ...)``),
    learned here from the job running on it: job numbers move as jobs come
    and go, nodes do not.  A stalled job is valued at the mean of its nodes'
    learned shares; without ``shares``, or where none is learned, at the
    running jobs' median (as ``core/model.py`` values a stalled UltraServer).

    The jobs alone: ``core/fleetloss.py`` prices them together with the
    capacity in no job, which is what the monitor does.
    """
    topo = detector.state.topology
    node_peak = topo.node_present * (topo.chips_per_node * detector.hardware.fp8_dense_flops)
    if membership.n_jobs == 0:
        # Most fleets' monitors hear no job: at rainier the passes below would cost ~8 ms of CPU to say nothing.
        return no_job_loss(float(node_peak.sum()))
    jobs = Groups.of(membership)
    return price_groups(throughput, detector, jobs, params=params, shares=shares,
                        idle_learns=np.zeros(jobs.n_jobs, bool)).loss


@dataclass(frozen=True, eq=False)
class Priced:
    """What ``price_groups`` found: the groups' ``JobLoss`` and, per term (``TERMS``), the rows of the
    entities charged in it before an entity's terms were summed (what a loss is placed by)."""

    loss: JobLoss
    rows: list[Rows]
    jobs: Groups
    node_peak: F64


def price_groups(
    throughput: Throughput, detector: FleetDetector, jobs: Groups, *, params: ModelParams,
    shares: HealthyShares | None, idle_learns: B,
) -> Priced:
    """Price every group of ``jobs`` (a synchronous group each: a job, or an UltraServer's capacity in no job).

    ``idle_learns`` marks the groups whose nodes learn a healthy share of 0
    while they run nothing (known 0 FLOP/s: every chip fresh, none unknown;
    and no stall): capacity in no job that sits idle loses nothing when it
    stalls.  A job in a checkpoint is
    still a job, and keeps what it learned while it stepped: its quiet
    analyses, and the one either side of them, learn nothing.
    """
    topo = detector.state.topology
    n_nodes, cpn = topo.n_nodes, topo.chips_per_node
    node_peak = (topo.node_present * (cpn * detector.hardware.fp8_dense_flops)).astype(np.float64)
    peak = jobs.sum(node_peak)
    # Over the chips that know it: a chip's first interval without a delivered figure (no clock) is unknown.
    chip_effective = throughput.chip_effective.reshape(n_nodes, cpn)
    effective = jobs.sum(np.nansum(chip_effective, axis=1))
    pace = _pace(jobs, detector, params)

    # A failed or silent member stalls the whole job.
    unhealthy = detector.chips.tracker.unhealthy()
    state = detector.chips.tracker.state[unhealthy]
    node_failed = np.zeros(n_nodes, bool)
    node_failed[topo.chip_node[unhealthy[state == FAILED]]] = True
    node_silent = detector.cooling.lost_nodes().copy()
    node_silent[topo.chip_node[unhealthy[state == STALE]]] = True
    failed = jobs.any(node_failed)
    silent = jobs.any(node_silent)
    stalled = failed | silent
    running = ~stalled & (effective > 0)
    share = effective[running] / peak[running] if running.any() else np.array([0.0])
    own_share = np.full(jobs.n_jobs, float(np.median(share)) if share.size else 0.0)

    # Priced in float64 (the float32 speed exactly widened), as a recording rule prices the shards' exported
    # terms: one monitor's figures and the rule's combination of them then agree within 1e-9 (docs/jobs.md).
    s_min = pace.s_min.astype(np.float64)
    terms = group_loss(effective, s_min=s_min, f_nl=pace.f_nl, f_efa=pace.f_efa, params=params)
    if shares is not None:
        learning = running
        if idle_learns.any():
            # Idle: no stall and a known 0: every chip of it fresh, none with an unknown figure. A chip never
            # heard from (a monitor's ticks before telemetry) or silent but not yet judged stale reads 0 without
            # being known to run nothing; learning that 0 would price a stall soon after at a fraction.
            fresh = throughput.chip_fresh.reshape(n_nodes, cpn)
            unknown = jobs.any(np.asarray(np.isnan(chip_effective).any(axis=1) | ~fresh.all(axis=1), bool))
            learning = running | (idle_learns & ~stalled & (effective == 0) & ~unknown)
        with np.errstate(invalid="ignore", divide="ignore"):
            healthy = (effective + terms["compute"] + terms["neuronlink"] + terms["efa"]) / peak
        # A job in a checkpoint or a restart steps no work: what it delivers then is no measure of what a stall
        # costs it (capacity in no job learns its idle 0 on purpose: it is never quiet here).
        quiet = quiet_groups(jobs.node_job, jobs.n_jobs, detector.state.chips.gauges["util"],
                             throughput.chip_fresh, _PHASES) & ~idle_learns
        own_share = _own_share(jobs, shares, healthy, learning, now_s=detector.state.now_s,
                               present=topo.node_present, fallback=own_share, quiet=quiet)
    healthy_value = own_share * peak
    stall_loss = np.where(stalled, np.maximum(healthy_value - effective, 0.0), 0.0)
    zero = np.zeros(jobs.n_jobs)
    straggler = pace.slowest_is_straggler
    lost = {
        "failed_chip": np.where(failed, stall_loss, zero),
        "stale_telemetry": np.where(silent & ~failed, stall_loss, zero),
        "thermal_throttle": np.where(stalled | straggler, zero, terms["compute"]),
        "straggler": np.where(stalled | ~straggler, zero, terms["compute"]),
        "degraded_neuronlink": np.where(stalled, zero, terms["neuronlink"]),
        "degraded_efa": np.where(stalled, zero, terms["efa"]),
    }
    charged, rows = _culprits(jobs, detector, pace, unhealthy=unhealthy,
                              running_effective=np.where(stalled, 0.0, effective), stall_loss=stall_loss,
                              node_silent=node_silent, params=params)
    kind, ids, flops = _top(charged, jobs.n_jobs, TOP_CULPRITS)
    key = _key(charged.kind, charged.id)
    by_key = np.argsort(key)
    loss = JobLoss(
        chips=jobs.sum(topo.node_present * float(cpn)).astype(np.int64), peak=peak, effective=effective,
        lost={c: lost[c] for c in CAUSES}, stalled=stalled, failed=failed, s_min=s_min,
        slowest_is_straggler=straggler, f_nl=pace.f_nl, f_efa=pace.f_efa, healthy_value=healthy_value,
        culprit_kind=kind, culprit_id=ids, culprit_flops=flops,
        charged_key=key[by_key], charged_job=charged.job[by_key], charged_flops=charged.value[by_key],
        unallocated_peak=float(node_peak[jobs.node_job < 0].sum()),
    )
    return Priced(loss, rows, jobs, node_peak)


def no_job_loss(unallocated_peak: float) -> JobLoss:
    """Return the figures of a fleet with no jobs: every per-job array empty, the whole peak unallocated."""
    none_f, none_i = np.zeros(0), np.zeros(0, np.int64)
    return JobLoss(
        chips=none_i, peak=none_f, effective=none_f, lost=dict.fromkeys(CAUSES, none_f), stalled=np.zeros(0, bool),
        failed=np.zeros(0, bool), s_min=none_f, slowest_is_straggler=np.zeros(0, bool), f_nl=none_f, f_efa=none_f,
        healthy_value=none_f, culprit_kind=np.zeros((0, TOP_CULPRITS), np.int64),
        culprit_id=np.zeros((0, TOP_CULPRITS), np.int64), culprit_flops=np.zeros((0, TOP_CULPRITS)),
        charged_key=none_i, charged_job=none_i, charged_flops=none_f, unallocated_peak=unallocated_peak,
    )
