"""The jobs a health event's entity slows, and the FLOP/s it costs each: what
an operator paged by an event asks first, whose training it hurts and how much.

It exists because the detectors (``core/detect``) know no jobs and the job
model (``core/jobmodel.py``) knows no events: a tick's events come out before
its jobs are priced, and this joins the two, over the tick's events only (no
pass over the fleet: a few lookups per kind of entity that changed).

**Which jobs.** The jobs whose nodes hold the entity, from the membership
itself, not from the culprit lists (those keep each job's top 5, so a sixth
degraded link would belong to no job): a chip's, an EFA port's and a node's
is its node's job; a NeuronLink's, the job holding both its ends' nodes (a
link between two jobs' nodes carries neither's collectives, as the job model
prices it); an UltraServer's, the jobs of its nodes, so at most one a node
(4): that is the bound, no list is cut. The monitor's feed slows no job. An
entity in no job slows none: its list is empty.

**What it costs.** What the job model charges the entity
(``JobLoss.charged``: the figure ``rainier_job_culprit_flops`` shows when it
is among its job's top 5), so an event and the job's series never disagree.
A node or an UltraServer costs what the model charges it and its chips (a
cooling fault costs through the chips it throttles, which raise their own
events too). A stale chip stalls its job through its node, which the model
charges once however many of its chips are silent: each stale chip's event
carries its node's charge. An unhealthy entity the model charges nothing now
(no slower than another of its job's entities of the same kind, or in a job
another member stalls) is still listed, with 0: it belongs to the job, and
is the next to cost it once the worse one is fixed.

A clear (back to healthy) carries no jobs.

Pure: events, a membership, their ``JobLoss`` and the topology in, events out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from rainierd._types import F64, I64, B
from rainierd.core.detect import Event, JobCost
from rainierd.core.jobmodel import JobLoss
from rainierd.core.jobs import JobMembership
from rainierd.fleet import Topology

_A = TypeVar("_A", I64, F64)
# An entity kind's pricing: its ids (and which of them went stale) to the jobs they slow and what they cost each,
# shaped (entities, places); a place in no job is -1.
_Pricing = Callable[[I64, B, JobMembership, JobLoss, Topology], tuple[I64, F64]]


def with_jobs(events: Sequence[Event], *, membership: JobMembership, loss: JobLoss, topology: Topology) -> list[Event]:
    """Return ``events`` with each unhealthy one's jobs (``Event.jobs``): the costliest first, equal costs in job
    id order.  ``loss`` is ``membership``'s pricing of the same tick."""
    out = list(events)
    if membership.n_jobs == 0:
        return out
    by_kind: dict[str, list[int]] = {}
    for index, event in enumerate(events):
        if event.after != "healthy" and event.entity in _PRICING:
            by_kind.setdefault(event.entity, []).append(index)
    for entity, at in by_kind.items():
        ids = np.array([events[i].id for i in at], np.int64)
        stale = np.array([events[i].after == "stale" for i in at], np.bool_)
        place_job, place_flops = _PRICING[entity](ids, stale, membership, loss, topology)
        rows = np.repeat(np.arange(ids.size), place_job.shape[1])
        job, flops = place_job.ravel(), place_flops.ravel()
        held = job >= 0
        # One cost a (event, job): an UltraServer's nodes of one job add up.
        pairs, inverse = np.unique(rows[held] * membership.n_jobs + job[held], return_inverse=True)
        totals = np.bincount(inverse, weights=flops[held], minlength=pairs.size)
        row, job = pairs // membership.n_jobs, pairs % membership.n_jobs
        order = np.lexsort((job, -totals, row))  # jobs are numbered in their ids' order
        costs: dict[int, list[JobCost]] = {}
        for r, j, f in zip(row[order].tolist(), job[order].tolist(), totals[order].tolist(), strict=True):
            costs.setdefault(r, []).append(JobCost(membership.ids[j], f))
        for r, listed in costs.items():
            out[at[r]] = dataclasses.replace(events[at[r]], jobs=tuple(listed))
    return out


def _chips(ids: I64, stale: B, jobs: JobMembership, loss: JobLoss, topo: Topology) -> tuple[I64, F64]:
    node = topo.chip_node[ids]
    _, own = loss.charged("chip", ids)
    _, through_node = loss.charged("node", node)
    return _column(jobs.node_job[node].astype(np.int64)), _column(own + np.where(stale, through_node, 0.0))


def _links(ids: I64, _stale: B, jobs: JobMembership, loss: JobLoss, topo: Topology) -> tuple[I64, F64]:
    end_a = jobs.node_job[topo.link_node[ids]]
    end_b = jobs.node_job[topo.chip_node[topo.link_b[ids]]]
    _, flops = loss.charged("neuronlink", ids)
    return _column(np.where(end_a == end_b, end_a, -1).astype(np.int64)), _column(flops)


def _ports(ids: I64, _stale: B, jobs: JobMembership, loss: JobLoss, topo: Topology) -> tuple[I64, F64]:
    _, flops = loss.charged("efa", ids)
    return _column(jobs.node_job[topo.efa_node[ids]].astype(np.int64)), _column(flops)


def _nodes(ids: I64, _stale: B, jobs: JobMembership, loss: JobLoss, topo: Topology) -> tuple[I64, F64]:
    cpn = topo.chips_per_node
    _, own = loss.charged("node", ids)
    _, chips = loss.charged("chip", (ids[:, None] * cpn + np.arange(cpn)).ravel())
    return _column(jobs.node_job[ids].astype(np.int64)), _column(own + chips.reshape(ids.size, cpn).sum(axis=1))


def _ultraservers(
    ids: I64, stale: B, jobs: JobMembership, loss: JobLoss, topo: Topology,
) -> tuple[I64, F64]:
    npu = topo.nodes_per_ultraserver
    nodes = (ids[:, None] * npu + np.arange(npu)).ravel()
    job, flops = _nodes(nodes, np.repeat(stale, npu), jobs, loss, topo)
    return job.reshape(ids.size, npu), flops.reshape(ids.size, npu)


def _column(values: _A) -> _A:
    """Return ``values`` as one column: one place an entity."""
    return values.reshape(-1, 1)


_PRICING: dict[str, _Pricing] = {
    "chip": _chips, "neuronlink": _links, "efa": _ports, "node": _nodes, "ultraserver": _ultraservers,
}
