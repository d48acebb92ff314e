"""A real monitor for the read API's tests (tests/unit/api/test_read_api.py, the schema test): the demo fleet's core
after 45 ticks with NeuronLink 224 (a ring link of node n4, UltraServer u1) degraded from tick 35, a job on
each UltraServer, and every detection event announced through a real ``EventLog``."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

import numpy as np

from rainierd.api import MAX_LIMIT, ReadApi
from rainierd.core.analysis import MonitorCore
from rainierd.core.jobs import NameIndex, resolve_jobs
from rainierd.fleet.topology import build_topology
from rainierd.monitor.events import EventLog
from rainierd.monitor.snapshot import MonitorSnapshot, MonitorStatus
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire.jobs import JobDocument

FAULTY_LINK = 224
FAULTY_US = "u1"
JOBS = {"lab/pretrain": "u1", "lab/finetune": "u0"}


@dataclass(frozen=True, eq=False)
class Monitored:
    """A core, the snapshot of its last analysis and the event log it announced to."""

    core: MonitorCore
    snap: MonitorSnapshot
    events: EventLog

    def api(self, snapshot: MonitorSnapshot | None = None, *, max_limit: int = MAX_LIMIT) -> ReadApi:
        """Return a read API over this monitor (over ``snapshot`` instead of its own, if given)."""
        snap = snapshot or self.snap
        return ReadApi(self.core.topology, lambda: snap, core=self.core, lock=asyncio.Lock(),
                       events=lambda: self.events.recent, max_limit=max_limit)


def monitored() -> Monitored:
    """Return the demo monitor described in the module docstring."""
    topo = build_topology("demo")
    model = FleetModel(topo, np.random.default_rng(3), tick_s=1.0, start_s=1.8e9,
                       faults=[Fault(FaultKind.NL_DEGRADED, FAULTY_LINK, 0.5, 35, 100)])
    jobs = resolve_jobs(NameIndex.of(topo), [
        JobDocument(v=1, id=job, name=job.rsplit("/", 1)[-1], owner="lab", scheduler="slurm", source="test",
                    ultraservers=[us], start_s=0.0) for job, us in JOBS.items()])
    core = MonitorCore(topo)
    log = EventLog(topo, qos=1)
    for tick in range(45):
        analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="api")], jobs=jobs)
        for event in analysis.events:
            log.announce(event)
    snap = MonitorSnapshot.of(analysis, generation=45, chips_total=topo.n_present_chips, analysis_s=0.01,
                              analysed_ticks=45, events=Counter(log.counts), lag_s=0.5, status=MonitorStatus())
    return Monitored(core, snap, log)
