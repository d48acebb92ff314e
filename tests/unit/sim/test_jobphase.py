"""Job phases against the simulator (issue 21 item 4): the monitor, told the jobs by the documents the simulator
announces, names each checkpoint and restart as the simulator's truth has it, raises nothing for checkpoints,
evaluations, a restart, a job's end or an idle UltraServer, and a fault that starts inside a checkpoint is still
found after it."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import Event
from rainierd.core.jobs import NameIndex, resolve_jobs
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.workload import JobAnnouncer, JobSpec
from rainierd.wire.jobs import JobDocument, decode_job, job_id_of_topic

TICKS = 260
EVERY, LONG = 60, 20  # a checkpoint every 60 s since the start, 20 s long: at 60, 120, 180, 240
ONSET = 125  # inside the second checkpoint
FOUND_BY = 180  # after that checkpoint (ends at 140), before the next
# One faulty job of two UltraServers per fault; then healthy jobs of one UltraServer: one that never checkpoints,
# one that evaluates, one that restarts, one that ends; then an idle UltraServer.
FAULTS = {
    "nl_degraded": (FaultKind.NL_DEGRADED, 0.5, "neuronlink"),
    "efa_degraded": (FaultKind.EFA_DEGRADED, 0.5, "efa"),
    "straggler": (FaultKind.STRAGGLER, 0.10, "chip"),
    "cooling_fan": (FaultKind.COOLING_FAN, 0.3, "node"),
}
HEALTHY = {
    "lab/steady": {},
    "lab/evals": {"eval_every_ticks": 50, "eval_ticks": 15},
    "lab/restarts": {"restart_ticks_at": (150,), "restart_ticks": 40},
    "lab/ends": {"end_tick": 200},
}
N_US = 2 * len(FAULTS) + len(HEALTHY) + 1


@dataclass(frozen=True)
class Run:
    topology: Topology
    faults: dict[str, Fault]
    events: list[Event]
    phases: dict[str, list[tuple[str, str]]]  # job -> per tick (monitor's phase, simulator's phase)


def _target(topo: Topology, job: int, entity: str) -> int:
    node = (2 * job + 1) * topo.nodes_per_ultraserver + 1  # a node of the job's second UltraServer
    return {"neuronlink": node * topo.links_per_node + 21, "efa": node * topo.efa_ports_per_node + 3,
            "chip": node * topo.chips_per_node + 5, "node": node}[entity]


@functools.cache
def run(seed: int) -> Run:
    topo = build_fleet(1, N_US)
    jobs = [JobSpec(id=f"lab/{name}", ultraservers=(2 * j, 2 * j + 1), start_tick=0, checkpoint_every_ticks=EVERY,
                    checkpoint_ticks=LONG) for j, name in enumerate(FAULTS)]
    jobs += [JobSpec(id=job, ultraservers=(2 * len(FAULTS) + i,), start_tick=0, **how)  # type: ignore[arg-type]
             for i, (job, how) in enumerate(HEALTHY.items())]
    faults = {name: Fault(kind, _target(topo, j, entity), severity, ONSET, TICKS)
              for j, (name, (kind, severity, entity)) in enumerate(FAULTS.items())}
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0, faults=list(faults.values()),
                       jobs=jobs)
    core = MonitorCore(topo)
    announcer, index = JobAnnouncer("sim"), NameIndex.of(topo)
    documents: dict[str, JobDocument] = {}
    events: list[Event] = []
    phases: dict[str, list[tuple[str, str]]] = {job.id: [] for job in jobs}
    for tick in range(TICKS):
        sample = model.step(tick)
        # The documents the simulator publishes, as the monitor decodes them.
        for topic, payload in announcer.changes(model.training.running_jobs(),
                                                restarting=model.training.restarting_jobs()):
            document = decode_job(topic, payload)
            if document is None:
                documents.pop(job_id_of_topic(topic))
            else:
                documents[document.id] = document
        members = resolve_jobs(index, documents.values())
        analysis = core.step([f for _t, f in tick_frames(topo, sample, publisher="t")], now_s=model.t_of(tick),
                             jobs=members)
        events += [e for e in analysis.events if e.raised]
        assert analysis.job_phases is not None
        seen = dict(zip(members.ids, analysis.job_phases.names(), strict=True))
        for truth in sample.truth.jobs:
            phases[truth.id].append((seen[truth.id], truth.phase))
    return Run(topo, faults, events, phases)


def _entity_node(topo: Topology, entity: str, ident: int) -> int:
    return {"neuronlink": lambda i: int(topo.link_node[i]), "efa": lambda i: int(topo.efa_node[i]),
            "chip": lambda i: int(topo.chip_node[i]), "node": lambda i: i}[entity](ident)


SEEDS = (0, 1, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_checkpoint_is_named_as_the_simulator_has_it(seed: int) -> None:
    """The monitor's phase is the simulator's at every tick of every job (a 1 s tick's utilisation is that
    second's), checkpoints and running alike."""
    phases = run(seed).phases
    for job, ticks in phases.items():
        # Evaluation is no phase the monitor names: its chips stay busy, at a lighter load.
        wrong = [t for t, (seen, truth) in enumerate(ticks) if seen != truth.replace("eval", "running")]
        assert not wrong, f"{job}: monitor/truth differ at ticks {wrong[:5]}: {[ticks[t] for t in wrong[:5]]}"
    assert sum(truth == "checkpoint" for _seen, truth in phases["lab/straggler"]) == 4 * LONG
    assert sum(truth == "restarting" for _seen, truth in phases["lab/restarts"]) == 40
    assert sum(truth == "eval" for _seen, truth in phases["lab/evals"]) > 0
    assert len(phases["lab/ends"]) == 200


@pytest.mark.parametrize("seed", SEEDS)
def test_nothing_is_raised_for_a_checkpoint_or_on_the_healthy_and_idle_ultraservers(seed: int) -> None:
    """Every raised event is on a faulty node (the fault's entity, or what it heats: a fan's chips), at or after
    its onset: four checkpoints of four jobs, a steady job and an idle UltraServer raise nothing."""
    r = run(seed)
    faulty_nodes = {_entity_node(r.topology, FAULTS[name][2], f.target) for name, f in r.faults.items()}
    for e in r.events:
        if e.entity == "ultraserver":
            node_ultraservers = {int(r.topology.node_ultraserver[n]) for n in faulty_nodes}
            assert e.id in node_ultraservers, e
        else:
            assert e.entity != "feed", e
            assert _entity_node(r.topology, e.entity, e.id) in faulty_nodes, e
        assert e.tick >= ONSET, e


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(FAULTS))
def test_a_fault_that_starts_inside_a_checkpoint_is_found_after_it(name: str, seed: int) -> None:
    r = run(seed)
    entity, target = FAULTS[name][2], r.faults[name].target
    found = [e.tick for e in r.events if (e.entity, e.id) == (entity, target)]
    assert found, f"{name} on {entity} {target} never raised"
    assert found[0] < FOUND_BY, f"{name} raised at tick {found[0]}, not before the next checkpoint ({FOUND_BY})"
