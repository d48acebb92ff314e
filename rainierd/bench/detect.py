"""``rainierd bench detect``: detection quality graded against injected ground
truth, in process (no MQTT), over every fault kind x severity x placement x
seed, plus fault-free control runs with the diurnal swing, for each simulator
profile and tick length asked for.

Every duration the benchmark sets (warm-up, fault, tail, grace, control) is in
seconds and becomes ticks per tick length, rounded up, so a run at a 0.5 s
tick covers the same simulated time as one at 5 s.  Fault placements and
start times are drawn from the same seeds at every tick length and profile,
so their figures compare pair by pair.

Grading (docs/detection.md): a fault is detected when a new detection (a
raise from healthy) names its component within ``[start, end + grace]``;
time to detect is that raise's time minus the fault's start.  Time to clear
is the time of the first event after that raise which returns the component
to healthy, minus the fault's end: negative when it cleared while the fault
was still in effect ("cleared early", a sign of flapping), missing when it
did not clear within the tail ("not cleared").  Further raises on the same
component within the fault's window count against precision (a flapping
link must be one event).  Raises on components a fault really affects but
does not name (the chips of a node whose fans failed) are explained: neither
true nor false.  Every other raise is a false alarm.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.detect import Event
from rainierd.core.model import CAUSES
from rainierd.sim.faults import SEVERITIES, TARGETS, Fault, FaultKind, flapping_fault
from rainierd.sim.fleet import FleetModel, FleetParams
from rainierd.sim.frames import tick_batches
from rainierd.topology import LINK_KIND_RING, Topology, build_fleet

__all__ = [
    "FULL",
    "QUICK",
    "Cell",
    "RunResult",
    "Scale",
    "available_profiles",
    "bench_detect",
    "cells",
    "grade",
    "main",
    "run_fleet",
    "ticks_of",
]

HARD: Final = {FaultKind.NL_DOWN, FaultKind.EFA_DOWN, FaultKind.CHIP_FAILED, FaultKind.NODE_LOST}
ENTITY: Final = {
    "link": "neuronlink", "efa": "efa", "chip": "chip", "node": "node", "ultraserver": "ultraserver",
}
WARMUP_S: Final = 60.0
JITTER_S: Final = 20  # fault starts spread over this many whole seconds after the warm-up
FAULT_S: Final = 120.0
TAIL_S: Final = 60.0
GRACE_S: Final = 10.0
# Faults only a long-horizon test can see get a longer window (and runs of their own): silent EFA
# loss of 3e-7 adds ~0.18 retransmits/s to a 0.2/s background, found in about 4 minutes.
SLOW_FAULT_S: Final = {(FaultKind.EFA_LOSS, 3e-7): 900.0}
# ... and a longer tail: a rate test sees loss end no faster than it saw it begin (minutes), so its
# time to clear is measured over ten minutes after the fault, not one.
SLOW_TAIL_S: Final = 600.0
# A slow test judges a port against its own retransmit rate, which needs history: slow faults start
# after half an hour of monitoring (as on a fleet the monitor has watched for a while; the detector
# judges no port for slow loss before SlowLossParams.loss_learn_s of its own history).
SLOW_WARMUP_S: Final = 1_800.0
# Slow faults are two a seed: a fleet of 16 UltraServers (1,024 ports) keeps them a small minority of
# the peers whose background they are judged against, at a quarter of a 64-UltraServer run's cost.
SLOW_ULTRASERVERS: Final = 16
# The tick length and profile whose figures head the report (and that other ticks compare against).
HEADLINE_TICK_S: Final = 1.0
DEFAULT_PROFILES: Final = ("realistic", "ideal")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """How much the benchmark runs: seeds and fleet sizes of the fault and control runs."""

    seeds: int
    ultraservers: int
    control_seeds: int
    control_ultraservers: int
    control_seconds: float


FULL: Final = Scale(seeds=30, ultraservers=64, control_seeds=8, control_ultraservers=64, control_seconds=3_600.0)
# A smoke run: every cell once, on fleets small enough for a minute or two on two cores.
QUICK: Final = Scale(seeds=1, ultraservers=16, control_seeds=1, control_ultraservers=16, control_seconds=600.0)


def ticks_of(seconds: float, tick_s: float) -> int:
    """Return ``seconds`` in ticks of ``tick_s``, rounded up (a tick's worth of float error aside)."""
    return math.ceil(round(seconds / tick_s, 9))


def fault_seconds(kind: FaultKind, severity: float) -> float:
    """Return how long a fault of ``kind`` at ``severity`` lasts in the benchmark."""
    return SLOW_FAULT_S.get((kind, severity), FAULT_S)


def tail_seconds(kind: FaultKind, severity: float) -> float:
    """Return how long after a fault of ``kind`` at ``severity`` its clear and its duplicates are looked for."""
    return SLOW_TAIL_S if (kind, severity) in SLOW_FAULT_S else TAIL_S


def fault_ticks(kind: FaultKind, severity: float, tick_s: float = 1.0) -> int:
    """Return how many ticks of ``tick_s`` a fault of ``kind`` at ``severity`` lasts in the benchmark."""
    return ticks_of(fault_seconds(kind, severity), tick_s)


def available_profiles() -> dict[str, Any]:
    """Return the simulator's profiles by name: ``rainierd.sim.profile.PROFILES`` where the fleet
    model takes one, else only ``"ideal"`` (the model as it is), standing for ``None``.
    """
    try:
        module = importlib.import_module("rainierd.sim.profile")
    except ImportError:
        return {"ideal": None}
    profiles = getattr(module, "PROFILES", None)
    if not isinstance(profiles, dict) or "profile" not in inspect.signature(FleetModel).parameters:
        return {"ideal": None}
    return dict(profiles)


def _profile_kwargs(name: str) -> dict[str, Any]:
    """Return the keyword arguments that give a ``FleetModel`` the profile ``name``.

    Raises KeyError for a profile this simulator does not have.
    """
    profile = available_profiles()[name]
    return {} if profile is None else {"profile": profile}


@dataclass(frozen=True, slots=True)
class Cell:
    """One scenario: a kind, a severity, a placement variant."""

    kind: FaultKind
    severity: float
    scope: str
    placement: int


def cells(kinds: Collection[FaultKind] | None = None) -> list[Cell]:
    """Return every kind x severity x scope x placement the benchmark grades (only ``kinds``, if given)."""
    out: list[Cell] = []
    for kind, severities in SEVERITIES.items():
        if kind is FaultKind.DIURNAL or (kinds is not None and kind not in kinds):
            continue
        for severity in severities:
            for scope in TARGETS[kind]:
                out.extend(Cell(kind, severity, scope, placement) for placement in (0, 1))
    return out


def _place(cell: Cell, topo: Topology, us: int, rng: np.random.Generator, start: int, *,
           tick_s: float) -> Fault:
    """Return the fault of ``cell`` inside UltraServer ``us``; placement 0/1 varies where."""
    chips = topo.chips_per_node * topo.nodes_per_ultraserver
    nodes, links = topo.nodes_per_ultraserver, topo.links_per_node * topo.nodes_per_ultraserver
    ports = topo.efa_ports_per_node * topo.nodes_per_ultraserver
    kind = cell.kind
    if cell.scope == "link":
        ids = np.arange(us * links, (us + 1) * links)
        ring = topo.link_kind[ids] == LINK_KIND_RING
        target = int(rng.choice(ids[ring] if cell.placement else ids[~ring]))  # a ring link or a torus link
    elif cell.scope == "efa":
        target = int(rng.integers(us * ports, (us + 1) * ports))
    elif cell.scope == "chip":
        target = int(rng.integers(us * chips, (us + 1) * chips))
    elif cell.scope == "node":
        target = int(rng.integers(us * nodes, (us + 1) * nodes))
    else:
        target = us
    if kind is FaultKind.NL_FLAPPING:
        return flapping_fault(rng, target, int(cell.severity), start, tick_s)
    end = start + fault_ticks(kind, cell.severity, tick_s)
    return Fault(kind, target, cell.severity, start, end, scope=cell.scope)


@dataclass(eq=False)
class RunResult:
    """What one simulated run produced, for grading."""

    faults: list[Fault]
    events: list[Event]
    chips: int
    ticks: int
    effective_error: list[float] = field(default_factory=list)  # relative, per tick after warm-up
    lost_truth: dict[str, float] = field(default_factory=dict)  # FLOP/s summed over ticks
    lost_estimate: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    tick_s: float = 1.0
    profile: str = "ideal"


def run_fleet(
    ultraservers: int, faults: list[Fault], *, seed: int, ticks: int, noise: float = 1.0,
    tick_s: float = 1.0, profile: str = "ideal",
) -> RunResult:
    """Simulate ``ticks`` ticks of ``tick_s`` of a fleet with ``faults`` and a diurnal swing; return events
    and errors.

    Raises KeyError for a ``profile`` the simulator does not have.
    """
    started = time.perf_counter()
    topo = build_fleet(1, ultraservers, name=f"bench-{ultraservers}")
    # One simulated day per run, so the diurnal swing is always in it.
    params = FleetParams(noise=noise, time_scale=86_400.0 / (ticks * tick_s))
    diurnal = Fault(FaultKind.DIURNAL, 0, 0.02, 0, ticks)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=0.0, params=params,
                       faults=[*faults, diurnal], **_profile_kwargs(profile))
    core = MonitorCore(topo, MonitorConfig(tick_s=tick_s))
    result = RunResult(faults, [], topo.n_chips, ticks, tick_s=tick_s, profile=profile,
                       lost_truth=dict.fromkeys(CAUSES, 0.0), lost_estimate=dict.fromkeys(CAUSES, 0.0))
    settled = ticks_of(WARMUP_S / 2, tick_s)
    for tick in range(ticks):
        sample = model.step(tick)
        # Batches, as the simulator publishes by default (the frames are the same; only the transport differs).
        frames = [frame for _topic, frame in tick_batches(topo, sample, publisher="bench", nodes_per_batch=128)]
        # Received at the tick's own time: the listening clock, whatever the publishers' clocks say.
        analysis = core.step(frames, now_s=model.t_of(tick))
        result.events.extend(analysis.events)
        if tick < settled:
            continue
        truth = sample.truth.effective_flops
        measured = analysis.throughput.fleet_effective
        result.effective_error.append(abs(measured - truth) / truth if truth else 0.0)
        estimate = analysis.lost.fleet()
        for cause in CAUSES:
            result.lost_truth[cause] += sample.truth.lost_flops[cause]
            result.lost_estimate[cause] += estimate[cause]
    result.seconds = time.perf_counter() - started
    return result


