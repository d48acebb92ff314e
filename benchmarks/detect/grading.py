"""How the detection benchmark grades a run against the faults it injected
(docs/detection.md).

A fault is detected when a new detection (a raise from healthy) names its
component within ``[start, end + grace]``; time to detect is that raise's
time minus the fault's start.  Time to clear is the time of the first event
after that raise which returns the component to healthy, minus the fault's
end: negative when it cleared while the fault was still in effect ("cleared
early", a sign of flapping), missing when it did not clear within the tail
("not cleared").  Further raises on the same component within the fault's
window count against precision (a flapping link must be one event).  Raises
on components a fault really affects but does not name (the chips of a node
whose fans failed) are explained: neither true nor false.  Every other raise
is a false alarm.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from benchmarks.detect.alarms import poisson_upper, rates_by_class
from benchmarks.detect.placing import GRACE_S, tail_seconds, ticks_of
from rainierd.core.detect import Event
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.sim.faults import TARGETS, Fault, FaultKind

__all__ = ["ENTITY", "HARD", "RunResult", "compare", "control", "grade"]

HARD: Final = {FaultKind.NL_DOWN, FaultKind.EFA_DOWN, FaultKind.CHIP_FAILED, FaultKind.NODE_LOST}
ENTITY: Final = {
    "link": "neuronlink", "efa": "efa", "chip": "chip", "node": "node", "ultraserver": "ultraserver",
}


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
    # Job-mix control runs only (benchmarks/detect/phases.py): each raised event with its job phase, the
    # UltraServer-seconds of each phase, and how many times jobs entered each phase.
    phase_rows: list[dict[str, Any]] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    phase_entries: dict[str, int] = field(default_factory=dict)
    phase_entered_ultraservers: dict[str, int] = field(default_factory=dict)


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
    by_kind: dict[str, Tally] = defaultdict(Tally)
    for (kind, _severity), t in rows.items():
        k = by_kind[kind]
        k.faults += t.faults
        k.detected += t.detected
        k.ttd_s += t.ttd_s
        k.ttc_s += t.ttc_s
        k.not_cleared += t.not_cleared
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
        # Per fault kind, every severity and placement together: what an SRE waits for a page and its clear.
        "by_kind": [
            {"kind": kind, "faults": t.faults, "detected": t.detected,
             "ttd_median_s": _median(t.ttd_s), "ttd_p95_s": _p95(t.ttd_s),
             "ttc_median_s": _median(t.ttc_s), "ttc_p95_s": _p95(t.ttc_s), "not_cleared": t.not_cleared}
            for kind, t in sorted(by_kind.items())
        ],
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


def control(results: list[RunResult], seconds: float) -> dict[str, Any]:
    """Return the false-alarm figures of the fault-free runs: per day per 10k chips, in all and per entity
    class, each with its exact 95 % Poisson upper bound (``alarms``), and the runs' composition."""
    events = [e for r in results for e in r.events if e.raised]
    chip_days = sum(r.chips * r.ticks * r.tick_s for r in results) / 86_400.0
    units = chip_days / 1e4
    shapes = Counter((r.chips, r.ticks * r.tick_s) for r in results)
    return {
        "runs": len(results), "chips": results[0].chips if results else 0,
        "ticks": results[0].ticks if results else 0, "seconds": seconds, "chip_days": chip_days,
        # Which fleets for how long made up the chip-days: a big fleet over a short time, a small one long.
        "composition": [{"runs": n, "chips": chips, "seconds": secs, "chip_days": n * chips * secs / 86_400.0}
                        for (chips, secs), n in sorted(shapes.items())],
        "false_alarms": len(events),
        # What the control cost: its runs' seconds in their worker processes, summed (the CPU it needs).
        "run_seconds": sum(r.seconds for r in results),
        "false_alarms_per_day_per_10k_chips": len(events) / units if units else None,
        # The exact one-sided Poisson bound: 3.0 / exposure with no alarm seen.
        "upper_95_per_day_per_10k_chips": poisson_upper(len(events)) / units if units else None,
        "by_class": rates_by_class(events, chip_days),
        "by_entity": dict(Counter(f"{e.entity}:{e.after}" for e in events)),
        "effective_fp8_error_max": max((max(r.effective_error) for r in results if r.effective_error),
                                       default=None),
    }


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def compare(graded: dict[str, Any], baseline: dict[str, Any], baseline_tick_s: float) -> dict[str, Any]:
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
