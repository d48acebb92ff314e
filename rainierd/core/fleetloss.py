"""One throughput model at every level: what the fleet, each site and each
UltraServer lose, by cause, as sums of the same per-group prices the jobs'
figures are (docs/throughput-model.md, "One model, every level").

Why one model: a job is a synchronous group, so one degraded link in one
UltraServer costs every chip of a job spanning three.  Charging each fault
to its own UltraServer alone reports a third of that job's loss in the
headline while the job's own figure, its goodput and its events say the
whole; an SRE then sees two answers to "what are we losing".  Here every
loss is priced once, per group, and every level adds the same prices up:

* **capacity in a job** is priced per job (``core/jobmodel.py``);
* **capacity in no job** is priced per UltraServer, each UltraServer's nodes
  that no job holds one group (the fallback: without job documents it is
  every UltraServer, a guess at how training is grouped, and the surfaces
  say so).  Idle capacity learns a healthy value of 0, so its stall costs
  nothing.

**Placement.**  A group's loss of each cause is placed where what causes it
is: on the UltraServers of the entities charged with it (a degraded link's
share of the job's NeuronLink loss on the link's UltraServer), in proportion
to what each is charged; what no unhealthy entity explains (the compute term
below the job's healthy chips' pace, the day's clock loss) is spread over the
job's UltraServers by their peak.  So for fleet, site and UltraServer::

    lost[cause] = sum over groups of their loss of that cause placed there

exactly, the fleet's being the jobs' losses plus the unallocated capacity's.
A level's goodput is ``effective / (effective + lost)``: an UltraServer that
hosts a fault slowing a job spread over three carries that job's whole loss
of the cause, so its goodput says what the fleet loses to what is in it.

Pure: the throughput, the detectors and the membership in, frozen values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd._types import F64, I64, B
from rainierd.core.detect import FleetDetector
from rainierd.core.jobmodel import CULPRIT_KINDS, TERMS, Groups, JobLoss, Priced, no_job_loss, price_groups
from rainierd.core.jobs import JobMembership
from rainierd.core.model import HealthyShares, ModelParams
from rainierd.core.throughput import Throughput
from rainierd.fleet import CAUSES

FLEET_CULPRITS: Final = 20  # the fleet's costliest entities kept: the read API and the exporter show these


@dataclass(frozen=True, eq=False)
class LostByCause:
    """Lost FP8 FLOP/s per cause at every level, and the fleet's costliest entities.

    ``ultraserver`` and ``site`` hold, per cause, every group's loss placed
    there; ``unallocated`` the part of ``ultraserver`` that capacity in no
    job loses (all of it without jobs).  ``culprit_*`` are the fleet's
    ``FLEET_CULPRITS`` costliest entities, the costliest first: kind (an
    index into ``CULPRIT_KINDS``), id, the job they slow (-1: capacity in no
    job) and the FLOP/s they cost it.
    """

    ultraserver: dict[str, F64]
    site: dict[str, F64]
    unallocated: dict[str, F64]
    n_jobs: int  # jobs priced: 0 means every figure is the per-UltraServer fallback
    culprit_kind: I64
    culprit_id: I64
    culprit_job: I64
    culprit_flops: F64

    def fleet(self) -> dict[str, float]:
        """Return the fleet's lost FLOP/s per cause."""
        return {cause: float(values.sum()) for cause, values in self.site.items()}

    def unallocated_fleet(self) -> dict[str, float]:
        """Return what the fleet's capacity in no job loses, per cause."""
        return {cause: float(values.sum()) for cause, values in self.unallocated.items()}

    def total(self, level: str) -> F64:
        """Return each entity's lost FLOP/s over every cause at ``level`` (``ultraserver`` or ``site``)."""
        by_cause = getattr(self, level)
        return np.sum([by_cause[c] for c in CAUSES], axis=0, dtype=np.float64).reshape(-1)

    def culprits(self) -> list[tuple[str, int, int, float]]:
        """Return the fleet's costliest entities as (kind, id, job number or -1, FLOP/s), the costliest first."""
        return [(CULPRIT_KINDS[k], i, j, f) for k, i, j, f in zip(
            self.culprit_kind.tolist(), self.culprit_id.tolist(), self.culprit_job.tolist(),
            self.culprit_flops.tolist(), strict=True)]


def _groups(membership: JobMembership, node_present: B, node_ultraserver: I64) -> tuple[Groups, I64]:
    """Return the jobs followed by one group per UltraServer of the present nodes no job holds, and the
    UltraServer of each of those."""
    node_job = membership.node_job.astype(np.int64)
    free = (node_job < 0) & node_present
    us, inverse = np.unique(node_ultraserver[free], return_inverse=True)
    node_group = node_job.copy()
    node_group[free] = membership.n_jobs + inverse
    held = np.flatnonzero(node_group >= 0)
    return Groups(membership.n_jobs + us.size, node_group, held, node_group[held]), us.astype(np.int64)