def _expected(fault: Fault) -> tuple[str, int]:
    return ENTITY[fault.target_kind], fault.target


def _explains(fault: Fault, event: Event, topo: Topology, tail: int) -> bool:
    """Return True if ``event`` is a real consequence of ``fault`` on a component it does not name."""
    if not fault.start_tick <= event.tick <= fault.end_tick + tail:
        return False
    kind = fault.target_kind
    if kind in ("node", "ultraserver"):
        nodes = [fault.target] if kind == "node" else list(
            range(fault.target * topo.nodes_per_ultraserver, (fault.target + 1) * topo.nodes_per_ultraserver))
        if event.entity == "chip" and int(topo.chip_node[event.id]) in nodes:
            return True
        if event.entity == "node" and event.id in nodes:
            return True
        if event.entity == "ultraserver" and kind == "ultraserver":
            return True
    return False


@dataclass(eq=False)
class Tally:
    """Counts for one (kind, severity) row."""

    faults: int = 0
    detected: int = 0
    duplicates: int = 0
    ttd: list[int] = field(default_factory=list)  # ticks
    ttd_s: list[float] = field(default_factory=list)
    ttc_s: list[float] = field(default_factory=list)  # negative: cleared while the fault was in effect
    cleared_early: int = 0
    not_cleared: int = 0


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _p95(values: Sequence[float]) -> float | None:
    return float(np.percentile(values, 95)) if values else None


