"""``/api/v1/jobs`` (a page of jobs, the costliest first by default) and
``/api/v1/jobs/<id>`` (one job: its UltraServers, culprits, phase and loss
by cause), from the snapshot's ``jobs``, ``job_loss`` and ``job_phases``.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from rainierd._types import I64
from rainierd.api._common import ApiError, Page, columns, floats, order
from rainierd.api.ultraservers import UltraServerTable
from rainierd.core import PHASE_NAMES, JobLoss, JobMembership
from rainierd.fleet import CAUSES, Topology
from rainierd.fleet.ids import entity_fields
from rainierd.monitor import MonitorSnapshot

SORTS: Final = {"lost": True, "id": False, "goodput": False, "chips": True}
"""Sort keys of the list and whether each runs descending (worst or largest first) by default."""


def _priced(snap: MonitorSnapshot) -> tuple[JobMembership, JobLoss] | None:
    jobs, loss = snap.jobs, snap.job_loss
    if jobs is None or loss is None or loss.n_jobs != jobs.n_jobs:
        return None
    return jobs, loss


def _ultraservers(topo: Topology, jobs: JobMembership) -> list[I64]:
    """Return each job's UltraServers, ascending (one pass over the nodes)."""
    held = np.flatnonzero(jobs.node_job >= 0)
    pairs = np.unique(jobs.node_job[held].astype(np.int64) * topo.n_ultraservers + topo.node_ultraserver[held])
    owners, us = np.divmod(pairs, topo.n_ultraservers)
    return np.split(us, np.searchsorted(owners, np.arange(1, jobs.n_jobs)))


def _rows(snap: MonitorSnapshot, jobs: JobMembership, loss: JobLoss, ids: I64, held: list[I64],
          ) -> list[dict[str, Any]]:
    phases = snap.job_phases
    phased = phases is not None and phases.n_jobs == loss.n_jobs
    numbers = ids.tolist()
    return columns(ids.size, {
        "id": [jobs.ids[j] for j in numbers], "name": [jobs.names[j] for j in numbers],
        "owner": [jobs.owners[j] for j in numbers], "scheduler": [jobs.schedulers[j] for j in numbers],
        "chips": loss.chips[ids].tolist(), "ultraservers": [int(held[j].size) for j in numbers],
        "peak_flops": floats(loss.peak[ids]), "effective_flops": floats(loss.effective[ids]),
        "goodput_ratio": floats(loss.goodput_ratio[ids]), "lost_flops": floats(loss.lost_total[ids]),
        "lost_by_cause": [dict(zip(CAUSES, v, strict=True))
                          for v in zip(*(floats(loss.lost[c][ids]) for c in CAUSES), strict=True)],
        "stalled": loss.stalled[ids].tolist(),
        "phase": [PHASE_NAMES[p] for p in phases.phase[ids].tolist()] if phased and phases else [None] * ids.size,
        "phase_s": floats(phases.phase_s[ids]) if phased and phases else [None] * ids.size,
    })


def listing(topo: Topology, snap: MonitorSnapshot, paging: Page) -> dict[str, Any]:
    """Return one page of the jobs, sorted as ``paging`` says."""
    head = {"generation": snap.generation, "tick": snap.throughput.tick, "offset": paging.offset,
            "limit": paging.limit, "sort": paging.sort, "order": "desc" if paging.descending else "asc"}
    priced = _priced(snap)
    if priced is None:
        return head | {"total": 0, "jobs": []}
    jobs, loss = priced
    ids = np.arange(jobs.n_jobs, dtype=np.int64)
    key = {"lost": loss.lost_total, "id": ids.astype(np.float64), "goodput": loss.goodput_ratio,
           "chips": loss.chips.astype(np.float64)}[paging.sort]
    ranked = ids if paging.sort == "id" and not paging.descending else order(ids, key, descending=paging.descending)
    chosen = ranked[paging.offset:paging.offset + paging.limit]
    return head | {"total": jobs.n_jobs, "jobs": _rows(snap, jobs, loss, chosen, _ultraservers(topo, jobs))}


def job(topo: Topology, table: UltraServerTable, snap: MonitorSnapshot, job_id: str) -> dict[str, Any]:
    """Return job ``job_id``'s document; 404 if no job has that id."""
    priced = _priced(snap)
    number = -1 if priced is None else int(np.searchsorted(priced[0].ids, job_id))
    if priced is None or number >= priced[0].n_jobs or priced[0].ids[number] != job_id:
        raise ApiError("404 Not Found", f"no job {job_id[:200]!r} (see /api/v1/jobs)")
    jobs, loss = priced
    held = _ultraservers(topo, jobs)
    [row] = _rows(snap, jobs, loss, np.array([number], np.int64), held)
    us = held[number]
    culprits = [entity_fields(topo, kind, entity) | {"flops": flops}
                for kind, entity, flops in loss.culprits(number) if flops > 0]
    phases = snap.job_phases
    return {"generation": snap.generation, "tick": snap.throughput.tick, "job": row | {
        "source": jobs.sources[number], "start_s": float(jobs.start_s[number]),
        "restarting": bool(jobs.restarting[number]), "nodes_held": int(jobs.nodes_held[number]),
        "nodes_claimed": int(jobs.nodes_claimed[number]), "lost_nodes": int(jobs.lost_nodes[number]),
        "unknown_nodes": int(jobs.unknown_nodes[number]), "failed": bool(loss.failed[number]),
        "slowest_speed": float(loss.s_min[number]), "slowest_is_straggler": bool(loss.slowest_is_straggler[number]),
        "path_fraction": {"neuronlink": float(loss.f_nl[number]), "efa": float(loss.f_efa[number])},
        "stall_s": float(phases.stall_s[number]) if phases is not None and phases.n_jobs == loss.n_jobs else None,
    }, "culprits": culprits, "ultraservers": table.rows(topo, us.astype(np.int64))}
