"""Running the anchors beside rainierd on the same frames: every fault run and fault-free run of the detection
benchmark (``detect/running.run_fleet``) and every run of the control campaign (``control/running.run_control``),
with the anchors watching the monitor core's admitted telemetry after each tick's analysis; then each anchor's
raises graded by the very code that grades rainierd's (``detect/grading.grade`` and ``control``,
``detect/alarms``).

The anchors see the core's fleet state (the frames decoded, counters made rates, unknown as NaN) and the job
membership the job documents gave it: telemetry, never the simulator's truth.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from benchmarks._progress import Progress
from benchmarks.anchors._common import Anchor, View
from benchmarks.anchors.cusum import Cusum
from benchmarks.anchors.minder import Minder
from benchmarks.anchors.thresholds import Thresholds
from benchmarks.anchors.zscore import ZScore
from benchmarks.control.running import ControlRun, run_control
from benchmarks.detect.alarms import class_of, poisson_upper, rates_of
from benchmarks.detect.fleets import fleet_of
from benchmarks.detect.grading import RunResult, control, grade
from benchmarks.detect.placing import GRACE_S, fault_runs, ticks_of
from benchmarks.detect.running import Job, run_fleet, run_pool
from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import Event
from rainierd.fleet.topology import Topology
from rainierd.sim.faults import Fault, FaultKind

__all__ = ["ANCHORS", "CALIBRATION_SEED", "RAINIERD", "Watch", "bench_anchors", "calibrate", "make_anchors"]

RAINIERD = "rainierd"
CALIBRATION_SEED = 900_000  # no graded run uses it (fault runs count from 0, controls from 500,000 and 700,000)
ANCHORS: tuple[str, ...] = ("thresholds", "minder", "cusum", "zscore")


def make_anchors() -> list[Anchor]:
    """Return a fresh instance of every anchor, in ``ANCHORS``' order."""
    return [Thresholds(), Minder(), Cusum(), ZScore()]


@dataclass(eq=False)
class Watch:
    """The anchors of one run, fed each tick's view of the core; their events kept by anchor."""

    anchors: list[Anchor] = field(default_factory=make_anchors)
    events: dict[str, list[Event]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def __call__(self, tick: int, core: MonitorCore) -> None:
        topo = core.topology
        job = core.jobs.node_job.astype(np.int64)
        # A node in no job is compared within its UltraServer (numbered after every job).
        group = np.where(job >= 0, job, int(job.max(initial=0)) + 1 + topo.node_ultraserver)
        view = View(tick, core.state, group)
        for anchor in self.anchors:
            started = time.perf_counter()
            self.events.setdefault(anchor.name, []).extend(anchor.observe(view))
            self.seconds[anchor.name] = self.seconds.get(anchor.name, 0.0) + time.perf_counter() - started


@dataclass(eq=False)
class Anchored:
    """One detection-benchmark run: rainierd's result and each anchor's events on the same frames."""

    job: Job
    result: RunResult
    events: dict[str, list[Event]]
    seconds: dict[str, float]


def _run_detect(job: Job) -> Anchored:
    watch = Watch()
    result = run_fleet(job.ultraservers, job.faults, seed=job.seed, ticks=job.ticks, noise=job.noise,
                       tick_s=job.tick_s, profile=job.profile, job_mix=job.job_mix, watch=watch)
    return Anchored(job, result, watch.events, watch.seconds)


@dataclass(eq=False)
class Campaigned:
    """One control-campaign run: its exposure, and the raises of rainierd and of each anchor by entity class."""

    run: ControlRun
    chip_days: float
    raises: dict[str, Counter[str]]


def _run_campaign(run: ControlRun) -> Campaigned:
    watch = Watch()
    result = run_control(run, watch=watch)
    raises = {RAINIERD: Counter(class_of(r["entity"], r["after"]) for r in result.raises)}
    for name, events in watch.events.items():
        raises[name] = Counter(class_of(e.entity, e.after) for e in events if e.raised)
    return Campaigned(run, result.chip_days, raises)


def _rate(counts: Counter[str], chip_days: float) -> dict[str, Any]:
    units = chip_days / 1e4
    n = sum(counts.values())
    return {"false_alarms": n, "per_day_per_10k_chips": n / units if units else None,
            "upper_95_per_day_per_10k_chips": poisson_upper(n) / units if units else None,
            "by_class": {k: v for k, v in rates_of(counts, chip_days).items() if v["false_alarms"]}}


def _rows(graded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{r['kind']}@{r['severity']:g}": {k: r[k] for k in ("faults", "detected", "precision", "recall", "f1",
                                                                  "ttd_median_s", "duplicates")}
            for r in graded["rows"]}


