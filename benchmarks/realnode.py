"""``python -m benchmarks realnode``: the chip detector on what a real
Trainium2 node reports, graded against injected ground truth.

AWS neuron-monitor (through ``rainierd bridge neuron-monitor``) reports per
device utilisation, FLOP, HBM, ECC (HBM and SRAM apart), execution errors,
timeouts and latency, and whether the device is there; no clock,
temperature or power.  So the simulator's fleet is shown to the monitor as
such a node shows itself (``RealNodeView``): its chips' clock, throttle flag,
temperature and power left out (``--clock`` keeps them, a custom agent's
view), and the fields the simulator's agent does not send made up here:
each job's execution latency (a lognormal spread of 3 % a chip and a
sample, and a x3 spike at 5e-3 a chip-second), execution errors and
timeouts at a background of 2e-4 and 5e-5 a chip-second (single transient
errors the detector must not fail a chip for), and presence.

Each run watches ``--ultraservers`` UltraServers of the simulator's
``training`` profile (agents out of phase with +-1.5 s skews, heavy-tailed
noise, partial UltraServers) running fixed jobs with job phases: in every
eight UltraServers a job of two checkpointing 20 s every 60 s, one of two
checkpointing 15 s every 90 s and evaluating 30 s every 120 s, one of one
restarting at 150 s for 30 s and checkpointing 10 s every 70 s, one of two
running steadily, and one idle UltraServer; and the diurnal swing at the
detection benchmark's pace, a day an hour (the site's clock 2 % down at
mid-day heat).  The monitor is told the jobs
(``--jobs known``) or not.  A fault run injects one fault of each kind of
``KINDS`` on a chip of its own busy UltraServer, from 90-110 s for 120 s; a
control run injects none.

A fault is *found* when a raise names its chip, in its expected state and
with its reason, from its start to 10 s after its end; time to detect is
that raise less its start.  Every other raise of any entity is a false
alarm (a raise on a faulty chip within 60 s of its fault is a duplicate).
docs/detection.md, "Chips without a clock", quotes the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from rainierd._types import F64
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import Topology
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches
from rainierd.sim.params import FleetParams
from rainierd.sim.profile import PROFILES
from rainierd.sim.sample import TickSample
from rainierd.sim.workload import JobSpec
from rainierd.wire.jobs import JobDocument
from rainierd.wire.records import CHIP_DTYPE, Frame, NodeBatch

__all__ = ["HELP", "KINDS", "Injected", "Run", "add_arguments", "grade", "run", "run_fleet"]

HELP: Final = "the chip detector on what a real node reports (no clock), graded against injected faults"

# kind -> (severity, the state and reason a find must carry)
KINDS: Final[dict[str, tuple[float, str, str]]] = {
    "low_flop": (0.3, "straggler", "efficiency"),  # 30 % fewer FLOP than its peers at the same utilisation
    "straggler": (0.3, "straggler", "efficiency"),  # the simulator's: 30 % slower, busier for the same FLOP
    "util_collapse": (0.9, "straggler", "utilisation"),  # its utilisation and FLOP 90 % down, its peers busy
    "latency": (2.0, "straggler", "latency"),  # its executions take twice its peers'
    "exec_errors": (1.0, "failed", "exec_errors"),  # executions failing, a second
    "exec_timeouts": (0.5, "failed", "exec_timeouts"),  # executions timing out, a second
    "sram_ecc": (1.0, "failed", "sram_ecc_uncorrected"),  # one uncorrectable SRAM ECC error
    "absent": (0.0, "failed", "absent"),  # its device reported gone
}
FAULT_S: Final = 120.0
GRACE_S: Final = 10.0
DUPLICATE_S: Final = 60.0
_ERRORS_PER_S: Final = 2e-4
_TIMEOUTS_PER_S: Final = 5e-5
_LATENCY_SPREAD: Final = 0.03
_LATENCY_SPIKE_PER_S: Final = 5e-3
_IDLE_UTIL: Final = 0.05  # under this a chip runs no executions: no latency
_CLOCK_FIELDS: Final = ("clock_ratio", "throttled", "temp_c", "power_w")
_CHIP_FIELDS: Final = CHIP_DTYPE.names or ()
_ABSENT_KNOWN: Final = np.uint16(sum(1 << i for i, name in enumerate(_CHIP_FIELDS) if name in ("chip", "present")))
_LATENCY_BIT: Final = np.uint16(1 << _CHIP_FIELDS.index("exec_latency_us"))


@dataclass(frozen=True, slots=True)
class Injected:
    """One injected fault: its kind (``KINDS``), its chip and its window in seconds."""

    kind: str
    chip: int
    start_s: float
    end_s: float


@dataclass
class Run:
    """What one run raised, against what it injected."""

    injected: tuple[Injected, ...]
    raises: list[tuple[float, str, int, str, tuple[str, ...]]]  # (seconds, entity, id, state, reasons)
    chips: int
    seconds: float
    wall_s: float = 0.0


def jobs_of(topo: Topology, tick_s: float) -> list[JobSpec]:
    """Return the runs' jobs: the module docstring's pattern in every eight UltraServers."""
    def ticks(seconds: float) -> int:
        return max(1, round(seconds / tick_s))

    specs: list[JobSpec] = []
    for base in range(0, topo.n_ultraservers - 7, 8):
        specs += [
            JobSpec(id=f"lab/a{base}", ultraservers=(base, base + 1), start_tick=0,
                    checkpoint_every_ticks=ticks(60), checkpoint_ticks=ticks(20)),
            JobSpec(id=f"lab/b{base}", ultraservers=(base + 2, base + 3), start_tick=0,
                    checkpoint_every_ticks=ticks(90), checkpoint_ticks=ticks(15), eval_every_ticks=ticks(120),
                    eval_ticks=ticks(30)),
            JobSpec(id=f"lab/c{base}", ultraservers=(base + 4,), start_tick=0, restart_ticks_at=(ticks(150),),
                    restart_ticks=ticks(30), checkpoint_every_ticks=ticks(70), checkpoint_ticks=ticks(10)),
            JobSpec(id=f"lab/d{base}", ultraservers=(base + 5, base + 6), start_tick=0),
        ]
    return specs


def membership(topo: Topology, jobs: list[JobSpec]) -> JobMembership:
    """Return the jobs as the monitor resolves their documents."""
    docs = [JobDocument(v=1, id=job.id, name=job.id, owner="lab", scheduler="static", source="bench",
                        ultraservers=[f"u{u}" for u in job.ultraservers], start_s=0.0) for job in jobs]
    return resolve_jobs(NameIndex.of(topo), docs)


def place(topo: Topology, jobs: list[JobSpec], rng: np.random.Generator) -> list[Injected]:
    """Return one fault of each kind, each on a chip of its own busy UltraServer, from 90-110 s for 120 s."""
    busy = rng.permutation([u for job in jobs for u in job.ultraservers]).tolist()
    out: list[Injected] = []
    for i, kind in enumerate(KINDS):  # more kinds than busy UltraServers: the next on another node of one
        us = busy[i % len(busy)]
        nodes = np.flatnonzero(topo.node_present[us * topo.nodes_per_ultraserver:(us + 1) * topo.nodes_per_ultraserver])
        taken = {f.chip // topo.chips_per_node for f in out}
        free = [n for n in (us * topo.nodes_per_ultraserver + nodes).tolist() if n not in taken] or [
            us * topo.nodes_per_ultraserver + int(nodes[0])]
        node = int(rng.choice(free))
        chip = node * topo.chips_per_node + int(rng.integers(topo.chips_per_node))
        start = float(90 + rng.integers(0, 21))
        out.append(Injected(kind, chip, start, start + FAULT_S))
    return out


@dataclass(eq=False)
class RealNodeView:
    """The simulator's fleet as a real node shows it (module docstring), with the harness's faults applied."""

    topo: Topology
    injected: tuple[Injected, ...]
    clock: bool
    rng: np.random.Generator
    ultraserver_job: np.ndarray  # each UltraServer's job (its own number where it runs none)
    last_flop: F64 = field(init=False)
    withheld: F64 = field(init=False)  # FLOP kept off each chip's counter (low_flop, util_collapse)
    errors: np.ndarray = field(init=False)
    timeouts: np.ndarray = field(init=False)
    sram: np.ndarray = field(init=False)
    latency_base: F64 = field(init=False)

    def __post_init__(self) -> None:
        n = self.topo.n_chips
        self.last_flop = np.full(n, np.nan)
        self.withheld = np.zeros(n)
        self.errors, self.timeouts, self.sram = (np.zeros(n, np.uint64) for _ in range(3))
        # Each job runs its own graph: 20-80 ms an execution.
        self.latency_base = self.rng.uniform(20e3, 80e3, self.topo.n_ultraservers)[self.ultraserver_job]

    def _active(self, t_s: float) -> Iterator[Injected]:
        return (f for f in self.injected if f.start_s <= t_s < f.end_s)

    def frames(self, sample: TickSample, t_s: float, dt_s: float) -> list[Frame]:
        """Return the tick's batch frames as a real node reports them."""
        topo, rng, n = self.topo, self.rng, self.topo.n_chips
        chips = sample.chips
        total = chips["fp8_flop_total"].astype(np.float64)
        restarted = total < self.last_flop  # an agent restart: its counter begins again
        self.withheld[restarted] = 0.0
        step = np.nan_to_num(np.where(restarted, total, total - self.last_flop), nan=0.0)
        self.last_flop = total
        util = chips["util"].astype(np.float32).copy()
        present = np.ones(n, np.uint8)
        latency = (self.latency_base[topo.chip_ultraserver] * rng.lognormal(0.0, _LATENCY_SPREAD, n)).astype(np.float32)
        latency[rng.random(n) < _LATENCY_SPIKE_PER_S * dt_s] *= 3.0
        self.errors += rng.poisson(_ERRORS_PER_S * dt_s, n).astype(np.uint64)
        self.timeouts += rng.poisson(_TIMEOUTS_PER_S * dt_s, n).astype(np.uint64)
        for fault in self._active(t_s):
            c, severity = fault.chip, KINDS[fault.kind][0]
            if fault.kind == "low_flop":
                self.withheld[c] += severity * step[c]
            elif fault.kind == "util_collapse":
                self.withheld[c] += severity * step[c]
                util[c] *= 1.0 - severity
            elif fault.kind == "latency":
                latency[c] *= severity
            elif fault.kind == "exec_errors":
                self.errors[c] += np.uint64(rng.poisson(severity * dt_s))
            elif fault.kind == "exec_timeouts":
                self.timeouts[c] += np.uint64(rng.poisson(severity * dt_s))
            elif fault.kind == "sram_ecc" and t_s - dt_s < fault.start_s:
                self.sram[c] += np.uint64(1)
            elif fault.kind == "absent":
                present[c] = 0
        ran = util >= _IDLE_UTIL  # a chip that ran no execution reports no latency (left out, not NaN)
        extra: dict[str, np.ndarray] = {
            "fp8_flop_total": total - self.withheld, "util": util, "exec_latency_us": latency,
            "exec_errors_total": self.errors, "exec_timeouts_total": self.timeouts,
            "sram_ecc_uncorrected_total": self.sram, "sram_ecc_corrected_total": np.zeros(n, np.uint64),
            "present": present}
        return [self._batch(frame, extra, present, ran) if isinstance(frame, NodeBatch) else frame
                for _topic, frame in tick_batches(topo, sample, publisher="realnode", nodes_per_batch=128)]

    def _batch(self, batch: NodeBatch, extra: dict[str, np.ndarray], present: np.ndarray, ran: np.ndarray,
               ) -> NodeBatch:
        chips = dict(batch.columns["chips"])
        ids = chips["chip"].astype(np.int64)
        for name, values in extra.items():
            chips[name] = values[ids].astype(CHIP_DTYPE.fields[name][0])  # type: ignore[index]
        for name in () if self.clock else _CLOCK_FIELDS:
            chips.pop(name, None)
        have = np.uint16(sum(1 << i for i, name in enumerate(_CHIP_FIELDS) if name in chips))
        known = np.where(ran[ids], have, have & ~_LATENCY_BIT)
        known = np.where(present[ids] == 0, _ABSENT_KNOWN, known).astype(np.uint16)
        # A real node's agent reads no NeuronLink counter: its links are left out (ids only).
        links = {"link": batch.columns["links"]["link"]}
        return dataclasses.replace(batch, columns={**batch.columns, "chips": chips, "links": links},
                                   known={"chips": known})


