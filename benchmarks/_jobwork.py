"""``benchmarks core --training-jobs N``: what a fleet's training jobs add to the
monitor's tick and to its scrape, measured in the same process and run as
the tick itself.

The jobs are the simulator's job mix (``JobSchedule.fill``: a flagship of
half the fleet, then heavy-tailed sizes down to one UltraServer, 15 % of
the UltraServers idle), announced as the simulator announces them (retained
job documents), heard by the monitor's ``JobFeed`` and resolved by it once,
as the monitor does whenever the documents change.

Each measured tick then pays, besides bench core's three stages:

* ``job_loss``: the fleet's pricing (core/fleetloss.py: every job, and the
  capacity in no job per UltraServer), as ``MonitorCore`` prices it every
  tick (without training jobs bench core's detect stage pays it instead);
* ``phases``: each job's phase (core/jobphase.py), as ``MonitorCore``
  follows it every tick;
* ``render``: the exporter's job families (exporter/jobs.py) of that tick,
  as the daemon re-renders the scrape after each analysis;

and, for the A/B, the same three calls with no job (what a monitor that hears
no job pays).  Jobs change nothing else in the analysis or the scrape, so
the tick without jobs is the three stages plus those three calls, the tick
with jobs the three stages plus the job work, both from the same ticks.

After the last tick the whole scrape is rendered with and without the jobs
(the daemon's exporter, ``build_exporter``): series per family (parsed with
``prometheus_client``), bytes, gzipped bytes and render time.
"""

from __future__ import annotations

import gzip
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from rainierd.core.analysis import MonitorCore
from rainierd.core.fleetloss import LostByCause, price_fleet
from rainierd.core.jobmodel import JobLoss
from rainierd.core.jobphase import JobPhases, PhaseTracker
from rainierd.core.jobs import JobMembership
from rainierd.core.model import HealthyShares
from rainierd.core.throughput import Throughput
from rainierd.exporter.jobs import JobFamilies
from rainierd.exporter.wiring import build_exporter
from rainierd.fleet.topology import Topology
from rainierd.monitor.jobs import JobFeed
from rainierd.monitor.snapshot import IngestCounts, MonitorSnapshot, MonitorStatus
from rainierd.mqtt.connection import Connection
from rainierd.sim.workload import JobAnnouncer, JobMix, JobSchedule

__all__ = ["JobWork", "job_capacity", "job_mix", "scrape_ab"]
_RENDERS: Final = 3  # whole-scrape renders timed per side, after one untimed


def job_capacity(ultraservers: int) -> int:
    """Return the most jobs the mix fits in a fleet of ``ultraservers`` (one UltraServer each at least)."""
    return JobMix().target_ultraservers(ultraservers)


def job_mix(topo: Topology, n_jobs: int, *, start_s: float, seed: int) -> tuple[JobMembership, dict[str, Any]]:
    """Return the membership of ``n_jobs`` jobs of the simulator's mix over ``topo``, resolved by the monitor's
    ``JobFeed``, and a summary of the mix (sizes, idle capacity, resolve time).

    Raises ValueError when the jobs do not fit (``job_capacity``).
    """
    specs = JobSchedule(topo, 1.0, np.random.default_rng(seed), JobMix()).fill(n_jobs)
    feed = JobFeed(topo)
    for topic, payload in JobAnnouncer(source="bench").changes((j.id, j.ultraservers, start_s) for j in specs):
        feed.hear(topic, payload)
    started = time.perf_counter()
    members = feed.resolve(feed.pending())
    resolve_s = time.perf_counter() - started
    sizes = np.array([len(j.ultraservers) for j in specs])
    allocated = int(sizes.sum())
    summary = {
        "jobs": members.n_jobs,
        "ultraservers_per_job": {"min": int(sizes.min()), "median": float(np.median(sizes)),
                                 "p90": float(np.percentile(sizes, 90)), "max": int(sizes.max()),
                                 "one_ultraserver_jobs": int((sizes == 1).sum())},
        "allocated_ultraservers": allocated,
        "idle_ultraservers": topo.n_ultraservers - allocated,
        "allocated_nodes": int((members.node_job >= 0).sum()),
        "resolve_s": resolve_s,  # once per change of the documents, not per tick
    }
    return members, summary


def _snapshot(
    throughput: Throughput, members: JobMembership, loss: JobLoss, lost: LostByCause,
    phases: JobPhases | None = None, *, chips: int,
) -> MonitorSnapshot:
    """Return the fields of a snapshot the job families read."""
    return MonitorSnapshot(generation=throughput.tick + 1, throughput=throughput, chips_total=chips,
                           analysis_s=0.0, analysed_ticks=throughput.tick + 1, jobs=members, job_loss=loss,
                           lost=lost, job_phases=phases)


