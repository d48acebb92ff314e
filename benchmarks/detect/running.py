"""Running the detection benchmark: the simulator and the monitor's core in
one process (no MQTT) for every fault run and fault-free control run, of
every profile and tick length, in a pool of worker processes; then each
section graded (``grading``) and compared with the headline tick.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol, TypeVar

from benchmarks._progress import Progress
from benchmarks.detect.fleets import (
    available_profiles,
    fleet_of,
    frames_of,
    monitor_of,
    present_chips,
    profile_job_mix,
    profile_kwargs,
    simulator_of,
)
from benchmarks.detect.grading import RunResult, compare, control, grade
from benchmarks.detect.jobgrading import grade_job_rows
from benchmarks.detect.jobrows import (
    FAULTED_PER_RUN,
    JOB_ROW_ULTRASERVERS,
    JOB_SIZES,
    JobRunResult,
    job_row_runs,
    run_job_fleet,
)
from benchmarks.detect.phases import PhaseLog, phase_control, phase_exposure
from benchmarks.detect.placing import (
    FAULT_S,
    GRACE_S,
    JITTER_S,
    SLOW_FAULT_S,
    SLOW_TAIL_S,
    SLOW_ULTRASERVERS,
    SLOW_WARMUP_S,
    TAIL_S,
    WARMUP_S,
    fault_runs,
    ticks_of,
)
from rainierd.core.analysis import MonitorCore
from rainierd.fleet.pace import CAUSES
from rainierd.sim import FleetParams
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.workload import JobSpec

__all__ = [
    "DEFAULT_PROFILES", "FULL", "HEADLINE_TICK_S", "QUICK", "Job", "JobRowRun", "Scale", "available_profiles",
    "bench_detect", "run_fleet", "run_pool",
]

# The tick length and profile whose figures head the report (and that other ticks compare against): the
# training profile, the telemetry a fleet running training jobs gives (docs/simulator-profiles.md).
HEADLINE_TICK_S: Final = 1.0
DEFAULT_PROFILES: Final = ("training", "realistic", "ideal")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """How much the benchmark runs: seeds and fleet sizes of the fault and control runs."""

    seeds: int
    ultraservers: int
    control_seeds: int
    control_ultraservers: int
    control_seconds: float
    job_row_seeds: int  # each grades every job-row cell once (12 runs of 12 UltraServers)
    # The headline profile's control in chip-days (None: control_seeds runs as above): half from runs of
    # control_ultraservers x control_seconds, half from LONG_CONTROL runs (``control_shapes``).
    control_chip_days: float | None = None


FULL: Final = Scale(seeds=30, ultraservers=64, control_seeds=8, control_ultraservers=64, control_seconds=3_600.0,
                    job_row_seeds=10, control_chip_days=1_000.0)
# A smoke run: every cell once, on fleets small enough for a minute or two on two cores; the job rows over
# three seeds even so, since a figure of one seed may be that seed's luck.
QUICK: Final = Scale(seeds=1, ultraservers=16, control_seeds=1, control_ultraservers=16, control_seconds=600.0,
                     job_row_seeds=3)
# The long half of a control in chip-days: a small fleet for six hours, long enough for the job mix's checkpoints
# (every 20-60 min), evaluations, agent restarts and a slow detector's drift to show; the other half, a big fleet
# over a short time, brings many peers and many entities at once.
LONG_CONTROL_ULTRASERVERS: Final = 16
LONG_CONTROL_S: Final = 6 * 3_600.0


def control_shapes(
    chip_days: float, *, ultraservers: int, seconds: float, chips_of: Callable[[int], int] | None = None,
) -> list[tuple[int, float]]:
    """Return (UltraServers, seconds) of control runs that hold at least ``chip_days`` of present chips.

    Half the chip-days from runs of ``ultraservers`` for ``seconds``, half from ``LONG_CONTROL`` runs; each
    half rounded up to whole runs.  ``chips_of`` gives the present chips of a fleet of so many UltraServers
    (default: 64 each; a profile with partial UltraServers has fewer).
    """
    def runs_for(days: float, us: int, secs: float) -> int:
        chips = chips_of(us) if chips_of is not None else us * 64
        return max(1, math.ceil(days / (chips * secs / 86_400.0)))

    short = runs_for(chip_days / 2, ultraservers, seconds)
    long = runs_for(chip_days / 2, LONG_CONTROL_ULTRASERVERS, LONG_CONTROL_S)
    return [(ultraservers, seconds)] * short + [(LONG_CONTROL_ULTRASERVERS, LONG_CONTROL_S)] * long


def run_fleet(
    ultraservers: int, faults: list[Fault], *, seed: int, ticks: int, noise: float = 1.0,
    tick_s: float = 1.0, profile: str = "ideal", job_mix: bool = False,
    watch: Callable[[int, MonitorCore], None] | None = None,
) -> RunResult:
    """Simulate ``ticks`` ticks of ``tick_s`` of a fleet with ``faults`` and a diurnal swing; return events
    and errors.  With ``job_mix`` the fleet runs the simulator's job mix (``FleetParams(jobs="mix")``)
    and each raised event is attributed to its job's phase (``phases``).  ``watch``, if given, is called after
    each tick's analysis with the tick and the core (the anchors' detectors read its admitted telemetry there:
    ``benchmarks/anchors``).

    Raises KeyError for a ``profile`` the simulator does not have.
    """
    started = time.perf_counter()
    topo = fleet_of(profile, ultraservers)
    # A profile that runs the job mix runs it in its control runs, as --job-mix does; its fault runs keep the
    # fixed groups of one UltraServer, as every fault run does: a fault in a job of many UltraServers slows
    # or stalls all of them, which this grading (one fault, its entity) cannot tell from false alarms and
    # the in-process monitor, told no jobs, cannot price.  Faults inside jobs are the job rows' (--job-rows).
    mix = job_mix or (not faults and profile_job_mix(profile))
    # One simulated day per run, so the diurnal swing is always in it.
    params = FleetParams(noise=noise, time_scale=86_400.0 / (ticks * tick_s), jobs="mix" if mix else "none")
    diurnal = Fault(FaultKind.DIURNAL, 0, 0.02, 0, ticks)
    model = simulator_of(topo, profile, seed=seed, tick_s=tick_s, params=params, faults=[*faults, diurnal],
                         job_mix=False if faults else None)
    core = monitor_of(topo, tick_s=tick_s)
    # Chips that exist: a partial UltraServer's absent nodes hold none (the chip-days of a control).
    result = RunResult(faults, [], topo.n_present_chips, ticks, tick_s=tick_s, profile=profile,
                       lost_truth=dict.fromkeys(CAUSES, 0.0), lost_estimate=dict.fromkeys(CAUSES, 0.0))
    settled = ticks_of(WARMUP_S / 2, tick_s)
    log = PhaseLog(topo.n_ultraservers) if mix else None
    for tick in range(ticks):
        sample = model.step(tick)
        if log is not None:
            log.record(sample.truth)
        frames = frames_of(topo, sample)
        # Received at the tick's own time: the listening clock, whatever the publishers' clocks say.
        analysis = core.step(frames, now_s=model.t_of(tick))
        result.events.extend(analysis.events)
        if watch is not None:
            watch(tick, core)
        if log is not None:
            result.phase_rows += [log.attribute(e, topo, tick_s) for e in analysis.events if e.raised]
        if tick < settled:
            continue
        truth = sample.truth.effective_flops
        measured = analysis.throughput.fleet_effective
        result.effective_error.append(abs(measured - truth) / truth if truth else 0.0)
        estimate = analysis.lost.fleet()
        for cause in CAUSES:
            result.lost_truth[cause] += sample.truth.lost_flops[cause]
            result.lost_estimate[cause] += estimate[cause]
    if log is not None:
        result.phase_seconds = phase_exposure(log, tick_s)
        result.phase_entries = dict(log.entries)
        result.phase_entered_ultraservers = dict(log.entered_ultraservers)
    result.seconds = time.perf_counter() - started
    return result


@dataclass(frozen=True, slots=True)
class Job:
    """One run for the worker pool: which section of the report it belongs to and what to simulate."""

    profile: str
    tick_s: float
    control: bool
    ultraservers: int
    faults: list[Fault]
    seed: int
    ticks: int
    noise: float
    job_mix: bool = False

    @property
    def work(self) -> float:
        """Return the run's rough cost, for the estimate of the time left."""
        return float(self.ultraservers * self.ticks)


