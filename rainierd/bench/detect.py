"""``rainierd bench detect``: detection quality graded against injected ground
truth, in process (no MQTT), over every fault kind x severity x placement x
seed, plus fault-free control runs with the diurnal swing.

Grading (docs/detection.md): a fault is detected when a new detection (a
raise from healthy) names its component within ``[start, end + grace]``;
time to detect is that raise tick minus the start tick.  Further raises on
the same component within the fault's window count against precision (a
flapping link must be one event).  Raises on components a fault really
affects but does not name (the chips of a node whose fans failed) are
explained: neither true nor false.  Every other raise is a false alarm.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import Event
from rainierd.core.model import CAUSES
from rainierd.sim.faults import SEVERITIES, TARGETS, Fault, FaultKind, flapping_fault
from rainierd.sim.fleet import FleetModel, FleetParams
from rainierd.sim.frames import tick_batches
from rainierd.topology import LINK_KIND_RING, Topology, build_fleet

__all__ = ["Cell", "grade", "main", "run_fleet"]

HARD: Final = {FaultKind.NL_DOWN, FaultKind.EFA_DOWN, FaultKind.CHIP_FAILED, FaultKind.NODE_LOST}
ENTITY: Final = {
    "link": "neuronlink", "efa": "efa", "chip": "chip", "node": "node", "ultraserver": "ultraserver",
}
WARMUP_TICKS: Final = 60
FAULT_TICKS: Final = 120
TAIL_TICKS: Final = 60
GRACE_TICKS: Final = 10
# Faults only a long-horizon test can see get a longer window (and runs of their own): silent EFA
# loss of 3e-7 adds ~0.18 retransmits/s to a 0.2/s background, found in about 4 minutes.
SLOW_FAULT_TICKS: Final = {(FaultKind.EFA_LOSS, 3e-7): 900}


def fault_ticks(kind: FaultKind, severity: float) -> int:
    """Return how long a fault of ``kind`` at ``severity`` lasts in the benchmark."""
    return SLOW_FAULT_TICKS.get((kind, severity), FAULT_TICKS)


@dataclass(frozen=True, slots=True)
class Cell:
    """One scenario: a kind, a severity, a placement variant."""

    kind: FaultKind
    severity: float
    scope: str
    placement: int


def cells() -> list[Cell]:
    """Return every kind x severity x scope x placement the benchmark grades."""
    out: list[Cell] = []
    for kind, severities in SEVERITIES.items():
        if kind is FaultKind.DIURNAL:
            continue
        for severity in severities:
            for scope in TARGETS[kind]:
                out.extend(Cell(kind, severity, scope, placement) for placement in (0, 1))
    return out


def _place(cell: Cell, topo: Topology, us: int, rng: np.random.Generator, start: int) -> Fault:
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
        return flapping_fault(rng, target, int(cell.severity), start, 1.0)
    return Fault(kind, target, cell.severity, start, start + fault_ticks(kind, cell.severity), scope=cell.scope)


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


def run_fleet(
    ultraservers: int, faults: list[Fault], *, seed: int, ticks: int, noise: float = 1.0,
) -> RunResult:
    """Simulate ``ticks`` ticks of a fleet with ``faults`` and a diurnal swing; return events and errors."""
    started = time.perf_counter()
    topo = build_fleet(1, ultraservers, name=f"bench-{ultraservers}")
    # One simulated day per run, so the diurnal swing is always in it.
    params = FleetParams(noise=noise, time_scale=86_400.0 / ticks)
    diurnal = Fault(FaultKind.DIURNAL, 0, 0.02, 0, ticks)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0, params=params,
                       faults=[*faults, diurnal])
    core = MonitorCore(topo)
    result = RunResult(faults, [], topo.n_chips, ticks,
                       lost_truth=dict.fromkeys(CAUSES, 0.0), lost_estimate=dict.fromkeys(CAUSES, 0.0))
    for tick in range(ticks):
        sample = model.step(tick)
        # Batches, as the simulator publishes by default (the frames are the same; only the transport differs).
        frames = [frame for _topic, frame in tick_batches(topo, sample, publisher="bench", nodes_per_batch=128)]
        analysis = core.step(frames)
        result.events.extend(analysis.events)
        if tick < WARMUP_TICKS // 2:
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


def _explains(fault: Fault, event: Event, topo: Topology) -> bool:
    """Return True if ``event`` is a real consequence of ``fault`` on a component it does not name."""
    if not fault.start_tick <= event.tick <= fault.end_tick + TAIL_TICKS:
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
    ttd: list[int] = field(default_factory=list)


def grade(results: Iterable[RunResult], ultraservers: int) -> dict[str, Any]:
    """Return per (kind, severity) recall and time to detect, per entity precision, and the FP8 errors."""
    topo = build_fleet(1, ultraservers)
    rows: dict[tuple[str, float], Tally] = defaultdict(Tally)
    true_pos: Counter[str] = Counter()
    false_pos: Counter[str] = Counter()
    effective_error: list[float] = []
    lost_truth: Counter[str] = Counter()
    lost_estimate: Counter[str] = Counter()
    for run in results:
        raised = [e for e in run.events if e.raised]
        used: set[int] = set()
        for fault in run.faults:
            tally = rows[str(fault.kind), fault.severity]
            tally.faults += 1
            entity, target = _expected(fault)
            hits = [i for i, e in enumerate(raised) if (e.entity, e.id) == (entity, target)
                    and fault.start_tick <= e.tick <= fault.end_tick + GRACE_TICKS]
            later = [i for i, e in enumerate(raised) if (e.entity, e.id) == (entity, target)
                     and fault.start_tick <= e.tick <= fault.end_tick + TAIL_TICKS]
            if hits:
                tally.detected += 1
                tally.ttd.append(raised[hits[0]].tick - fault.start_tick)
                true_pos[entity] += 1
            duplicates = [i for i in later if not hits or i != hits[0]]
            tally.duplicates += len(duplicates)
            false_pos[entity] += len(duplicates)
            used.update(later)
        for i, event in enumerate(raised):
            if i in used or any(_explains(f, event, topo) for f in run.faults):
                continue
            false_pos[event.entity] += 1
        effective_error.extend(run.effective_error)
        lost_truth.update(run.lost_truth)
        lost_estimate.update(run.lost_estimate)

    precision = {e: true_pos[e] / (true_pos[e] + false_pos[e]) if true_pos[e] + false_pos[e] else 1.0
                 for e in ENTITY.values()}
    table = []
    for (kind, severity), t in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        fault_kind = FaultKind(kind)
        entity = ENTITY[TARGETS[fault_kind][0]] if fault_kind not in (FaultKind.COOLING_FAN,
                                                                      FaultKind.COOLING_INLET) else "node"
        recall = t.detected / t.faults
        p = precision[entity]
        table.append({
            "kind": kind, "severity": severity, "hard": fault_kind in HARD, "faults": t.faults,
            "detected": t.detected, "duplicates": t.duplicates, "recall": recall, "precision": p,
            "f1": 2 * p * recall / (p + recall) if p + recall else 0.0,
            "ttd_median_ticks": statistics.median(t.ttd) if t.ttd else None,
            "ttd_p95_ticks": float(np.percentile(t.ttd, 95)) if t.ttd else None,
        })
    return {
        "rows": table,
        "precision_by_entity": precision,
        "true_positives": dict(true_pos),
        "false_positives": dict(false_pos),
        "effective_fp8_error": {
            "median": statistics.median(effective_error) if effective_error else None,
            "p99": float(np.percentile(effective_error, 99)) if effective_error else None,
            "max": max(effective_error) if effective_error else None,
        },
        "lost_by_cause": {
            c: {"truth_flops_ticks": lost_truth[c], "estimate_flops_ticks": lost_estimate[c],
                "relative_error": abs(lost_estimate[c] - lost_truth[c]) / lost_truth[c] if lost_truth[c] else None}
            for c in CAUSES
        },
    }


def _fault_runs(seeds: int, ultraservers: int) -> list[tuple[int, list[Fault], int, int]]:
    """Return (ultraservers, faults, seed, ticks) of every fault run; slow faults run apart, for longer."""
    per_run = max(1, ultraservers // 4)  # faults stay a minority of peers
    runs = []
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        all_cells = cells()
        order = rng.permutation(len(all_cells))
        slow = [i for i in order if (all_cells[i].kind, all_cells[i].severity) in SLOW_FAULT_TICKS]
        quick = [i for i in order if (all_cells[i].kind, all_cells[i].severity) not in SLOW_FAULT_TICKS]
        for group_index, group in enumerate((quick, slow)):
            for chunk in range(0, len(group), per_run):
                picked = [all_cells[i] for i in group[chunk:chunk + per_run]]
                hosts = rng.choice(ultraservers, size=len(picked), replace=False)
                topo = build_fleet(1, ultraservers)
                faults = [_place(c, topo, int(us), rng, WARMUP_TICKS + int(rng.integers(0, 20)))
                          for c, us in zip(picked, hosts, strict=True)]
                ticks = WARMUP_TICKS + 20 + max(f.end_tick - f.start_tick for f in faults) + TAIL_TICKS
                runs.append((ultraservers, faults, seed * 1_000 + 500 * group_index + chunk, ticks))
    return runs


def _run(job: tuple[int, list[Fault], int, int, float]) -> RunResult:
    ultraservers, faults, seed, ticks, noise = job
    return run_fleet(ultraservers, faults, seed=seed, ticks=ticks, noise=noise)


def bench_detect(
    *, seeds: int, ultraservers: int, control_seeds: int, control_ultraservers: int, control_ticks: int,
    jobs: int, noise: float = 1.0,
) -> dict[str, Any]:
    """Run the fault and control runs and return the graded report."""
    started = time.perf_counter()
    ticks = WARMUP_TICKS + 20 + FAULT_TICKS + TAIL_TICKS
    fault_jobs = [(us, faults, seed, run_ticks, noise)
                  for us, faults, seed, run_ticks in _fault_runs(seeds, ultraservers)]
    control_jobs: list[tuple[int, list[Fault], int, int, float]] = [
        (control_ultraservers, [], 500_000 + s, control_ticks, noise) for s in range(control_seeds)
    ]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        fault_results = list(pool.map(_run, fault_jobs))
        control_results = list(pool.map(_run, control_jobs))
    report = grade(fault_results, ultraservers)
    control_events = [e for r in control_results for e in r.events if e.raised]
    chip_days = sum(r.chips * r.ticks for r in control_results) / 86_400.0
    units = chip_days / 1e4
    report["control"] = {
        "runs": len(control_results), "chips": control_results[0].chips if control_results else 0,
        "ticks": control_ticks, "chip_days": chip_days, "false_alarms": len(control_events),
        "false_alarms_per_day_per_10k_chips": len(control_events) / units if units else None,
        # With no alarm seen, the 95 % upper bound of a Poisson rate is 3 / exposure.
        "upper_95_per_day_per_10k_chips": max(3.0, 1.96 * len(control_events) ** 0.5 + len(control_events)) / units
        if units else None,
        "by_entity": dict(Counter(f"{e.entity}:{e.after}" for e in control_events)),
        "effective_fp8_error_max": max((max(r.effective_error) for r in control_results if r.effective_error),
                                       default=None),
    }
    report["config"] = {
        "seeds": seeds, "ultraservers": ultraservers, "chips": ultraservers * 64, "ticks_per_run": ticks,
        "slow_fault_ticks": {f"{kind.value}@{severity:g}": n for (kind, severity), n in SLOW_FAULT_TICKS.items()},
        "fault_runs": len(fault_jobs), "faults": sum(len(j[1]) for j in fault_jobs), "tick_s": 1.0,
        "noise": noise, "grace_ticks": GRACE_TICKS, "control_seeds": control_seeds,
        "control_ultraservers": control_ultraservers, "jobs": jobs,
    }
    report["detect_s_per_tick_per_chip"] = statistics.median(
        r.seconds / (r.ticks * r.chips) for r in fault_results) if fault_results else None
    report["wall_s"] = time.perf_counter() - started
    return report


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(report: dict[str, Any]) -> None:
    """Print the report as the table docs/detection.md shows."""
    cfg = report["config"]
    print(f"detection benchmark: {cfg['faults']} faults in {cfg['fault_runs']} runs of {cfg['chips']} chips, "
          f"{cfg['seeds']} seeds, 1 s ticks, noise {cfg['noise']}, grace {cfg['grace_ticks']} ticks")
    print("| kind | severity | faults | recall | precision | F1 | TTD median | TTD p95 | duplicates |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in report["rows"]:
        print(f"| {r['kind']} | {r['severity']:g} | {r['faults']} | {r['recall']:.3f} | {r['precision']:.3f} | "
              f"{r['f1']:.3f} | {_fmt(r['ttd_median_ticks'], 'g')} | {_fmt(r['ttd_p95_ticks'], '.1f')} | "
              f"{r['duplicates']} |")
    c = report["control"]
    print(f"\ncontrol: {c['runs']} fault-free runs x {c['chips']} chips x {c['ticks']} ticks "
          f"({c['chip_days']:.0f} chip-days, diurnal swing included): {c['false_alarms']} false alarms = "
          f"{_fmt(c['false_alarms_per_day_per_10k_chips'], '.2f')} per day per 10k chips "
          f"(95 % upper bound {_fmt(c['upper_95_per_day_per_10k_chips'], '.2f')}) {c['by_entity']}")
    e = report["effective_fp8_error"]
    print(f"fleet effective FP8 vs truth: median error {_fmt(e['median'], '.2e')}, p99 {_fmt(e['p99'], '.2e')}, "
          f"max {_fmt(e['max'], '.2e')}")
    print("lost FP8 by cause, estimate vs truth (summed over all runs):")
    for cause, v in report["lost_by_cause"].items():
        print(f"  {cause:<20} truth {v['truth_flops_ticks']:.3e}  estimate {v['estimate_flops_ticks']:.3e}  "
              f"error {_fmt(v['relative_error'], '.1%')}")
    print(f"precision by entity: { {k: round(v, 4) for k, v in report['precision_by_entity'].items()} }")
    print(f"detection cost: {_fmt(report['detect_s_per_tick_per_chip'], '.2e')} s per tick per chip "
          f"(whole in-process pipeline); wall {report['wall_s']:.0f} s")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or the table."""
    report = bench_detect(
        seeds=args.seeds, ultraservers=args.ultraservers, control_seeds=args.control_seeds,
        control_ultraservers=args.control_ultraservers, control_ticks=args.control_ticks,
        jobs=args.jobs or os.cpu_count() or 1, noise=args.noise,
    )
    if args.output:
        with open(args.output, "w") as out:
            json.dump(report, out, indent=2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0
