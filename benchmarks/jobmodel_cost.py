"""What the fleet's pricing (``rainierd.core.fleetloss.price_fleet``: every job,
and each UltraServer's capacity in no job) costs a tick at rainier scale,
with the jobs and without any.

``python -m benchmarks.jobmodel_cost [--topology rainier] [--jobs 1000] [--repeat 30]``

and what the jobs add to a scrape (``rainierd.exporter.jobs``): series,
bytes and render time of the job families with every job exported, ids and
names as a Slurm cluster's (``trn-east/41871``, ``llm-pretrain-0001``).

A synthetic state, not a simulated feed: the model's cost is a handful of
passes over the fleet's chips and nodes plus work on the unhealthy entities
alone, so what matters is the fleet's size, the number of jobs and of
unhealthy entities, not the values.  The state: every chip at 0.62 of peak;
``--jobs`` jobs of contiguous nodes (7 to 48 at rainier with 1,000 jobs: most
straddle UltraServers, many hold part of one), about 90 % of the nodes allocated; 300 degraded
NeuronLinks, 100 degraded EFA ports, 50 throttled chips, 20 stragglers, 5
failed chips and 3 lost nodes.  Prints one JSON line: median and p99 ms of
``price_fleet`` with the jobs and with none, wall and this process's CPU (on a
shared machine the CPU time is the closer to what an idle one takes), and
the scrape's figures.

``python -m benchmarks core --training-jobs N`` measures the job work in a
real tick of a simulated fleet, as a share of that tick, and the whole
scrape with and without jobs; its fleet is healthy, so this script stays
for what only an unhealthy state shows: the culprit work and series.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd._types import F64
from rainierd.core.analysis import MonitorCore
from rainierd.core.detect.chips import FAILED, STRAGGLER, THROTTLED
from rainierd.core.fleetloss import price_fleet
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.core.model import HealthyShares
from rainierd.core.throughput import Throughput
from rainierd.exporter.jobs import JobFamilies
from rainierd.fleet.topology import Topology, build_topology
from rainierd.monitor.snapshot import MonitorSnapshot
from rainierd.wire.jobs import JobDocument

_UTIL = 0.62
_NODE_LOST = 2


def measure(topology: str, *, n_jobs: int, repeat: int, seed: int) -> dict[str, Any]:
    """Return the per-call cost of both models on a synthetic state of ``topology`` with ``n_jobs`` jobs."""
    rng = np.random.default_rng(seed)
    topo = build_topology(topology)
    core = MonitorCore(topo)
    det, peak = core.detector, core.peak_flops_per_chip
    det.state.now_s = 0.0
    effective = np.full(topo.n_chips, peak * _UTIL)
    def by(group: npt.NDArray[np.int64], values: F64, n: int) -> F64:
        return np.bincount(group, weights=values, minlength=n).astype(np.float64)

    us = by(topo.chip_ultraserver, effective, topo.n_ultraservers)
    us_peak = np.full(topo.n_ultraservers, peak * 64)
    site = by(topo.ultraserver_site, us, topo.n_sites)
    site_peak = by(topo.ultraserver_site, us_peak, topo.n_sites)
    none = np.zeros(topo.n_ultraservers, np.int64)
    throughput = Throughput(0, np.ones(topo.n_chips, bool), effective, effective, us_peak, us, us,
                            site_peak, site, site, topo.ultraserver_site.astype(np.int64),
                            np.full(topo.n_ultraservers, 64, np.int64), none, none)

    mean = int(0.9 * topo.n_nodes) // n_jobs  # about 90 % of the nodes in jobs
    sizes = rng.integers(max(1, mean // 4), max(2, 2 * mean - mean // 4), n_jobs)
    gaps = rng.multinomial(topo.n_nodes - int(sizes.sum()), np.ones(n_jobs + 1) / (n_jobs + 1))[:n_jobs]
    starts = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(sizes)[:-1]])
    docs = [JobDocument(v=1, id=f"trn-east/{41871 + j}", name=f"llm-pretrain-{j:04d}", owner="alice",
                        scheduler="slurm", source="bench",
                        nodes=[f"n{n}" for n in range(int(s), int(s + k))], start_s=0.0)
            for j, (s, k) in enumerate(zip(starts, sizes, strict=True))]
    members = resolve_jobs(NameIndex.of(topo), docs)

    links = rng.choice(topo.n_links, 300, replace=False)
    det.links.tracker.state[links] = 1
    det.links.now_ratio[links] = 0.6
    ports = rng.choice(topo.n_efa, 100, replace=False)
    det.efa.tracker.state[ports] = 1
    det.efa.share[ports] = 0.7
    chips = rng.choice(topo.n_chips, 75, replace=False)
    det.state.chips.gauges["clock_ratio"][chips[:50]] = 0.85
    det.chips.tracker.state[chips[:50]] = THROTTLED
    det.chips.tracker.state[chips[50:70]] = STRAGGLER
    det.chips.efficiency[chips[50:70]] = 0.9
    det.chips.tracker.state[chips[70:]] = FAILED
    det.cooling.nodes.state[rng.choice(topo.n_nodes, 3, replace=False)] = _NODE_LOST

    shares = HealthyShares.empty(topo.n_nodes, halflife_s=60.0)
    none_shares = HealthyShares.empty(topo.n_nodes, halflife_s=60.0)
    empty = JobMembership.empty(topo.n_nodes)
    timings: dict[str, list[float]] = {"price_fleet": [], "price_fleet_no_jobs": [], "price_fleet_cpu": [],
                                       "price_fleet_no_jobs_cpu": []}
    for tick in range(repeat + 1):
        det.state.now_s = float(tick)
        started, started_cpu = time.perf_counter(), time.process_time()
        loss, lost = price_fleet(throughput, det, members, params=core.model, shares=shares)
        middle, middle_cpu = time.perf_counter(), time.process_time()
        price_fleet(throughput, det, empty, params=core.model, shares=none_shares)
        ended, ended_cpu = time.perf_counter(), time.process_time()
        if tick:  # the first call pays first-touch page faults
            timings["price_fleet"].append(middle - started)
            timings["price_fleet_no_jobs"].append(ended - middle)
            timings["price_fleet_cpu"].append(middle_cpu - started_cpu)
            timings["price_fleet_no_jobs_cpu"].append(ended_cpu - middle_cpu)
    snap = MonitorSnapshot(generation=1, throughput=throughput, chips_total=topo.n_present_chips, analysis_s=0.0,
                           analysed_ticks=1, events=Counter(), jobs=members, job_loss=loss, lost=lost)
    return {
        "scrape": _scrape(topo, snap, n_jobs=n_jobs),
        "topology": topology, "chips": topo.n_chips, "nodes": topo.n_nodes, "links": topo.n_links,
        "jobs": members.n_jobs, "allocated_nodes": int((members.node_job >= 0).sum()),
        "stalled_jobs": int(loss.stalled.sum()), "jobs_losing": int((loss.lost_total > 0).sum()),
        "ms": {name: {"median": 1e3 * statistics.median(v), "p99": 1e3 * float(np.percentile(v, 99))}
               for name, v in timings.items()},
    }


def _scrape(topology: Topology, snap: MonitorSnapshot, *, n_jobs: int) -> dict[str, Any]:
    """Return the job families' series, bytes and median render time with every job exported."""
    families = JobFamilies(topology, lambda: snap, max_jobs=n_jobs)
    renders = []
    for _ in range(5):
        started = time.perf_counter()
        text = families.render()
        renders.append(time.perf_counter() - started)
    samples = [line for line in text.decode().splitlines() if not line.startswith("#")]
    culprits = sum(1 for line in samples if line.startswith("rainier_job_culprit_flops{"))
    return {"series": len(samples), "culprit_series": culprits, "bytes": len(text),
            "render_ms": 1e3 * statistics.median(renders)}


def main() -> None:
    """Measure and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--topology", default="rainier")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(measure(args.topology, n_jobs=args.jobs, repeat=args.repeat, seed=args.seed)))


if __name__ == "__main__":
    main()