@dataclass(frozen=True, slots=True)
class JobRowRun:
    """One job-row run for the worker pool (``jobrows``): fixed jobs, faults inside some of them."""

    profile: str
    tick_s: float
    jobs: list[JobSpec]
    faults: list[Fault]
    seed: int
    ticks: int
    noise: float
    draw: int  # the benchmark's seed that drew the jobs and faults

    @property
    def work(self) -> float:
        """Return the run's rough cost, for the estimate of the time left."""
        return float(JOB_ROW_ULTRASERVERS * self.ticks)


def _run(job: Job | JobRowRun) -> RunResult | JobRunResult:
    if isinstance(job, JobRowRun):
        return run_job_fleet(job.jobs, job.faults, seed=job.seed, ticks=job.ticks, noise=job.noise,
                             tick_s=job.tick_s, profile=job.profile, draw=job.draw)
    return run_fleet(job.ultraservers, job.faults, seed=job.seed, ticks=job.ticks, noise=job.noise,
                     tick_s=job.tick_s, profile=job.profile, job_mix=job.job_mix)


class Work(Protocol):
    """What the pool needs of a run: which section it belongs to and its rough cost."""

    @property
    def profile(self) -> str: ...

    @property
    def tick_s(self) -> float: ...

    @property
    def work(self) -> float: ...