def _with_events(result: RunResult, events: list[Event]) -> RunResult:
    return replace(result, events=events)


def _fault_nodes(fault: Fault, topo: Topology) -> set[int]:
    """Return the nodes holding ``fault``'s target (every node of an UltraServer)."""
    kind, t = fault.target_kind, fault.target
    if kind == "ultraserver":
        return {int(n) for n in np.flatnonzero(topo.node_ultraserver == t)}
    node_of = {"chip": topo.chip_node, "link": topo.link_node, "efa": topo.efa_node}.get(kind)
    return {int(node_of[t])} if node_of is not None else {t}


def machine_recall(runs: Sequence[Anchored], name: str) -> dict[str, float]:
    """Return, per fault row, the share of faults whose machine (node) ``name`` raised within the fault's window
    and grace: how a machine-level detector such as Minder is judged in its own paper, beside the component-level
    grading every detector gets."""
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for a in runs:
        topo = fleet_of(a.job.profile, a.job.ultraservers)
        grace = ticks_of(GRACE_S, a.job.tick_s)
        raised = [e for e in a.events.get(name, []) if e.raised and e.entity == "node"]
        for f in a.job.faults:
            key = f"{f.kind}@{f.severity:g}"
            total[key] += 1
            nodes = _fault_nodes(f, topo)
            found[key] += any(e.id in nodes and f.start_tick <= e.tick <= f.end_tick + grace for e in raised)
    return {k: found[k] / total[k] for k in total}


