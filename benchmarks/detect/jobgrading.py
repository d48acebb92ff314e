"""How the detection benchmark grades its job rows (``jobrows``; docs/detection.md, "Job rows").

Each job that held a fault is graded on what it lost over the run's settled
ticks, summed (FLOP/s x ticks):

- ``ratio``: the monitor's loss over the simulator's, all causes together;
- ``cause_ratio``: the same for the job's main cause (its largest true one);
- ``by_cause_error``: the sum over causes of |monitor - truth| over the
  job's true loss: a loss charged to the wrong cause counts twice, once
  where it is missing and once where it is not due;
- ``within``: ``by_cause_error <= TOLERANCE`` (10 %): the job's loss by cause
  is within 10 % of the truth;
- ``culprit_found``: the entity the monitor charged most over the run is the
  injected one (for a node or UltraServer fault: inside it).

A fault that costs its job less than ``NEGLIGIBLE`` of its peak in truth
(cooling that never heats a chip to throttling) has no ratio to grade: its
row counts it under ``no_loss`` with what the monitor charged.  Jobs that
held no fault are graded together: what the monitor charged them over the
loss of the jobs that did hold one, and over their own peak.  Each one
charged anything is listed, with whether its culprits are its own entities
(a false detection inside it) or another job's (a loss leaking across).  A
job whose truth shows any phase but ``running`` in the settled ticks is
flagged ``interrupted``.

``fleet`` grades the headline (core/fleetloss.py): the fleet's lost FP8 by
cause over every run against the simulator's, per cause and as each run's
by-cause error (as a job's); beside it what the per-UltraServer fallback
alone says of the same states (each fault charged to its own UltraServer);
and the largest gap between the headline and its jobs' losses plus the
capacity in no job.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Final

from benchmarks.detect.grading import ENTITY
from benchmarks.detect.jobrows import JOB_ROW_ULTRASERVERS, JobRecord, JobRunResult
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.sim.faults import Fault

__all__ = ["NEGLIGIBLE", "TOLERANCE", "culprit_found", "culprit_ultraserver", "grade_job_rows", "job_figures"]

TOLERANCE: Final = 0.10
NEGLIGIBLE: Final = 1e-4  # of the job's peak: a loss this small is no loss to grade a ratio on


def culprit_ultraserver(kind: str, ident: int, topo: Topology) -> int:
    """Return the UltraServer of a culprit (entity kind as ``CULPRIT_KINDS`` names it, id)."""
    nodes = {"chip": topo.chip_node, "neuronlink": topo.link_node, "efa": topo.efa_node}
    node = ident if kind == "node" else int(nodes[kind][ident])
    return int(topo.node_ultraserver[node])


def culprit_found(culprit: tuple[str, int] | None, fault: Fault, topo: Topology) -> bool:
    """Return whether ``culprit`` (entity kind, id) is ``fault``'s target, or inside its node or UltraServer."""
    if culprit is None:
        return False
    kind, ident = culprit
    target = fault.target_kind
    if (kind, ident) == (ENTITY[target], fault.target):
        return True
    if target == "node":
        return kind == "chip" and int(topo.chip_node[ident]) == fault.target
    if target == "ultraserver":
        return culprit_ultraserver(kind, ident, topo) == fault.target
    return False


def _ratio(estimate: float, truth: float) -> float | None:
    return estimate / truth if truth > 0 else None