W = TypeVar("W", bound=Work)
R = TypeVar("R")


def run_pool(run: Callable[[W], R], items: Sequence[W], workers: int, progress: Progress) -> list[R]:
    """Run ``run`` on each of ``items`` in a pool of ``workers`` processes (in this one for a single worker),
    the longest first, each completion a step of ``progress``; return the results in the items' order."""
    total_work = sum(item.work for item in items) or 1.0
    done_work = 0.0
    results: dict[int, R] = {}
    order = sorted(range(len(items)), key=lambda i: -items[i].work)  # the last ones to finish are short

    def finished(index: int, result: R) -> None:
        nonlocal done_work
        results[index] = result
        item = items[index]
        done_work += item.work
        progress.step(f"run {len(results)} of {len(items)} (profile {item.profile}, tick {item.tick_s:g} s)",
                      left_fraction=(total_work - done_work) / total_work)

    if workers <= 1:
        for i in order:
            finished(i, run(items[i]))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run, items[i]): i for i in order}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    progress.close()
    return [results[i] for i in range(len(items))]


def _run_all(jobs: list[Job | JobRowRun], workers: int, progress: Progress) -> list[RunResult | JobRunResult]:
    """Run ``jobs`` in a pool, each completion a step of ``progress``; return results in job order."""
    return run_pool(_run, jobs, workers, progress)


def _job_phases(controls: list[RunResult]) -> dict[str, Any]:
    """Return the job-mix control's events by phase and cause, and the phases the runs went through."""
    out = phase_control([row for r in controls for row in r.phase_rows], [r.phase_seconds for r in controls])
    entries: dict[str, int] = {}
    entered: dict[str, int] = {}
    for r in controls:
        for k, v in r.phase_entries.items():
            entries[k] = entries.get(k, 0) + v
        for k, v in r.phase_entered_ultraservers.items():
            entered[k] = entered.get(k, 0) + v
    return {**out, "phase_entries": entries, "phase_entered_ultraservers": entered}


