"""The throughput model per training job: what each job loses, to which cause
and to which entity, wherever in the job the fault is (docs/throughput-model.md,
"Per job", has the formula and a worked example that tests/test_jobmodel.py checks).

It exists because a job is a synchronous group: its step waits for its
slowest member chip and its slowest collective path (NeuronLink, EFA)
wherever they are, so one degraded link in one UltraServer costs every chip
of a job spanning three.  ``core/model.py`` charges each fault to its own
UltraServer only, which reports a third of such a job's loss.

The step formula is ``rainierd/pace.py``'s, priced with each job's slowest
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

from rainierd._types import F32, F64, I64, B
from rainierd.core.detect import FleetDetector
from rainierd.core.detect.chips import FAILED, HEALTHY, STALE, STRAGGLER, THROTTLED
from rainierd.core.jobs import JobMembership
from rainierd.core.model import HealthyShares, ModelParams, group_loss
from rainierd.core.throughput import Throughput
from rainierd.pace import CAUSES

__all__ = ["CULPRIT_KINDS", "TOP_CULPRITS", "JobLoss", "job_loss"]

# What a culprit can be: ``JobLoss.culprit_kind`` indexes this tuple.
CULPRIT_KINDS: Final = ("chip", "neuronlink", "efa", "node")
_CHIP, _NEURONLINK, _EFA, _NODE = range(len(CULPRIT_KINDS))
TOP_CULPRITS: Final = 5  # culprits kept per job, the costliest first

# The same floor core/model.py puts under a speed or a path fraction (a dead path is a stall, not a 0).
_FLOOR: Final = 0.05


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
    s_min: F64  # the pace the job's slowest member allows (clock x relative efficiency), 1 when healthy
    f_nl: F64  # the bandwidth share its slowest NeuronLink path keeps
    f_efa: F64  # the share its slowest EFA path keeps, its slowness priced in
    culprit_kind: I64
    culprit_id: I64
    culprit_flops: F64
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
        return np.divide(self.effective, whole, out=np.full(self.n_jobs, np.nan), where=whole > 0)

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


@dataclass(frozen=True, eq=False)
class _Candidates:
    """Entities that cost a job something: one row each."""

    job: I64
    kind: I64
    id: I64
    flops: F64


def _ranked(kind: int, job: I64, ids: I64, value: F64, floor_of_job: F64, weight: F64) -> _Candidates:
    """Return what each entity of one term costs its job: the term's drop were it healthy.

    Sorted by job, then value (the slowest first), the ``k``-th entity costs
    ``weight[job] x (1/v_k - 1/v_(k+1))``, the last one's successor being
    ``floor_of_job`` (what the job's healthy entities of that kind allow), each
    value capped at it: the costs add up to the term's loss above that floor.
    """
    order = np.lexsort((value, job))
    job, ids, v = job[order], ids[order], value[order]
    floor = floor_of_job[job]
    following = np.empty_like(v)
    following[:-1] = v[1:]
    last = np.ones(job.size, bool)
    last[:-1] = job[1:] != job[:-1]
    following[last] = floor[last]
    flops = weight[job] * (1.0 / np.minimum(v, floor) - 1.0 / np.minimum(following, floor))
    return _Candidates(job, np.full(job.size, kind, np.int64), ids, flops)


def _top(found: list[_Candidates], n_jobs: int, k: int) -> tuple[I64, I64, F64]:
    """Return the ``k`` costliest candidates of each job as (kind, id, FLOP/s) arrays of shape (n_jobs, k)."""
    job = np.concatenate([c.job for c in found])
    kind = np.concatenate([c.kind for c in found])
    ids = np.concatenate([c.id for c in found])
    flops = np.concatenate([c.flops for c in found])
    costs = flops > 0
    job, kind, ids, flops = job[costs], kind[costs], ids[costs], flops[costs]
    # Costliest first; ties by kind then id, so the order never depends on the candidates' order.
    order = np.lexsort((ids, kind, -flops, job))
    job, kind, ids, flops = job[order], kind[order], ids[order], flops[order]
    rank = np.arange(job.size) - np.searchsorted(job, job, side="left")
    keep = rank < k
    out_kind = np.full((n_jobs, k), -1, np.int64)
    out_id = np.full((n_jobs, k), -1, np.int64)
    out_flops = np.zeros((n_jobs, k))
    out_kind[job[keep], rank[keep]] = kind[keep]
    out_id[job[keep], rank[keep]] = ids[keep]
    out_flops[job[keep], rank[keep]] = flops[keep]
    return out_kind, out_id, out_flops


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
    """
    topo = detector.state.topology
    n_jobs, n_nodes, cpn = membership.n_jobs, topo.n_nodes, topo.chips_per_node
    node_job = membership.node_job.astype(np.int64)
    in_job = node_job >= 0
    held = np.flatnonzero(in_job)
    held_job = node_job[held]

    def per_job(node_values: F64) -> F64:
        return np.bincount(held_job, weights=node_values[held], minlength=n_jobs).astype(np.float64, copy=False)

    node_peak = topo.node_present * (cpn * detector.hardware.fp8_dense_flops)
    node_chips = topo.node_present * float(cpn)
    chips = per_job(node_chips).astype(np.int64)
    peak = per_job(node_peak)
    effective = per_job(throughput.chip_effective.reshape(n_nodes, cpn).sum(axis=1))
    unallocated = float(node_peak[~in_job].sum())

    # The compute term: the job's slowest chip, through each node's slowest (first of ties, in chip order).
    chip_state = detector.chips.tracker.state
    speed = detector.chips.speed().reshape(n_nodes, cpn)
    node_slowest = speed.argmin(axis=1)
    node_speed = speed[np.arange(n_nodes), node_slowest]
    job_speed = np.full(n_jobs, np.inf, node_speed.dtype)
    np.minimum.at(job_speed, held_job, node_speed[held])
    # Priced in the chips' float32, as core/model.py prices it: the two agree to the last bit on one-UltraServer jobs.
    s_min = np.clip(job_speed, _FLOOR, 1.0)
    # The node that sets it: the first of the job's nodes whose slowest chip is that slow.
    setters = held[node_speed[held] == job_speed[held_job]]
    jobs_set, first = np.unique(node_job[setters], return_index=True)
    slowest_is_straggler = np.zeros(n_jobs, bool)
    setter_chip = setters[first] * cpn + node_slowest[setters[first]]
    slowest_is_straggler[jobs_set] = chip_state[setter_chip] == STRAGGLER

    # The NeuronLink term: links with both ends on the job's nodes.  The EFA term: the job's nodes' ports.
    links, link_fraction = detector.links.slow_paths()
    link_job = node_job[topo.link_node[links]]
    ours = (link_job >= 0) & (link_job == node_job[topo.chip_node[topo.link_b[links]]])
    links, link_job, link_fraction = links[ours], link_job[ours], link_fraction[ours]
    f_nl = _slowest(n_jobs, link_job, link_fraction)
    ports, port_fraction = detector.efa.slow_paths(latency_share=params.efa_latency_share)
    port_job = node_job[topo.efa_node[ports]]
    ours = port_job >= 0
    ports, port_job, port_fraction = ports[ours], port_job[ours], port_fraction[ours]
    f_efa = _slowest(n_jobs, port_job, port_fraction)

    # A failed or silent member stalls the whole job.
    node_failed = (chip_state == FAILED).reshape(n_nodes, cpn).any(axis=1)
    node_silent = (chip_state == STALE).reshape(n_nodes, cpn).any(axis=1) | detector.cooling.lost_nodes()
    failed = per_job(node_failed.astype(np.float64)) > 0
    silent = per_job(node_silent.astype(np.float64)) > 0
    stalled = failed | silent
    running = ~stalled & (effective > 0)
    share = effective[running] / peak[running] if running.any() else np.array([0.0])
    healthy_share = float(np.median(share)) if share.size else 0.0

    terms = group_loss(effective, s_min=s_min, f_nl=f_nl, f_efa=f_efa, params=params)
    own_share = np.full(n_jobs, healthy_share)
    if shares is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            healthy = (effective + terms["compute"] + terms["neuronlink"] + terms["efa"]) / peak
        node_healthy = np.full(n_nodes, np.nan)
        node_healthy[held] = healthy[held_job]
        node_running = np.zeros(n_nodes, bool)
        node_running[held] = running[held_job]
        shares.update(node_healthy, node_running, detector.state.now_s)
        learned = in_job & np.isfinite(shares.share) & topo.node_present
        n_learned = np.bincount(node_job[learned], minlength=n_jobs)
        total = np.bincount(node_job[learned], weights=shares.share[learned], minlength=n_jobs)
        own_share = np.divide(total, n_learned, out=own_share, where=n_learned > 0)
    stall_loss = np.maximum(own_share * peak - effective, 0.0)
    zero = np.zeros(n_jobs)
    lost = {
        "failed_chip": np.where(failed, stall_loss, zero),
        "stale_telemetry": np.where(silent & ~failed, stall_loss, zero),
        "straggler": np.where(stalled | ~slowest_is_straggler, zero, terms["compute"]),
        "thermal_throttle": np.where(stalled | slowest_is_straggler, zero, terms["compute"]),
        "degraded_neuronlink": np.where(stalled, zero, terms["neuronlink"]),
        "degraded_efa": np.where(stalled, zero, terms["efa"]),
    }

    # Culprits.  A running job's: its unhealthy chips, links and ports, each costing the drop of its term
    # were it healthy.  A stalled job's: the entities that stall it, sharing its loss.
    shares_of_step = params.shares
    go = np.where(stalled, 0.0, effective)
    slow_chips = np.flatnonzero((chip_state == STRAGGLER) | (chip_state == THROTTLED))
    slow_chip_job = node_job[topo.chip_node[slow_chips]]
    ours = slow_chip_job >= 0
    slow_chips, slow_chip_job = slow_chips[ours], slow_chip_job[ours]
    healthy_speed = np.where(chip_state.reshape(n_nodes, cpn) == HEALTHY, speed, np.inf)
    job_healthy_speed = np.full(n_jobs, np.inf, speed.dtype)
    np.minimum.at(job_healthy_speed, held_job, healthy_speed.min(axis=1)[held])
    found = [
        _ranked(_CHIP, slow_chip_job, slow_chips,
                np.clip(speed.reshape(-1)[slow_chips], _FLOOR, 1.0).astype(np.float64),
                np.clip(job_healthy_speed, _FLOOR, 1.0).astype(np.float64), go * (1.0 - shares_of_step.comm_share)),
        _ranked(_NEURONLINK, link_job, links, np.clip(link_fraction, _FLOOR, 1.0).astype(np.float64),
                np.ones(n_jobs), go * shares_of_step.comm_nl_share),
        _ranked(_EFA, port_job, ports, np.clip(port_fraction, _FLOOR, 1.0).astype(np.float64),
                np.ones(n_jobs), go * shares_of_step.comm_efa_share),
    ]
    failed_chips = np.flatnonzero(chip_state == FAILED)
    silent_nodes = np.flatnonzero(node_silent)
    stall_job = np.concatenate([node_job[topo.chip_node[failed_chips]], node_job[silent_nodes]])
    stall_kind = np.repeat(np.array([_CHIP, _NODE], np.int64), [failed_chips.size, silent_nodes.size])
    stall_ids = np.concatenate([failed_chips, silent_nodes]).astype(np.int64)
    ours = stall_job >= 0
    stall_job, stall_kind, stall_ids = stall_job[ours], stall_kind[ours], stall_ids[ours]
    stallers = np.bincount(stall_job, minlength=n_jobs)
    with np.errstate(invalid="ignore", divide="ignore"):
        each = np.where(stalled, stall_loss / stallers, 0.0)
    found.append(_Candidates(stall_job, stall_kind, stall_ids, each[stall_job]))
    kind, ids, flops = _top(found, n_jobs, TOP_CULPRITS)

    return JobLoss(
        chips=chips, peak=peak, effective=effective, lost={c: lost[c] for c in CAUSES}, stalled=stalled,
        s_min=s_min.astype(np.float64), f_nl=f_nl, f_efa=f_efa, culprit_kind=kind, culprit_id=ids, culprit_flops=flops,
        unallocated_peak=unallocated,
    )


def _slowest(n_jobs: int, job: I64, fraction: F32) -> F64:
    """Return each job's lowest path fraction, floored as core/model.py floors it (1: every path healthy)."""
    out = np.ones(n_jobs, np.float32)
    np.minimum.at(out, job, fraction)
    return np.clip(out, _FLOOR, 1.0).astype(np.float64)