def job_figures(record: JobRecord, topo: Topology) -> dict[str, Any]:
    """Return one faulted job's graded figures (see the module docstring); raises ValueError for a job
    without a fault."""
    fault = record.fault
    if fault is None:
        raise ValueError(f"job {record.job_id} held no fault: it is graded with the clean jobs")
    truth, estimate = sum(record.truth.values()), sum(record.estimate.values())
    top = record.culprits.most_common(1)
    culprit = top[0][0] if top else None
    main = max(CAUSES, key=lambda c: record.truth[c])
    no_loss = truth <= NEGLIGIBLE * record.peak
    error = None if no_loss else sum(abs(record.estimate[c] - record.truth[c]) for c in CAUSES) / truth
    return {
        "job": record.job_id, "ultraservers": len(record.ultraservers),
        "kind": str(fault.kind), "severity": fault.severity, "scope": fault.target_kind,
        "target": fault.target, "no_loss": no_loss,
        "truth_flops_ticks": truth, "estimate_flops_ticks": estimate,
        "ratio": None if no_loss else _ratio(estimate, truth),
        "main_cause": None if no_loss else main,
        "cause_ratio": None if no_loss else _ratio(record.estimate[main], record.truth[main]),
        "by_cause_error": error, "within": None if error is None else error <= TOLERANCE,
        "culprit": None if culprit is None else list(culprit),
        "culprit_found": culprit_found(culprit, fault, topo),
        "estimate_of_peak": estimate / record.peak if record.peak else None,
        "interrupted": sorted(p for p in record.phases if p != "running"),
        "unpriced_ticks": record.unpriced_ticks,
        "truth_by_cause": {c: v for c, v in record.truth.items() if v},
        "estimate_by_cause": {c: v for c, v in record.estimate.items() if v},
    }


def _row(kind: str, severity: float, scope: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    graded = [j for j in jobs if not j["no_loss"]]
    ratios = [j["ratio"] for j in graded]
    errors = [j["by_cause_error"] for j in graded]
    return {
        "kind": kind, "severity": severity, "scope": scope, "jobs": len(jobs),
        "ultraservers": sorted({j["ultraservers"] for j in jobs}),
        "graded": len(graded), "within": sum(bool(j["within"]) for j in graded),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None),
        "by_cause_error_max": max(errors, default=None),
        "culprit_found": sum(j["culprit_found"] for j in graded),
        "no_loss": len(jobs) - len(graded),
        "no_loss_estimate_of_peak_max": max((j["estimate_of_peak"] or 0.0 for j in jobs if j["no_loss"]),
                                            default=None),
        "interrupted": sum(bool(j["interrupted"]) for j in jobs),
    }


def _fleet(runs: list[JobRunResult]) -> dict[str, Any]:
    """Return the headline's grade over ``runs`` (see the module docstring)."""
    truth = {c: sum(r.fleet_truth[c] for r in runs) for c in CAUSES}
    estimate = {c: sum(r.fleet_estimate[c] for r in runs) for c in CAUSES}
    fallback = {c: sum(r.fleet_fallback[c] for r in runs) for c in CAUSES}
    errors = []
    outside = []
    for r in runs:
        whole = sum(r.fleet_truth.values())
        if whole > 0:
            errors.append(sum(abs(r.fleet_estimate[c] - r.fleet_truth[c]) for c in CAUSES) / whole)
            if errors[-1] > TOLERANCE:
                outside.append({
                    "seed": r.draw, "model_seed": r.seed, "by_cause_error": errors[-1],
                    "faults": [f"{j.fault.kind} {j.fault.severity:g} {j.fault.target_kind} {j.fault.target}"
                               for j in r.jobs if j.fault is not None],
                    "truth_by_cause": {c: v for c, v in r.fleet_truth.items() if v},
                    "estimate_by_cause": {c: v for c, v in r.fleet_estimate.items() if v},
                    "jobs_estimate": sum(sum(j.estimate.values()) for j in r.jobs),
                    "jobs_truth": sum(sum(j.truth.values()) for j in r.jobs),
                })
    whole_truth = sum(truth.values())
    return {
        "ratio": _ratio(sum(estimate.values()), whole_truth),
        "fallback_ratio": _ratio(sum(fallback.values()), whole_truth),
        "by_cause": {c: {"ratio": _ratio(estimate[c], truth[c]), "fallback_ratio": _ratio(fallback[c], truth[c]),
                         "truth_flops_ticks": truth[c]} for c in CAUSES if truth[c] > 0 or estimate[c] > 0},
        "by_cause_error_total": (sum(abs(estimate[c] - truth[c]) for c in CAUSES) / whole_truth
                                 if whole_truth else None),
        "runs_graded": len(errors), "runs_within": sum(e <= TOLERANCE for e in errors),
        "run_by_cause_error_median": statistics.median(errors) if errors else None,
        "run_by_cause_error_max": max(errors, default=None),
        "sum_gap_max": max((r.sum_gap_max for r in runs), default=0.0),
        "runs_outside": outside,
    }