def bench_anchors(
    *, profiles: Sequence[str], seeds: int, ultraservers: int, control_seeds: int, control_ultraservers: int,
    control_seconds: float, campaign_seeds: int, campaign_ultraservers: int, campaign_seconds: float,
    campaign_ticks_s: Sequence[float], kinds: Collection[FaultKind] | None = None, jobs: int = 1,
    noise: float = 1.0, progress: Progress | None = None,
) -> dict[str, Any]:
    """Run rainierd and every anchor on the detection benchmark's fault and control runs and the control
    campaign's runs, of each of ``profiles`` at 1 s ticks (the campaign also at ``campaign_ticks_s``); return
    the side-by-side report: per profile and fault row each detector's precision, recall, F1 and median time
    to detect, and each detector's false alarms a day per 10k chips in the detection control and the campaign."""
    started = time.perf_counter()
    tick_s = 1.0
    plan: list[Job] = []
    for profile in profiles:
        plan += [Job(profile, tick_s, False, us, faults, seed, run_ticks, noise)
                 for us, faults, seed, run_ticks in fault_runs(seeds, ultraservers, tick_s=tick_s, kinds=kinds,
                                                                 build=partial(fleet_of, profile))]
        plan += [Job(profile, tick_s, True, control_ultraservers, [], 500_000 + s,
                     ticks_of(control_seconds, tick_s), noise, True) for s in range(control_seeds)]
    campaign = [ControlRun(profile=p, tick_s=t, ultraservers=campaign_ultraservers, seed=700_000 + s,
                           seconds=campaign_seconds, noise=noise)
                for p in profiles for t in campaign_ticks_s for s in range(campaign_seeds)]
    total = len(plan) + len(campaign)
    runs = run_pool(_run_detect, plan, jobs, Progress(len(plan), prefix="bench anchors (detect runs): ")
                    if progress is None else progress)
    campaigned = run_pool(_run_campaign, campaign, jobs, Progress(len(campaign), prefix="bench anchors (campaign): ")
                          if progress is None else progress) if campaign else []

    detectors = (RAINIERD, *ANCHORS)
    sections: dict[str, Any] = {}
    for profile in profiles:
        mine = [a for a in runs if a.job.profile == profile]
        faulted = [a for a in mine if not a.job.control]
        controls = [a for a in mine if a.job.control]

        def events_of(a: Anchored, name: str) -> list[Event]:
            return a.result.events if name == RAINIERD else a.events.get(name, [])

        rows: dict[str, dict[str, Any]] = {}
        alarms: dict[str, Any] = {}
        cost: dict[str, float] = {}
        for name in detectors:
            graded = grade([_with_events(a.result, events_of(a, name)) for a in faulted], ultraservers)
            for key, row in _rows(graded).items():
                rows.setdefault(key, {})[name] = row
            c = control([_with_events(a.result, events_of(a, name)) for a in controls], control_seconds)
            alarms[name] = {k: c[k] for k in ("chip_days", "false_alarms", "false_alarms_per_day_per_10k_chips",
                                               "upper_95_per_day_per_10k_chips", "by_entity")}
            if name != RAINIERD:
                ticks = sum(a.result.ticks for a in mine)
                cost[name] = sum(a.seconds.get(name, 0.0) for a in mine) / max(ticks, 1)
        mine_campaign = [c for c in campaigned if c.run.profile == profile]
        chip_days = sum(c.chip_days for c in mine_campaign)
        campaign_alarms = {name: _rate(sum((c.raises.get(name, Counter()) for c in mine_campaign), Counter()),
                                       chip_days) for name in detectors}
        sections[profile] = {"rows": rows, "control": alarms,
                             "minder_machine_recall": machine_recall(faulted, "minder"),
                             "campaign": {"chip_days": chip_days, "runs": len(mine_campaign),
                                          "detectors": campaign_alarms},
                             "anchor_s_per_tick": cost}
    return {
        "benchmark": "anchors", "detectors": list(detectors), "profiles": sections,
        "config": {"profiles": list(profiles), "seeds": seeds, "ultraservers": ultraservers, "tick_s": tick_s,
                   "control_seeds": control_seeds, "control_ultraservers": control_ultraservers,
                   "control_seconds": control_seconds, "campaign_seeds": campaign_seeds,
                   "campaign_ultraservers": campaign_ultraservers, "campaign_seconds": campaign_seconds,
                   "campaign_ticks_s": list(campaign_ticks_s),
                   "kinds": None if kinds is None else sorted(str(k) for k in kinds), "jobs": jobs, "noise": noise,
                   "fault_runs": sum(1 for j in plan if not j.control), "runs_total": total},
        "wall_s": time.perf_counter() - started,
    }


def calibrate(profile: str, *, ultraservers: int = 16, seconds: float = 600.0) -> dict[str, float]:
    """Return the highest healthy per-entity NeuronLink CRC and EFA retransmit rates (a second) of one fault-free
    run of ``profile`` with the job mix at 1 s ticks, seed ``CALIBRATION_SEED``: what the threshold anchor's
    velocity thresholds are twice of (``thresholds``)."""
    top = {"crc_per_s": 0.0, "retrans_per_s": 0.0}

    def watch(_tick: int, core: MonitorCore) -> None:
        for key, values in (("crc_per_s", core.state.links.rates["crc_errors_total"]),
                            ("retrans_per_s", core.state.efa.rates["retrans_pkts_total"])):
            if np.isfinite(values).any():
                top[key] = max(top[key], float(np.nanmax(values)))

    run_fleet(ultraservers, [], seed=CALIBRATION_SEED, ticks=ticks_of(seconds, 1.0), profile=profile, job_mix=True,
              watch=watch)
    return top