def _placement(priced: Priced, node_ultraserver: I64, entity_node: dict[int, I64], n_us: int) -> dict[str, F64]:
    """Return, per cause, each UltraServer's share of every group's loss of it (see the module docstring)."""
    loss, groups = priced.loss, priced.jobs
    # Every (group, UltraServer) pair a group holds nodes in, with its peak there.
    pair_key = groups.held_job * n_us + node_ultraserver[groups.held]
    pairs, at = np.unique(pair_key, return_inverse=True)
    pair_peak = np.bincount(at, weights=priced.node_peak[groups.held], minlength=pairs.size)
    pair_group, pair_us = pairs // n_us, pairs % n_us
    out = {cause: np.zeros(n_us) for cause in CAUSES}
    for (_term, causes), rows in zip(TERMS, priced.rows, strict=True):
        term_loss = np.sum([loss.lost[c] for c in causes], axis=0, dtype=np.float64).reshape(-1)
        if not (term_loss > 0).any():
            continue
        node = np.concatenate([entity_node[k][rows.id[rows.kind == k]] for k in range(len(CULPRIT_KINDS))])
        order = np.concatenate([np.flatnonzero(rows.kind == k) for k in range(len(CULPRIT_KINDS))])
        job, flops = rows.job[order], rows.value[order]
        charged = np.bincount(job, weights=flops, minlength=groups.n_jobs)
        # What no charged entity explains, spread by peak; the charged rows where their entities are.
        # (A rest within the float's rounding of the charged sum is none: it would put a few FLOP/s of the cause on
        # UltraServers that hold nothing unhealthy, and rank them above healthy ones.)
        rest = term_loss - charged
        rest = np.where(rest > 1e-9 * term_loss, rest, 0.0)
        group_peak = loss.peak
        weight = np.divide(rest[pair_group] * pair_peak, group_peak[pair_group],
                           out=np.zeros(pairs.size), where=group_peak[pair_group] > 0)
        if job.size:
            row_pair = np.searchsorted(pairs, job * n_us + node_ultraserver[node])
            weight += np.bincount(row_pair, weights=flops, minlength=pairs.size)
        total = np.bincount(pair_group, weights=weight, minlength=groups.n_jobs)
        fraction = np.divide(weight, total[pair_group], out=np.zeros(pairs.size), where=total[pair_group] > 0)
        for cause in causes:
            out[cause] += np.bincount(pair_us, weights=loss.lost[cause][pair_group] * fraction, minlength=n_us)
    return out


def _fleet_culprits(loss: JobLoss, n_jobs: int) -> tuple[I64, I64, I64, F64]:
    """Return the fleet's ``FLEET_CULPRITS`` costliest charged entities (each is charged in one group)."""
    flops = loss.charged_flops
    k = min(FLEET_CULPRITS, flops.size)
    top = np.argpartition(-flops, k - 1)[:k] if 0 < k < flops.size else np.arange(flops.size)
    kind, ids = loss.charged_key[top] % len(CULPRIT_KINDS), loss.charged_key[top] // len(CULPRIT_KINDS)
    order = np.lexsort((ids, kind, -flops[top]))  # ties by kind then id: never by the rows' order
    job = loss.charged_job[top][order]
    return kind[order], ids[order], np.where(job < n_jobs, job, -1), flops[top][order]


def _head(loss: JobLoss, n: int, unallocated_peak: float) -> JobLoss:
    """Return ``loss`` of its first ``n`` groups only (the jobs), charged rows included."""
    mine = loss.charged_job < n
    return JobLoss(
        chips=loss.chips[:n], peak=loss.peak[:n], effective=loss.effective[:n],
        lost={c: v[:n] for c, v in loss.lost.items()}, stalled=loss.stalled[:n], failed=loss.failed[:n],
        s_min=loss.s_min[:n], slowest_is_straggler=loss.slowest_is_straggler[:n], f_nl=loss.f_nl[:n],
        f_efa=loss.f_efa[:n], healthy_value=loss.healthy_value[:n], culprit_kind=loss.culprit_kind[:n],
        culprit_id=loss.culprit_id[:n], culprit_flops=loss.culprit_flops[:n],
        charged_key=loss.charged_key[mine], charged_job=loss.charged_job[mine],
        charged_flops=loss.charged_flops[mine], unallocated_peak=unallocated_peak,
    )


def price_fleet(
    throughput: Throughput, detector: FleetDetector, membership: JobMembership, *, params: ModelParams,
    shares: HealthyShares | None = None,
) -> tuple[JobLoss, LostByCause]:
    """Return the jobs' figures and every level's lost FLOP/s by cause, from one pricing of every group.

    ``shares`` (``HealthyShares.empty(topology.n_nodes, ...)``, kept by the
    caller) holds each node's healthy share of peak under the group it is in.
    """
    topo = detector.state.topology
    n_us = topo.n_ultraservers
    node_ultraserver = np.asarray(topo.node_ultraserver, np.int64)
    groups, free_us = _groups(membership, topo.node_present, node_ultraserver)
    n_jobs = membership.n_jobs
    priced = price_groups(throughput, detector, groups, params=params, shares=shares,
                          idle_learns=np.arange(groups.n_jobs) >= n_jobs)
    loss = priced.loss
    entity_node = {CULPRIT_KINDS.index("chip"): np.asarray(topo.chip_node, np.int64),
                   CULPRIT_KINDS.index("neuronlink"): np.asarray(topo.link_node, np.int64),
                   CULPRIT_KINDS.index("efa"): np.asarray(topo.efa_node, np.int64),
                   CULPRIT_KINDS.index("node"): np.arange(topo.n_nodes, dtype=np.int64)}
    per_us = _placement(priced, node_ultraserver, entity_node, n_us)
    # Capacity in no job: each group is one UltraServer's, so its whole loss is there.
    unallocated = {c: np.bincount(free_us, weights=loss.lost[c][n_jobs:], minlength=n_us).astype(np.float64)
                   for c in CAUSES}
    site = {c: np.bincount(topo.ultraserver_site, weights=per_us[c], minlength=topo.n_sites).astype(np.float64)
            for c in CAUSES}
    kind, ids, job, flops = _fleet_culprits(loss, n_jobs)
    unallocated_peak = float(priced.node_peak[membership.node_job < 0].sum())
    jobs = _head(loss, n_jobs, unallocated_peak) if n_jobs else no_job_loss(unallocated_peak)
    return jobs, LostByCause(per_us, site, unallocated, n_jobs, kind, ids, job, flops)