def _grade_run(run: RunResult, topo: Topology, rows: dict[tuple[str, float], Tally],
               true_pos: Counter[str], false_pos: Counter[str]) -> None:
    """Add one run's faults to ``rows`` and its raises to the true and false positives."""
    grace = ticks_of(GRACE_S, run.tick_s)
    raised = [e for e in run.events if e.raised]
    used: set[int] = set()
    for fault in run.faults:
        tail = ticks_of(tail_seconds(fault.kind, fault.severity), run.tick_s)
        tally = rows[str(fault.kind), fault.severity]
        tally.faults += 1
        entity, target = _expected(fault)
        mine = [i for i, e in enumerate(raised) if (e.entity, e.id) == (entity, target)]
        hits = [i for i in mine if fault.start_tick <= raised[i].tick <= fault.end_tick + grace]
        later = [i for i in mine if fault.start_tick <= raised[i].tick <= fault.end_tick + tail]
        if hits:
            found = raised[hits[0]]
            tally.detected += 1
            tally.ttd.append(found.tick - fault.start_tick)
            tally.ttd_s.append((found.tick - fault.start_tick) * run.tick_s)
            true_pos[entity] += 1
            clear = next((e for e in run.events if (e.entity, e.id) == (entity, target) and e.after == "healthy"
                          and found.tick < e.tick <= fault.end_tick + tail), None)
            if clear is None:
                tally.not_cleared += 1
            else:
                tally.ttc_s.append((clear.tick - fault.end_tick) * run.tick_s)
                if clear.tick < fault.end_tick:
                    tally.cleared_early += 1
        duplicates = [i for i in later if not hits or i != hits[0]]
        tally.duplicates += len(duplicates)
        false_pos[entity] += len(duplicates)
        used.update(later)
    for i, event in enumerate(raised):
        if i in used or any(_explains(f, event, topo, ticks_of(tail_seconds(f.kind, f.severity), run.tick_s))
                            for f in run.faults):
            continue
        false_pos[event.entity] += 1


