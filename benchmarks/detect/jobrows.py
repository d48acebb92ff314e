"""Job rows of the detection benchmark (issue 21, "What it must show"): runs
whose faults sit inside jobs spanning several UltraServers, and what the
monitor charges each job against what the simulator knows it lost.

Each job-row run is a fleet of ``JOB_ROW_ULTRASERVERS`` split into fixed jobs
of ``JOB_SIZES`` UltraServers (a seed draws which UltraServers each holds),
with one fault in each of ``FAULTED_PER_RUN`` of its multi-UltraServer jobs,
on a seed-drawn UltraServer of the job; the other jobs hold no fault.  The
jobs are fixed (``FleetModel(jobs=...)``, no checkpoint, evaluation or
restart in the run's few minutes), so a fault's cost is the only loss a job
has, and the run has no diurnal swing, so a job without a fault truly loses
nothing: whatever the monitor charges it is another job's loss leaking, or
a false detection.  With ``checkpoints`` every job checkpoints for
``CHECKPOINT_S`` every ``CHECKPOINT_EVERY_S`` (one or two checkpoints begin
during a fault): a checkpoint is a phase the truth charges to no cause, so
the rows then say whether one disturbs the monitor's per-job loss.

The monitor hears the jobs as it would from the broker: the simulator's
``JobAnnouncer`` turns the running jobs into the retained documents of the
job contract, the monitor's own ``JobFeed`` hears them and resolves them
against the topology's names, and that membership is what ``MonitorCore``
prices jobs with; the simulator's internal arrays never reach the monitor.

``jobgrading`` grades what a run records here.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np

from benchmarks.detect.placing import FAULT_S, JITTER_S, SLOW_FAULT_S, TAIL_S, WARMUP_S, Cell, place, ticks_of
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.fleetloss import price_fleet
from rainierd.core.jobmodel import CULPRIT_KINDS
from rainierd.core.jobs import JobMembership
from rainierd.core.model import HealthyShares
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.topology import build_fleet
from rainierd.monitor.jobs import JobFeed
from rainierd.sim import FleetModel, FleetParams
from rainierd.sim.faults import SEVERITIES, TARGETS, Fault, FaultKind, fault_ultraservers
from rainierd.sim.frames import tick_batches
from rainierd.sim.job_training import JobTraining
from rainierd.sim.profile import PROFILES
from rainierd.sim.workload import JobAnnouncer, JobSpec

__all__ = [
    "CHECKPOINT_EVERY_S", "CHECKPOINT_S", "FAULTED_PER_RUN", "JOB_ROW_ULTRASERVERS", "JOB_SIZES", "JobRecord",
    "JobRunResult", "job_cells", "job_row_runs", "run_job_fleet",
]

JOB_ROW_ULTRASERVERS: Final = 12
# UltraServers per job: four jobs that can hold a fault (spanning 2 or 3 UltraServers), two that never do.
JOB_SIZES: Final = (3, 3, 2, 2, 1, 1)
# Faults stay a minority of the UltraServers the detectors judge each one against (a quarter, as in the fault runs).
FAULTED_PER_RUN: Final = 3
# With checkpoints: every job's, from its start (all at once, as a fleet-wide checkpoint policy would).
CHECKPOINT_EVERY_S: Final = 90.0
CHECKPOINT_S: Final = 30.0
# Kinds that cost no FP8 by construction: a CRC storm leaves the bandwidth as it was.
COSTLESS: Final = frozenset({FaultKind.NL_CRC_STORM, FaultKind.DIURNAL})


@dataclass(eq=False)
class JobRecord:
    """One job of one job-row run: its fault (None: it holds none) and, summed over the run's settled
    ticks, the FLOP/s the simulator says it lost and the monitor charged it, by cause, and the FLOP/s the
    monitor put on each of its culprits."""

    job_id: str
    ultraservers: tuple[int, ...]
    fault: Fault | None
    truth: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    estimate: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    culprits: Counter[tuple[str, int]] = field(default_factory=Counter)
    phases: Counter[str] = field(default_factory=Counter)  # settled ticks in each phase (truth)
    peak: float = 0.0  # the job's peak FLOP/s summed over the settled ticks (truth), for scale
    unpriced_ticks: int = 0  # settled ticks the monitor's membership did not hold the job


@dataclass(eq=False)
class JobRunResult:
    """What one job-row run produced, for grading."""

    seed: int  # the model's
    profile: str
    tick_s: float
    ticks: int
    settled_ticks: int
    jobs: list[JobRecord]
    draw: int = 0  # which of the benchmark's seeds drew the run's jobs and faults
    seconds: float = 0.0
    # The fleet's lost FLOP/s by cause, summed over the settled ticks: the simulator's, the monitor's headline
    # (core/fleetloss.py) and what the per-UltraServer fallback alone would say of the same state (each fault
    # charged to its own UltraServer: the headline before issue 34).
    fleet_truth: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    fleet_estimate: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    fleet_fallback: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    # The largest gap, over settled ticks and causes, between the headline and its jobs' losses plus the
    # capacity in no job, relative to the headline (0 when they add up exactly).
    sum_gap_max: float = 0.0


def job_cells(kinds: Collection[FaultKind] | None = None) -> list[Cell]:
    """Return every kind x severity x scope the job rows grade (only ``kinds``, if given): every fault that
    may cost FP8, bar those only a long-horizon test sees (``SLOW_FAULT_S``); placement is drawn per fault."""
    return [Cell(kind, severity, scope, 0)
            for kind, severities in SEVERITIES.items()
            if kind not in COSTLESS and (kinds is None or kind in kinds)
            for severity in severities if (kind, severity) not in SLOW_FAULT_S
            for scope in TARGETS[kind]]


def job_row_runs(
    seeds: int, *, tick_s: float = 1.0, kinds: Collection[FaultKind] | None = None, checkpoints: bool = False,
) -> list[tuple[list[JobSpec], list[Fault], int, int, int]]:
    """Return (jobs, faults, model seed, ticks, drawing seed) of every job-row run: each of ``seeds`` grades
    every cell once; with ``checkpoints`` every job checkpoints (``CHECKPOINT_S`` every ``CHECKPOINT_EVERY_S``).

    The draws do not depend on ``tick_s``: every tick length gets the same jobs and faults at the same times.
    """
    topo = build_fleet(1, JOB_ROW_ULTRASERVERS)
    warmup, jitter = ticks_of(WARMUP_S, tick_s), ticks_of(JITTER_S, tick_s)
    ticks = warmup + jitter + ticks_of(FAULT_S, tick_s) + ticks_of(TAIL_S, tick_s)
    all_cells = job_cells(kinds)
    multi = [j for j, size in enumerate(JOB_SIZES) if size > 1]
    runs = []
    for seed in range(seeds):
        rng = np.random.default_rng(20_000 + seed)
        order = rng.permutation(len(all_cells))
        for chunk in range(0, len(order), FAULTED_PER_RUN):
            picked = [all_cells[i] for i in order[chunk:chunk + FAULTED_PER_RUN]]
            us = rng.permutation(JOB_ROW_ULTRASERVERS)
            bounds = np.cumsum((0, *JOB_SIZES))
            jobs = [JobSpec(id=f"bench/j{j}", ultraservers=tuple(sorted(int(u) for u in us[bounds[j]:bounds[j + 1]])),
                            start_tick=0) for j in range(len(JOB_SIZES))]
            if checkpoints:
                jobs = [replace(j, checkpoint_every_ticks=ticks_of(CHECKPOINT_EVERY_S, tick_s),
                                checkpoint_ticks=ticks_of(CHECKPOINT_S, tick_s)) for j in jobs]
            holders = rng.choice(multi, size=len(picked), replace=False)
            faults = []
            for cell, j in zip(picked, holders, strict=True):
                host = int(rng.choice(jobs[j].ultraservers))
                variant = Cell(cell.kind, cell.severity, cell.scope, int(rng.integers(2)))
                start = warmup + ticks_of(int(rng.integers(0, JITTER_S)), tick_s)
                faults.append(place(variant, topo, host, rng, start, tick_s=tick_s))
            runs.append((jobs, faults, 20_000 + seed * 1_000 + chunk, ticks, seed))
    return runs


def run_job_fleet(
    jobs: list[JobSpec], faults: list[Fault], *, seed: int, ticks: int, noise: float = 1.0, tick_s: float = 1.0,
    profile: str = "ideal", draw: int = 0,
) -> JobRunResult:
    """Simulate ``ticks`` ticks of the job-row fleet running ``jobs`` with ``faults``; return each job's lost
    FP8 by cause (truth and the monitor's) and the monitor's culprits, summed over the settled ticks.

    ``draw`` (the benchmark's seed that drew ``jobs`` and ``faults``) is carried to the result.  Raises
    KeyError for a ``profile`` the simulator does not have.
    """
    started = time.perf_counter()
    topo = build_fleet(1, JOB_ROW_ULTRASERVERS, name=f"bench-jobs-{JOB_ROW_ULTRASERVERS}")
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=0.0,
                       params=FleetParams(noise=noise), faults=faults, jobs=jobs, profile=PROFILES[profile])
    assert isinstance(model.training, JobTraining)
    core = MonitorCore(topo, MonitorConfig(tick_s=tick_s))
    announcer, feed = JobAnnouncer(source="bench"), JobFeed(topo)
    fallback_shares = HealthyShares.empty(topo.n_nodes, halflife_s=core.model.healthy_share_halflife_s)
    no_jobs = JobMembership.empty(topo.n_nodes)
    fleet = {"truth": dict.fromkeys(CAUSES, 0.0), "estimate": dict.fromkeys(CAUSES, 0.0),
             "fallback": dict.fromkeys(CAUSES, 0.0)}
    sum_gap = 0.0
    us_job = {u: j.id for j in jobs for u in j.ultraservers}
    holder = {us_job[int(fault_ultraservers(topo, f)[0])]: f for f in faults}
    records = {j.id: JobRecord(j.id, j.ultraservers, holder.get(j.id)) for j in jobs}
    settled = ticks_of(WARMUP_S / 2, tick_s)
    for tick in range(ticks):
        sample = model.step(tick)
        # The documents a simulator publishes this tick, heard and resolved as the monitor's session does.
        for topic, payload in announcer.changes(model.training.running_jobs()):
            feed.hear(topic, payload)
        membership = feed.resolve(feed.pending())
        frames = [frame for _topic, frame in tick_batches(topo, sample, publisher="bench", nodes_per_batch=128)]
        analysis = core.step(frames, now_s=model.t_of(tick), jobs=membership)
        _jobs, fallback = price_fleet(analysis.throughput, core.detector, no_jobs, params=core.model,
                                      shares=fallback_shares)
        if tick < settled:
            continue
        loss = analysis.job_loss
        headline, unallocated = analysis.lost.fleet(), analysis.lost.unallocated_fleet()
        for cause in CAUSES:
            fleet["truth"][cause] += sample.truth.lost_flops[cause]
            fleet["estimate"][cause] += headline[cause]
            fleet["fallback"][cause] += float(fallback.site[cause].sum())
            jobs_sum = float(loss.lost[cause].sum()) if loss is not None else 0.0
            gap = abs(headline[cause] - jobs_sum - unallocated[cause])
            sum_gap = max(sum_gap, gap / headline[cause] if headline[cause] > 0 else gap)
        number = {} if analysis.jobs is None else {job_id: j for j, job_id in enumerate(analysis.jobs.ids)}
        for truth in sample.truth.jobs:
            record = records[truth.id]
            record.phases[truth.phase] += 1
            record.peak += truth.peak_flops
            for cause in CAUSES:
                record.truth[cause] += truth.lost_flops[cause]
            j = number.get(truth.id)
            if loss is None or j is None:
                record.unpriced_ticks += 1
                continue
            for cause in CAUSES:
                record.estimate[cause] += float(loss.lost[cause][j])
            for kind, ident, flops in zip(loss.culprit_kind[j].tolist(), loss.culprit_id[j].tolist(),
                                          loss.culprit_flops[j].tolist(), strict=True):
                if kind >= 0:
                    record.culprits[CULPRIT_KINDS[kind], ident] += flops
    return JobRunResult(seed, profile, tick_s, ticks, ticks - settled, list(records.values()), draw=draw,
                        seconds=time.perf_counter() - started, fleet_truth=fleet["truth"],
                        fleet_estimate=fleet["estimate"], fleet_fallback=fleet["fallback"], sum_gap_max=sum_gap)