@dataclass(eq=False)
class JobWork:
    """Each tick's job work, with the jobs and without (the A/B), each call timed; the per-node shares kept
    across ticks as ``MonitorCore`` keeps them."""

    core: MonitorCore
    members: JobMembership
    mix: dict[str, Any] = field(default_factory=dict)
    # Seconds per measured tick: job_loss, render, job_loss_no_jobs, render_no_jobs.
    times: dict[str, list[float]] = field(default_factory=dict, init=False)
    # Each side as the daemon holds it: its own per-node shares, one family renderer over its latest snapshot.
    sides: dict[str, tuple[JobMembership, HealthyShares, JobFamilies, PhaseTracker]] = field(init=False)
    latest: dict[str, MonitorSnapshot] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        n_nodes, halflife_s = self.core.topology.n_nodes, self.core.model.healthy_share_halflife_s
        self.sides = {
            suffix: (members, HealthyShares.empty(n_nodes, halflife_s=halflife_s),
                     JobFamilies(self.core.topology, partial(self.latest.get, suffix)), PhaseTracker())
            for suffix, members in (("", self.members), ("_no_jobs", JobMembership.empty(n_nodes)))
        }

    @classmethod
    def of(cls, core: MonitorCore, n_jobs: int, *, start_s: float, seed: int) -> JobWork:
        """Return the job work of ``n_jobs`` jobs of the mix over ``core``'s fleet (``job_mix``)."""
        members, mix = job_mix(core.topology, n_jobs, start_s=start_s, seed=seed)
        return cls(core, members, mix)

    def tick(self, throughput: Throughput, *, keep: bool) -> None:
        """Price and render this tick's jobs, then the same without jobs; ``keep`` the seconds of each."""
        for suffix, (members, shares, families, tracker) in self.sides.items():
            started = time.perf_counter()
            loss, lost = price_fleet(throughput, self.core.detector, members, params=self.core.model, shares=shares)
            priced = time.perf_counter()
            phases = tracker.update(members, util=self.core.state.chips.gauges["util"],
                                    chip_fresh=throughput.chip_fresh, stalled=loss.stalled, now_s=self.core.state.now_s)
            phased = time.perf_counter()
            self.latest[suffix] = _snapshot(throughput, members, loss, lost, phases,
                                            chips=self.core.topology.n_present_chips)
            rendering = time.perf_counter()
            families.render()
            if keep:
                self.times.setdefault(f"job_loss{suffix}", []).append(priced - started)
                self.times.setdefault(f"phases{suffix}", []).append(phased - priced)
                self.times.setdefault(f"render{suffix}", []).append(time.perf_counter() - rendering)

    def report(self, base: list[float]) -> dict[str, Any]:
        """Return the mix, the job work per tick and its share of the tick, tick by tick (``base``: the same
        ticks' seconds of bench core's three stages), and the whole scrape with and without the jobs."""
        t = self.times
        work = [a + b + c for a, b, c in zip(t["job_loss"], t["phases"], t["render"], strict=True)]
        idle = [a + b + c for a, b, c in zip(t["job_loss_no_jobs"], t["phases_no_jobs"], t["render_no_jobs"],
                                             strict=True)]
        with_jobs = [s + w for s, w in zip(base, work, strict=True)]
        per_tick = {name: _percentiles(values) for name, values in t.items()}
        per_tick |= {"work": _percentiles(work), "tick_with_jobs": _percentiles(with_jobs),
                     "tick_without_jobs": _percentiles([s + w for s, w in zip(base, idle, strict=True)])}
        return {
            "mix": self.mix,
            "per_tick_s": per_tick,
            # Of the tick with jobs, each tick's own: the job work (job_loss + phases + render), and job_loss alone.
            "share_of_tick": _percentiles([w / s for w, s in zip(work, with_jobs, strict=True)]),
            "job_loss_share_of_tick": _percentiles([w / s for w, s in zip(t["job_loss"], with_jobs, strict=True)]),
            "scrape": scrape_ab(self.core, self.members),
        }


def _percentiles(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p99": float(np.percentile(values, 99))}


def _scrape(snap: MonitorSnapshot, topo: Topology) -> tuple[dict[str, Any], Counter[str]]:
    """Return the whole scrape's figures over ``snap`` and its series per family."""
    exporter = build_exporter(topo, lambda: snap)
    body = exporter.render()
    renders = []
    for _ in range(_RENDERS):
        started = time.perf_counter()
        body = exporter.render()
        renders.append(time.perf_counter() - started)
    series: Counter[str] = Counter()
    for family in text_string_to_metric_families(body.decode()):
        series[family.name] += len(family.samples)
    figures = {"series": sum(series.values()), "bytes": len(body), "gzip_bytes": len(gzip.compress(body, 6)),
               "render_s_median": statistics.median(renders)}
    return figures, series


def scrape_ab(core: MonitorCore, members: JobMembership) -> dict[str, Any]:
    """Return the whole scrape with the jobs and without: series, bytes and render time of each, and the series
    the jobs add per family.  Runs one more analysis (no new telemetry) to fill a full snapshot."""
    topo = core.topology
    analysis = core.analyse([], now_s=core.state.now_s, jobs=members)
    status = MonitorStatus(ingest=IngestCounts.of(core.stats), connection=Connection(connected=True),
                           loop_lag_worst_s=0.0)
    with_jobs = MonitorSnapshot.of(analysis, generation=1, chips_total=topo.n_present_chips, analysis_s=0.0,
                                   analysed_ticks=core.analyses, events=Counter(), lag_s=0.1, status=status)
    empty = JobMembership.empty(topo.n_nodes)
    empty_loss, empty_lost = price_fleet(analysis.throughput, core.detector, empty, params=core.model)
    without = replace(with_jobs, jobs=empty, job_loss=empty_loss, lost=empty_lost)
    (a, a_series), (b, b_series) = _scrape(with_jobs, topo), _scrape(without, topo)
    added = {name: a_series[name] - b_series[name] for name in sorted(a_series | b_series)
             if a_series[name] != b_series[name]}
    loss = analysis.job_loss
    assert loss is not None
    return {"with_jobs": a, "without_jobs": b, "series_added": a["series"] - b["series"],
            "bytes_added": a["bytes"] - b["bytes"], "series_added_by_family": added,
            # A culprit series needs an unhealthy entity in the job: bench core's feed is a healthy fleet.
            "culprit_series": added.get("rainier_job_culprit_flops", 0),
            "jobs_losing": int((loss.lost_total > 0).sum()), "jobs_stalled": int(loss.stalled.sum())}