def grade(results: Iterable[RunResult], ultraservers: int) -> dict[str, Any]:
    """Return per (kind, severity) recall, F1, times to detect and to clear (in ticks and seconds), per
    entity precision, and the FP8 errors.
    """
    topo = build_fleet(1, ultraservers)
    rows: dict[tuple[str, float], Tally] = defaultdict(Tally)
    true_pos: Counter[str] = Counter()
    false_pos: Counter[str] = Counter()
    effective_error: list[float] = []
    lost_truth: Counter[str] = Counter()
    lost_estimate: Counter[str] = Counter()
    for run in results:
        _grade_run(run, topo, rows, true_pos, false_pos)
        effective_error.extend(run.effective_error)
        lost_truth.update(run.lost_truth)
        lost_estimate.update(run.lost_estimate)

    precision = {e: true_pos[e] / (true_pos[e] + false_pos[e]) if true_pos[e] + false_pos[e] else 1.0
                 for e in ENTITY.values()}
    table = []
    for (kind, severity), t in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        fault_kind = FaultKind(kind)
        p = precision[ENTITY[TARGETS[fault_kind][0]]]
        recall = t.detected / t.faults
        table.append({
            "kind": kind, "severity": severity, "hard": fault_kind in HARD, "faults": t.faults,
            "detected": t.detected, "duplicates": t.duplicates, "recall": recall, "precision": p,
            "f1": 2 * p * recall / (p + recall) if p + recall else 0.0,
            "ttd_median_ticks": _median(t.ttd), "ttd_p95_ticks": _p95(t.ttd),
            "ttd_median_s": _median(t.ttd_s), "ttd_p95_s": _p95(t.ttd_s),
            "ttc_median_s": _median(t.ttc_s), "ttc_p95_s": _p95(t.ttc_s),
            "cleared_early": t.cleared_early, "not_cleared": t.not_cleared,
        })
    return {
        "rows": table,
        "precision_by_entity": precision,
        "true_positives": dict(true_pos),
        "false_positives": dict(false_pos),
        "effective_fp8_error": {
            "median": _median(effective_error),
            "p99": float(np.percentile(effective_error, 99)) if effective_error else None,
            "max": max(effective_error) if effective_error else None,
        },
        "lost_by_cause": {
            c: {"truth_flops_ticks": lost_truth[c], "estimate_flops_ticks": lost_estimate[c],
                "relative_error": abs(lost_estimate[c] - lost_truth[c]) / lost_truth[c] if lost_truth[c] else None}
            for c in CAUSES
        },
    }