def run_fleet(*, seed: int, faults: bool, clock: bool, jobs_known: bool, ultraservers: int = 8,
              seconds: float = 300.0, tick_s: float = 1.0) -> Run:
    """Run one fleet (module docstring) and return what it raised."""
    started = time.perf_counter()
    profile = PROFILES["training"]
    topo = profile.fleet(ultraservers, name=f"realnode-{ultraservers}")
    jobs = jobs_of(topo, tick_s)
    rng = np.random.default_rng(seed + 1_000)
    injected = tuple(place(topo, jobs, rng)) if faults else ()
    ticks = round(seconds / tick_s)
    stragglers = [Fault(FaultKind.STRAGGLER, f.chip, KINDS["straggler"][0], round(f.start_s / tick_s),
                        round(f.end_s / tick_s)) for f in injected if f.kind == "straggler"]
    # The diurnal swing at the detection benchmark's pace (a day an hour): the site's clock loses 2 % at mid-day
    # heat, every chip of it together.
    diurnal = Fault(FaultKind.DIURNAL, 0, 0.02, 0, ticks)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=0.0, profile=profile,
                       params=FleetParams(time_scale=24.0), jobs=jobs, faults=[*stragglers, diurnal])
    core = MonitorCore(topo, MonitorConfig(tick_s=tick_s, hardware=dataclasses.replace(
        TRN2, efa_ports_per_node=topo.efa_ports_per_node)))
    ultraserver_job = np.arange(topo.n_ultraservers)
    for job in jobs:
        ultraserver_job[list(job.ultraservers)] = job.ultraservers[0]
    view = RealNodeView(topo, tuple(f for f in injected if f.kind != "straggler"), clock, rng, ultraserver_job)
    known = membership(topo, jobs) if jobs_known else None
    out = Run(injected, [], topo.n_present_chips, seconds)
    for tick in range(ticks):
        t_s = model.t_of(tick)
        frames = view.frames(model.step(tick), t_s, tick_s)
        analysis = core.step(frames, now_s=t_s, jobs=known)
        out.raises += [(t_s, e.entity, e.id, e.after, e.reasons) for e in analysis.events if e.raised]
    out.wall_s = time.perf_counter() - started
    return out