def bench_detect(
    *, seeds: int, ultraservers: int, control_seeds: int, control_ultraservers: int, control_seconds: float,
    jobs: int, noise: float = 1.0, profiles: Sequence[str] = ("ideal",), ticks_s: Sequence[float] = (1.0,),
    kinds: Collection[FaultKind] | None = None, quick: bool = False, job_mix: bool = False,
    job_rows: bool = False, job_row_seeds: int = 3, job_row_checkpoints: bool = False,
    control_chip_days: float | None = None, progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the fault and control runs of every profile and tick length; return the graded report.

    Each finished run is a step of ``progress`` (default: on stderr).  The first of ``profiles`` heads the
    report, at ``HEADLINE_TICK_S`` if it is among ``ticks_s`` (else the first tick length).  Raises KeyError
    for a profile the simulator does not have.  With ``job_mix`` the control runs run the simulator's job
    mix, and the control's figures carry each raised event's job phase (``phases``); the fault runs are
    unchanged.  With ``job_rows`` each section also runs ``job_row_seeds`` seeds of job-row runs (``jobrows``)
    and carries their grades (``jobgrading``) under ``job_rows``; with ``job_row_checkpoints`` their jobs
    checkpoint.  With ``control_chip_days`` the headline profile's control is at least that many chip-days,
    half a big fleet over a short time and half a small one over six hours (``control_shapes``); the other
    profiles keep ``control_seeds`` runs.
    """
    started = time.perf_counter()
    for name in profiles:
        profile_kwargs(name)  # fail before starting any run
    headline_tick = HEADLINE_TICK_S if HEADLINE_TICK_S in ticks_s else ticks_s[0]
    plan: list[Job | JobRowRun] = []
    for profile in profiles:
        for tick_s in ticks_s:
            if job_rows:
                plan += [JobRowRun(profile, tick_s, specs, faults, seed, run_ticks, noise, draw)
                         for specs, faults, seed, run_ticks, draw in job_row_runs(job_row_seeds, tick_s=tick_s,
                                                                                  kinds=kinds,
                                                                                  checkpoints=job_row_checkpoints)]
            plan += [Job(profile, tick_s, False, us, faults, seed, run_ticks, noise)
                     for us, faults, seed, run_ticks in fault_runs(seeds, ultraservers, tick_s=tick_s, kinds=kinds,
                                                                     build=partial(fleet_of, profile))]
            shapes = ([(control_ultraservers, control_seconds)] * control_seeds
                      if control_chip_days is None or profile != profiles[0]
                      else control_shapes(control_chip_days, ultraservers=control_ultraservers,
                                          seconds=control_seconds,
                                          chips_of=partial(present_chips, profile)))
            plan += [Job(profile, tick_s, True, us, [], 500_000 + s, ticks_of(secs, tick_s), noise, job_mix)
                     for s, (us, secs) in enumerate(shapes)]
    results = _run_all(plan, jobs, Progress(len(plan)) if progress is None else progress)

    sections: dict[str, dict[str, Any]] = {}
    for profile in profiles:
        per_tick: dict[str, dict[str, Any]] = {}
        for tick_s in ticks_s:
            mine = [(job, r) for job, r in zip(plan, results, strict=True)
                    if (job.profile, job.tick_s) == (profile, tick_s) and isinstance(job, Job)
                    and isinstance(r, RunResult)]
            fault_results = [r for job, r in mine if not job.control]
            graded = grade(fault_results, ultraservers)
            graded["tick_s"] = tick_s
            if job_rows:
                graded["job_rows"] = grade_job_rows(
                    r for job, r in zip(plan, results, strict=True)
                    if (job.profile, job.tick_s) == (profile, tick_s) and isinstance(r, JobRunResult))
            controls = [r for job, r in mine if job.control]
            graded["control"] = control(controls, control_seconds)
            if job_mix:
                graded["control"]["job_phases"] = _job_phases(controls)
            graded["fault_runs"] = len(fault_results)
            graded["faults"] = sum(len(r.faults) for r in fault_results)
            graded["detect_s_per_tick_per_chip"] = statistics.median(
                r.seconds / (r.ticks * r.chips) for r in fault_results) if fault_results else None
            per_tick[str(tick_s)] = graded
        headline = per_tick[str(headline_tick)]
        for graded in per_tick.values():
            if graded is not headline:
                graded["comparison"] = compare(graded, headline, headline_tick)
        sections[profile] = {**headline, "ticks": per_tick}

    top = {k: v for k, v in sections[profiles[0]].items() if k != "ticks"}
    return {
        "benchmark": "detect",
        **top,
        "headline": {"profile": profiles[0], "tick_s": headline_tick},
        "profiles": sections,
        "config": {
            "seeds": seeds, "ultraservers": ultraservers, "chips": ultraservers * 64,
            "profiles": list(profiles), "ticks_s": list(ticks_s), "tick_s": headline_tick,
            "kinds": None if kinds is None else sorted(str(k) for k in kinds), "quick": quick,
            "warmup_s": WARMUP_S, "slow_warmup_s": SLOW_WARMUP_S, "slow_ultraservers": SLOW_ULTRASERVERS,
            "jitter_s": JITTER_S, "fault_s": FAULT_S, "tail_s": TAIL_S, "slow_tail_s": SLOW_TAIL_S, "grace_s": GRACE_S,
            "slow_fault_s": {f"{kind.value}@{severity:g}": s for (kind, severity), s in SLOW_FAULT_S.items()},
            "ticks_per_run": ticks_of(WARMUP_S + JITTER_S + FAULT_S + TAIL_S, headline_tick),
            "grace_ticks": ticks_of(GRACE_S, headline_tick),
            "fault_runs": top["fault_runs"], "faults": top["faults"], "runs_total": len(plan),
            "noise": noise, "control_seeds": control_seeds, "control_ultraservers": control_ultraservers,
            "control_seconds": control_seconds, "control_chip_days": control_chip_days,
            "long_control": {"ultraservers": LONG_CONTROL_ULTRASERVERS, "seconds": LONG_CONTROL_S},
            "jobs": jobs, "control_job_mix": job_mix,
            "job_rows": job_rows, "job_row_seeds": job_row_seeds if job_rows else None,
            "job_row_checkpoints": job_row_checkpoints if job_rows else None,
            "job_row_ultraservers": JOB_ROW_ULTRASERVERS if job_rows else None,
            "job_row_sizes": list(JOB_SIZES) if job_rows else None,
            "job_row_faulted_per_run": FAULTED_PER_RUN if job_rows else None,
        },
        "wall_s": time.perf_counter() - started,
    }


