"""``/api/v1/fleet`` (the whole watched fleet in one small document) and
``/api/v1/sites`` (one row a site), from the snapshot only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rainierd.api._common import columns, floats, number
from rainierd.api.ultraservers import ENTITIES, UltraServerTable
from rainierd.core.detect import STATE_NAMES
from rainierd.exporter import goodput
from rainierd.fleet import CAUSES, Topology
from rainierd.fleet.ids import entity_fields, site_id
from rainierd.monitor import MonitorSnapshot


def fleet(topo: Topology, snap: MonitorSnapshot) -> dict[str, Any]:
    """Return the fleet document of ``snap`` (computed)."""
    tp = snap.throughput
    # Over the chips that know them; null where none does (core/throughput.py).
    peak, effective = tp.fleet_peak, float(tp.shown("effective", "fleet")[0])
    lost = snap.lost.fleet() if snap.lost is not None else dict.fromkeys(CAUSES, 0.0)
    counts = snap.health.counts() if snap.health is not None else {}
    unhealthy = {entity: {state: counts.get((entity, state), 0) for state in names[1:]}
                 for entity, names in STATE_NAMES.items()}
    backlog = snap.status.backlog
    allocated = snap.job_loss.allocated_goodput_ratio if snap.job_loss is not None else float("nan")
    lost_total = sum(lost.values())
    unallocated = snap.lost.unallocated_fleet() if snap.lost is not None else dict.fromkeys(CAUSES, 0.0)
    return {
        "generation": snap.generation, "tick": tp.tick, "analysed_ticks": snap.analysed_ticks,
        "peak_flops": peak, "delivered_flops": number(float(tp.shown("delivered", "fleet")[0])),
        "effective_flops": number(effective), "effective_share": number(effective / peak) if peak > 0 else None,
        # One model (core/fleetloss.py): the headline is every job's loss plus the capacity in no job's.
        "goodput_ratio": number(goodput(effective, lost_total)),
        "allocated_goodput_ratio": number(allocated),
        "lost_flops": lost_total, "lost_by_cause": {c: lost.get(c, 0.0) for c in CAUSES},
        "lost_unallocated_flops": sum(unallocated.values()),
        "lost_unallocated_by_cause": {c: unallocated.get(c, 0.0) for c in CAUSES},
        "loss_model": "jobs" if snap.lost is not None and snap.lost.n_jobs else "per_ultraserver_fallback",
        "culprits": culprits(topo, snap),
        "chips": {"total": snap.chips_total, "reporting": tp.chips_fresh,
                  "delivered_unknown": int(tp.unknown("delivered", "fleet")[0]),
                  "effective_unknown": int(tp.unknown("effective", "fleet")[0])},
        "sites": topo.n_sites, "ultraservers": int(topo.node_present.reshape(topo.n_ultraservers, -1)
                                                   .any(axis=1).sum()),
        "jobs": snap.jobs.n_jobs if snap.jobs is not None else 0,
        "unhealthy": unhealthy,
        "monitor": {
            "lag_s": number(snap.lag_s), "analysis_s": number(snap.analysis_s),
            "overloaded": backlog.overloaded if backlog is not None else False,
            "backlog_messages": backlog.messages if backlog is not None else 0,
            "connected": snap.status.connection.connected,
        },
    }


def culprits(topo: Topology, snap: MonitorSnapshot) -> list[dict[str, Any]]:
    """Return the fleet's costliest entities (core/fleetloss.py keeps 20), the costliest first: each one's
    kind, canonical id, index, UltraServer, node and hostname (``entity_fields``), the job it slows (null:
    capacity in no job) and the FLOP/s it costs."""
    if snap.lost is None:
        return []
    ids = snap.jobs.ids if snap.jobs is not None else ()
    return [entity_fields(topo, kind, entity) | {"flops": flops, "job": ids[job] if 0 <= job < len(ids) else None}
            for kind, entity, job, flops in snap.lost.culprits() if flops > 0]


def sites(topo: Topology, table: UltraServerTable, snap: MonitorSnapshot) -> dict[str, Any]:
    """Return one row a site: its UltraServers' sums, its throughput and its facility's air."""
    n = topo.n_sites
    site_of = topo.ultraserver_site

    def per_site(values: np.ndarray) -> np.ndarray:
        return np.bincount(site_of, weights=values.astype(np.float64), minlength=n)

    tp = snap.throughput
    share = np.full(n, np.nan)
    site_effective = tp.shown("effective", "site")
    np.divide(site_effective, tp.site_peak, out=share, where=tp.site_peak > 0)
    lost = {c: floats(snap.lost.site[c]) if snap.lost is not None else [0.0] * n for c in CAUSES}
    unhealthy = {e: per_site(table.unhealthy[e]).astype(np.int64).tolist() for e in ENTITIES}
    aggregates = snap.aggregates
    outside = floats(aggregates.site_outside_c) if aggregates is not None else [None] * n
    water = aggregates.site_water_assist if aggregates is not None else np.full(n, np.nan)
    names = topo.names.sites
    return {"generation": snap.generation, "tick": tp.tick, "total": n, "sites": columns(n, {
        "id": [site_id(s) for s in range(n)], "index": list(range(n)), "name": list(names) if names else [None] * n,
        "ultraservers": per_site(table.present).astype(np.int64).tolist(),
        "chips_present": per_site(table.chips_present).astype(np.int64).tolist(),
        "chips_reporting": per_site(table.chips_reporting).astype(np.int64).tolist(),
        "peak_flops": floats(tp.site_peak), "effective_flops": floats(site_effective),
        "effective_share": floats(share),
        "lost_flops": floats(np.sum([snap.lost.site[c] for c in CAUSES], axis=0, dtype=np.float64).reshape(n))
        if snap.lost is not None else [0.0] * n,
        "lost_by_cause": [dict(zip(CAUSES, v, strict=True)) for v in zip(*lost.values(), strict=True)],
        "goodput_ratio": [number(goodput(e, lo)) for e, lo in zip(
            site_effective.tolist(), snap.lost.total("site").tolist() if snap.lost is not None else [0.0] * n,
            strict=True)],
        "unhealthy": [dict(zip(ENTITIES, v, strict=True)) for v in zip(*unhealthy.values(), strict=True)],
        "outside_c": outside,
        "water_assist": [None if np.isnan(w) else bool(w) for w in water.tolist()],
    })}