def grade(runs: list[Run]) -> dict[str, Any]:
    """Return, over ``runs``: per kind, faults found and times to detect; and the false alarms by entity."""
    found: dict[str, list[float]] = {kind: [] for kind in KINDS}
    injected = dict.fromkeys(KINDS, 0)
    false: dict[str, int] = {}
    duplicates = 0
    for r in runs:
        claimed: set[Injected] = set()
        for t_s, entity, entity_id, state, reasons in r.raises:
            fault = next((f for f in r.injected if entity == "chip" and f.chip == entity_id
                          and f.start_s <= t_s <= f.end_s + DUPLICATE_S), None)
            if fault is None:
                false[entity] = false.get(entity, 0) + 1
                continue
            _severity, want_state, want_reason = KINDS[fault.kind]
            if fault in claimed or not (t_s <= fault.end_s + GRACE_S and state == want_state
                                        and want_reason in reasons):
                duplicates += 1
                continue
            claimed.add(fault)
            found[fault.kind].append(t_s - fault.start_s)
        for f in r.injected:
            injected[f.kind] += 1
    chip_hours = sum(r.chips * r.seconds for r in runs) / 3_600.0
    return {
        "kinds": {kind: {"injected": injected[kind], "found": len(found[kind]),
                         "ttd_median_s": statistics.median(found[kind]) if found[kind] else None,
                         "ttd_max_s": max(found[kind]) if found[kind] else None} for kind in KINDS if injected[kind]},
        "false_alarms": false, "duplicates": duplicates, "chip_hours": round(chip_hours, 1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--ultraservers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--tick", type=float, nargs="+", default=[1.0])
    parser.add_argument("--clock", choices=["without", "with"], nargs="+", default=["without", "with"])
    parser.add_argument("--jobs", choices=["known", "unknown"], nargs="+", default=["known", "unknown"])
    parser.add_argument("--runs", choices=["faults", "control"], nargs="+", default=["faults", "control"])
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    rows = []
    for tick_s in args.tick:
        for clock in args.clock:
            for jobs in args.jobs:
                for faults in (kind == "faults" for kind in args.runs):
                    runs = [run_fleet(seed=seed, faults=faults, clock=clock == "with", jobs_known=jobs == "known",
                                      ultraservers=args.ultraservers, seconds=args.seconds, tick_s=tick_s)
                            for seed in range(args.seeds)]
                    row = {"tick_s": tick_s, "clock": clock, "jobs": jobs, "runs": "faults" if faults else "control",
                           "wall_s": round(sum(r.wall_s for r in runs), 1), **grade(runs)}
                    print(f"bench realnode: {json.dumps(row)}", file=sys.stderr)
                    rows.append(row)
    if args.json:
        print(json.dumps({"benchmark": "realnode", "seeds": args.seeds, "ultraservers": args.ultraservers,
                          "seconds": args.seconds, "rows": rows}, indent=2))
        return 0
    print("| tick | clock | jobs | runs | kind | found | TTD median (max) s | false alarms | chip-hours |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        false = ", ".join(f"{k} {v}" for k, v in sorted(row["false_alarms"].items())) or "0"
        kinds = row["kinds"].items() or [("-", None)]
        for kind, k in kinds:
            found = f"{k['found']} of {k['injected']}" if k else "-"
            ttd = f"{k['ttd_median_s']} ({k['ttd_max_s']})" if k and k["found"] else "-"
            print(f"| {row['tick_s']} | {row['clock']} | {row['jobs']} | {row['runs']} | {kind} | {found} | {ttd} | "
                  f"{false} | {row['chip_hours']} |")
    return 0