def grade_job_rows(results: Iterable[JobRunResult], topo: Topology | None = None) -> dict[str, Any]:
    """Return the job rows: one row per (kind, severity, scope), every faulted job's figures, and what the
    jobs holding no fault were charged."""
    topo = topo or build_fleet(1, JOB_ROW_ULTRASERVERS)
    by_cell: dict[tuple[str, float, str], list[dict[str, Any]]] = defaultdict(list)
    faulted: list[dict[str, Any]] = []
    clean_estimate = clean_truth = clean_peak = faulted_truth = 0.0
    clean_jobs = clean_charged = runs = 0
    worst: float | None = None
    leaks: list[dict[str, Any]] = []
    seeds: set[int] = set()
    every: list[JobRunResult] = []
    for run in results:
        runs += 1
        every.append(run)
        seeds.add(run.draw)
        for record in run.jobs:
            if record.fault is None:
                estimate = sum(record.estimate.values())
                clean_jobs += 1
                clean_charged += estimate > 0
                clean_estimate += estimate
                clean_truth += sum(record.truth.values())
                clean_peak += record.peak
                share = estimate / record.peak if record.peak else 0.0
                worst = share if worst is None else max(worst, share)
                if estimate > 0:
                    leaks.append({
                        "seed": run.draw, "model_seed": run.seed, "job": record.job_id,
                        "ultraservers": list(record.ultraservers), "estimate_of_peak": share,
                        "estimate_by_cause": {c: v for c, v in record.estimate.items() if v},
                        "culprits": [[kind, ident, flops] for (kind, ident), flops in record.culprits.most_common(3)],
                        # Its own entities (a false detection in it) or another job's (a loss leaking across)?
                        "culprits_in_own_job": all(culprit_ultraserver(kind, ident, topo) in record.ultraservers
                                                   for kind, ident in record.culprits),
                        "faults_in_run": [f"{f.kind} {f.severity:g} {f.target_kind} {f.target}"
                                          for f in (r.fault for r in run.jobs) if f is not None],
                    })
                continue
            figures = job_figures(record, topo) | {"seed": run.draw, "model_seed": run.seed}
            faulted.append(figures)
            faulted_truth += figures["truth_flops_ticks"]
            by_cell[figures["kind"], figures["severity"], figures["scope"]].append(figures)
    rows = [_row(k, s, sc, jobs) for (k, s, sc), jobs in sorted(by_cell.items(), key=lambda kv: (kv[0][0], -kv[0][1],
                                                                                                 kv[0][2]))]
    graded = [j for j in faulted if not j["no_loss"]]
    return {
        "tolerance": TOLERANCE, "runs": runs, "seeds": len(seeds),
        "faulted_jobs": len(faulted), "graded_jobs": len(graded),
        "within": sum(bool(j["within"]) for j in graded),
        "culprit_found": sum(j["culprit_found"] for j in graded),
        "interrupted": sum(bool(j["interrupted"]) for j in faulted),
        "rows": rows,
        "fleet": _fleet(every),
        "clean": {
            "jobs": clean_jobs, "charged": clean_charged,
            "estimate_flops_ticks": clean_estimate, "truth_flops_ticks": clean_truth,
            "estimate_of_faulted_truth": clean_estimate / faulted_truth if faulted_truth else None,
            "estimate_of_peak": clean_estimate / clean_peak if clean_peak else None,
            "estimate_of_peak_max": worst,
            "charged_jobs": leaks,
        },
        "jobs": faulted,
    }