def _fault_runs(
    seeds: int, ultraservers: int, *, tick_s: float = 1.0, kinds: Collection[FaultKind] | None = None,
) -> list[tuple[int, list[Fault], int, int]]:
    """Return (ultraservers, faults, seed, ticks) of every fault run; slow faults run apart, for longer.

    The draws do not depend on ``tick_s``: every tick length gets the same faults at the same times.
    """
    per_run = max(1, ultraservers // 4)  # faults stay a minority of peers
    warmup, jitter = ticks_of(WARMUP_S, tick_s), ticks_of(JITTER_S, tick_s)
    sizes = (ultraservers, min(ultraservers, SLOW_ULTRASERVERS))
    topos = tuple(build_fleet(1, n) for n in sizes)
    all_cells = cells(kinds)
    runs = []
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        order = rng.permutation(len(all_cells))
        slow = [i for i in order if (all_cells[i].kind, all_cells[i].severity) in SLOW_FAULT_S]
        quick = [i for i in order if (all_cells[i].kind, all_cells[i].severity) not in SLOW_FAULT_S]
        for group_index, group in enumerate((quick, slow)):
            for chunk in range(0, len(group), per_run):
                picked = [all_cells[i] for i in group[chunk:chunk + per_run]]
                fleet, topo = sizes[group_index], topos[group_index]
                hosts = rng.choice(fleet, size=len(picked), replace=False)
                settle = warmup if group_index == 0 else ticks_of(SLOW_WARMUP_S, tick_s)
                tail = ticks_of(TAIL_S if group_index == 0 else SLOW_TAIL_S, tick_s)
                faults = [_place(c, topo, int(us), rng, settle + ticks_of(int(rng.integers(0, JITTER_S)), tick_s),
                                 tick_s=tick_s)
                          for c, us in zip(picked, hosts, strict=True)]
                ticks = settle + jitter + max(f.end_tick - f.start_tick for f in faults) + tail
                runs.append((fleet, faults, seed * 1_000 + 500 * group_index + chunk, ticks))
    return runs


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

    @property
    def work(self) -> float:
        """Return the run's rough cost, for the estimate of the time left."""
        return float(self.ultraservers * self.ticks)


def _run(job: Job) -> RunResult:
    return run_fleet(job.ultraservers, job.faults, seed=job.seed, ticks=job.ticks, noise=job.noise,
                     tick_s=job.tick_s, profile=job.profile)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run_all(jobs: list[Job], workers: int, progress: Callable[[str], None]) -> list[RunResult]:
    """Run ``jobs`` in a pool, reporting each completion to ``progress``; return results in job order."""
    started = time.perf_counter()
    total_work = sum(job.work for job in jobs)
    done_work = 0.0
    results: list[RunResult | None] = [None] * len(jobs)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        # The longest runs first, so the last ones to finish are short.
        order = sorted(range(len(jobs)), key=lambda i: -jobs[i].work)
        futures = {pool.submit(_run, jobs[i]): i for i in order}
        for done, future in enumerate(as_completed(futures), start=1):
            index = futures[future]
            results[index] = future.result()
            job = jobs[index]
            done_work += job.work
            elapsed = time.perf_counter() - started
            left = elapsed * (total_work - done_work) / done_work if done_work else 0.0
            progress(f"run {done} of {len(jobs)} (profile {job.profile}, tick {job.tick_s:g} s), "
                     f"elapsed {elapsed:.0f} s, about {left:.0f} s left")
    return [r for r in results if r is not None]


def _control(results: list[RunResult], seconds: float) -> dict[str, Any]:
    """Return the false-alarm figures of the fault-free runs."""
    events = [e for r in results for e in r.events if e.raised]
    chip_days = sum(r.chips * r.ticks * r.tick_s for r in results) / 86_400.0
    units = chip_days / 1e4
    return {
        "runs": len(results), "chips": results[0].chips if results else 0,
        "ticks": results[0].ticks if results else 0, "seconds": seconds, "chip_days": chip_days,
        "false_alarms": len(events),
        "false_alarms_per_day_per_10k_chips": len(events) / units if units else None,
        # With no alarm seen, the 95 % upper bound of a Poisson rate is 3 / exposure.
        "upper_95_per_day_per_10k_chips": max(3.0, 1.96 * len(events) ** 0.5 + len(events)) / units
        if units else None,
        "by_entity": dict(Counter(f"{e.entity}:{e.after}" for e in events)),
        "effective_fp8_error_max": max((max(r.effective_error) for r in results if r.effective_error),
                                       default=None),
    }


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _compare(graded: dict[str, Any], baseline: dict[str, Any], baseline_tick_s: float) -> dict[str, Any]:
    """Return, per row of ``graded``, its F1 and median time to detect against ``baseline``'s."""
    base = {(r["kind"], r["severity"]): r for r in baseline["rows"]}
    rows = []
    for r in graded["rows"]:
        b = base.get((r["kind"], r["severity"]))
        rows.append({
            "kind": r["kind"], "severity": r["severity"], "f1": r["f1"],
            "f1_diff": None if b is None else r["f1"] - b["f1"],
            "ttd_median_s": r["ttd_median_s"],
            "ttd_median_s_diff": None if b is None else _difference(r["ttd_median_s"], b["ttd_median_s"]),
        })
    return {"baseline_tick_s": baseline_tick_s, "rows": rows}


def bench_detect(
    *, seeds: int, ultraservers: int, control_seeds: int, control_ultraservers: int, control_seconds: float,
    jobs: int, noise: float = 1.0, profiles: Sequence[str] = ("ideal",), ticks_s: Sequence[float] = (1.0,),
    kinds: Collection[FaultKind] | None = None, quick: bool = False,
    progress: Callable[[str], None] = _to_stderr,
) -> dict[str, Any]:
    """Run the fault and control runs of every profile and tick length; return the graded report.

    The first of ``profiles`` heads the report, at ``HEADLINE_TICK_S`` if it is among ``ticks_s``
    (else the first tick length).  Raises KeyError for a profile the simulator does not have.
    """
    started = time.perf_counter()
    for name in profiles:
        _profile_kwargs(name)  # fail before starting any run
    headline_tick = HEADLINE_TICK_S if HEADLINE_TICK_S in ticks_s else ticks_s[0]
    plan: list[Job] = []
    for profile in profiles:
        for tick_s in ticks_s:
            plan += [Job(profile, tick_s, False, us, faults, seed, run_ticks, noise)
                     for us, faults, seed, run_ticks in _fault_runs(seeds, ultraservers, tick_s=tick_s, kinds=kinds)]
            plan += [Job(profile, tick_s, True, control_ultraservers, [], 500_000 + s,
                         ticks_of(control_seconds, tick_s), noise) for s in range(control_seeds)]
    results = _run_all(plan, jobs, progress)

    sections: dict[str, dict[str, Any]] = {}
    for profile in profiles:
        per_tick: dict[str, dict[str, Any]] = {}
        for tick_s in ticks_s:
            mine = [(job, r) for job, r in zip(plan, results, strict=True)
                    if (job.profile, job.tick_s) == (profile, tick_s)]
            fault_results = [r for job, r in mine if not job.control]
            graded = grade(fault_results, ultraservers)
            graded["tick_s"] = tick_s
            graded["control"] = _control([r for job, r in mine if job.control], control_seconds)
            graded["fault_runs"] = len(fault_results)
            graded["faults"] = sum(len(r.faults) for r in fault_results)
            graded["detect_s_per_tick_per_chip"] = statistics.median(
                r.seconds / (r.ticks * r.chips) for r in fault_results) if fault_results else None
            per_tick[str(tick_s)] = graded
        headline = per_tick[str(headline_tick)]
        for graded in per_tick.values():
            if graded is not headline:
                graded["comparison"] = _compare(graded, headline, headline_tick)
        sections[profile] = {**headline, "ticks": per_tick}

    top = {k: v for k, v in sections[profiles[0]].items() if k != "ticks"}
    return {
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
            "control_seconds": control_seconds, "jobs": jobs,
        },
        "wall_s": time.perf_counter() - started,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_section(graded: dict[str, Any], cfg: dict[str, Any], profile: str) -> None:
    """Print one profile x tick length: the table docs/detection.md shows, and what follows it."""
    tick_s = graded["tick_s"]
    print(f"\nprofile {profile}, {tick_s:g} s ticks: {graded['faults']} faults in {graded['fault_runs']} runs of "
          f"{cfg['chips']} chips, {cfg['seeds']} seeds, noise {cfg['noise']}, grace {cfg['grace_s']:g} s")
    print("| kind | severity | faults | recall | precision | F1 | TTD median s | TTD p95 s | TTC median s | "
          "TTC p95 s | cleared early | not cleared | duplicates |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in graded["rows"]:
        print(f"| {r['kind']} | {r['severity']:g} | {r['faults']} | {r['recall']:.3f} | {r['precision']:.3f} | "
              f"{r['f1']:.3f} | {_fmt(r['ttd_median_s'], 'g')} | {_fmt(r['ttd_p95_s'], '.1f')} | "
              f"{_fmt(r['ttc_median_s'], 'g')} | {_fmt(r['ttc_p95_s'], '.1f')} | {r['cleared_early']} | "
              f"{r['not_cleared']} | {r['duplicates']} |")
    if "comparison" in graded:
        base = graded["comparison"]["baseline_tick_s"]
        print(f"against {base:g} s ticks (F1 difference, TTD median difference in s):")
        for r in graded["comparison"]["rows"]:
            print(f"  {r['kind']} {r['severity']:g}: F1 {_fmt(r['f1_diff'], '+.3f')}, "
                  f"TTD median {_fmt(r['ttd_median_s_diff'], '+g')} s")
    c = graded["control"]
    print(f"control: {c['runs']} fault-free runs x {c['chips']} chips x {c['seconds']:g} s "
          f"({c['chip_days']:.0f} chip-days, diurnal swing included): {c['false_alarms']} false alarms = "
          f"{_fmt(c['false_alarms_per_day_per_10k_chips'], '.2f')} per day per 10k chips "
          f"(95 % upper bound {_fmt(c['upper_95_per_day_per_10k_chips'], '.2f')}) {c['by_entity']}")
    e = graded["effective_fp8_error"]
    print(f"fleet effective FP8 vs truth: median error {_fmt(e['median'], '.2e')}, p99 {_fmt(e['p99'], '.2e')}, "
          f"max {_fmt(e['max'], '.2e')}")
    print("lost FP8 by cause, estimate vs truth (summed over all runs):")
    for cause, v in graded["lost_by_cause"].items():
        print(f"  {cause:<20} truth {v['truth_flops_ticks']:.3e}  estimate {v['estimate_flops_ticks']:.3e}  "
              f"error {_fmt(v['relative_error'], '.1%')}")
    print(f"precision by entity: { {k: round(v, 4) for k, v in graded['precision_by_entity'].items()} }")
    print(f"detection cost: {_fmt(graded['detect_s_per_tick_per_chip'], '.2e')} s per tick per chip "
          f"(whole in-process pipeline)")


def print_table(report: dict[str, Any]) -> None:
    """Print one table per profile x tick length, each with its comparison to the headline tick."""
    cfg = report["config"]
    head = report["headline"]
    print(f"detection benchmark: profiles {', '.join(cfg['profiles'])}, ticks "
          f"{', '.join(f'{t:g}' for t in cfg['ticks_s'])} s; headline {head['profile']} at {head['tick_s']:g} s")
    for profile, section in report["profiles"].items():
        for graded in section["ticks"].values():
            _print_section(graded, cfg, profile)
    print(f"\nwall {report['wall_s']:.0f} s")


def _option(value: Any, quick: bool, name: str) -> Any:
    return value if value is not None else getattr(QUICK if quick else FULL, name)


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or the table; return 2 for an unknown profile or kind."""
    available = available_profiles()
    if args.profile:
        profiles = list(dict.fromkeys(args.profile))
    else:
        profiles = [p for p in DEFAULT_PROFILES if p in available]
        if missing := [p for p in DEFAULT_PROFILES if p not in available]:
            print(f"bench detect: this simulator has no profile {', '.join(missing)}; running "
                  f"{', '.join(profiles)}", file=sys.stderr)
    if unknown := [p for p in profiles if p not in available]:
        print(f"rainierd: unknown profile {', '.join(unknown)} (this simulator has {', '.join(available)})",
              file=sys.stderr)
        return 2
    ticks_s = list(dict.fromkeys(float(t) for t in (args.tick or [HEADLINE_TICK_S])))
    if any(not t > 0 for t in ticks_s):
        print(f"rainierd: tick lengths must be positive, not {ticks_s}", file=sys.stderr)
        return 2
    kinds = None
    if args.kinds:
        names = {str(k) for k in SEVERITIES if k is not FaultKind.DIURNAL}
        if unknown := [k for k in args.kinds if k not in names]:
            print(f"rainierd: unknown fault kind {', '.join(unknown)} (kinds: {', '.join(sorted(names))})",
                  file=sys.stderr)
            return 2
        kinds = {FaultKind(k) for k in args.kinds}
    report = bench_detect(
        seeds=_option(args.seeds, args.quick, "seeds"),
        ultraservers=_option(args.ultraservers, args.quick, "ultraservers"),
        control_seeds=_option(args.control_seeds, args.quick, "control_seeds"),
        control_ultraservers=_option(args.control_ultraservers, args.quick, "control_ultraservers"),
        control_seconds=_option(args.control_seconds, args.quick, "control_seconds"),
        jobs=args.jobs or os.cpu_count() or 1, noise=args.noise, profiles=profiles, ticks_s=ticks_s,
        kinds=kinds, quick=args.quick,
    )
    if args.output:
        with open(args.output, "w") as out:
            json.dump(report, out, indent=2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0
