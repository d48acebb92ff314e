"""One run of the control campaign: a fault-free fleet running the job mix,
simulated and watched by the monitor core faster than real time, with a
monitor restart and a broker outage inside it; every raise kept with the
evidence that fired.

What the monitor meets here is what the daemon meets, as far as one process
can show it:

* **Jobs** arrive as the job contract's retained documents: the simulator's
  ``JobAnnouncer`` writes them, a retained set stands for the broker, and the
  monitor's own ``JobFeed`` hears and resolves them (``monitor/jobs.py``).
* **The listening clock** (``monitor/clock.py``): frames are received at the
  listening time of their tick, which stops while the monitor is deaf.
* **The broker outage**: for ``outage_s`` no frame and no job document
  arrives, the monitor is disconnected (its clock stops) and keeps
  analysing empty windows; frames published meanwhile are gone (QoS 0), the
  sequence numbers say so.  On reconnection the broker delivers the
  retained job documents again.
* **The monitor restart**: a graceful stop saves the stream checkpoint and
  the learned state through the monitor's own ``Checkpointer``
  (``monitor/checkpointing.py``, real files); ``restart_down_s`` of frames
  are missed; a new core, a new listening clock from 0 and a new job feed
  start, take both files back and hear the retained documents.

The job mix is the simulator's (``JobMix``) with its gaps scaled to the run
(``campaign_mix``), so that even a few minutes hold checkpoints,
evaluations, restarts, job ends and arrivals, and idle UltraServers; the
lengths of the phases stay near the real ones.  Phases come faster than on
a real fleet: a harsher control, never a kinder one.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from benchmarks.control.evidence import evidence
from benchmarks.detect.fleets import fleet_of, frames_of, monitor_of, simulator_of
from benchmarks.detect.phases import PhaseLog, phase_exposure
from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import Event
from rainierd.core.ingest import Received
from rainierd.fleet.ids import entity_id
from rainierd.fleet.topology import Topology
from rainierd.monitor.checkpointing import Checkpointer
from rainierd.monitor.jobs import JobFeed
from rainierd.settings import Settings
from rainierd.sim import FleetParams
from rainierd.sim.job_training import JobTraining
from rainierd.sim.workload import JobAnnouncer, JobMix
from rainierd.wire import Frame

__all__ = ["ControlRun", "RunResult", "campaign_mix", "run_control"]

# Where in the run the monitor restarts and the broker goes away, as shares of its length.
RESTART_AT: Final = 0.4
OUTAGE_AT: Final = 0.7
RESTART_DOWN_S: Final = 5.0  # a restart's missed frames: a container's stop and start
OUTAGE_S: Final = 30.0  # a broker's restart, or a fail-over (NATS ~10 s: docs/scaling.md), three times over
# After each connection the monitor judges no silence while publishers reconnect: the daemon's default.
RECONNECT_GRACE_S: Final = float(Settings.model_fields["reconnect_grace_s"].default)
# The mix's own gaps are for a 6 h job; a run of R seconds scales them by R / 6 h.
_MIX_RUN_S: Final = 6 * 3_600.0


def campaign_mix(run_s: float) -> JobMix:
    """Return the simulator's job mix with its gaps scaled to a run of ``run_s`` seconds: a job lasts about
    half the run; each checkpoints every sixth to third of it and evaluates every quarter to half; about one
    restart in two jobs of one UltraServer; arrivals while below the target share (at least a twentieth of the run
    apart on average, so a small fleet, full at the start, has idle UltraServers between jobs).  The phases' lengths are
    the mix's, capped to a thirtieth to a tenth of the run so a short run still holds them whole.
    """
    m, scale = JobMix(), run_s / _MIX_RUN_S

    def capped(span: tuple[float, float], low: float, high: float) -> tuple[float, float]:
        return min(span[0], low * run_s), min(span[1], high * run_s)

    return replace(
        m, median_duration_s=run_s / 2, arrival_every_s=max(m.arrival_every_s * scale, run_s / 20),
        checkpoint_every_s=(run_s / 6, run_s / 3), eval_every_s=(run_s / 4, run_s / 2),
        restarts_per_us_day=86_400.0 / run_s,
        checkpoint_s=capped(m.checkpoint_s, 1 / 30, 1 / 15), eval_s=capped(m.eval_s, 1 / 20, 1 / 10),
        restart_s=capped(m.restart_s, 1 / 20, 1 / 10),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRun:
    """One fault-free run: the fleet, its profile and tick, its seed and length, and when it is disturbed."""

    profile: str
    tick_s: float
    ultraservers: int
    seed: int
    seconds: float
    noise: float = 1.0
    restart_down_s: float = RESTART_DOWN_S
    outage_s: float = OUTAGE_S

    @property
    def ticks(self) -> int:
        """Return the run's ticks (its seconds rounded up to whole ticks)."""
        return max(1, -int(-self.seconds // self.tick_s))

    def tick_at(self, share: float) -> int:
        """Return the tick ``share`` of the way through the run."""
        return int(share * self.ticks)

    @property
    def disturbed(self) -> bool:
        """Return True if the restart and the outage both end before the run does (with a tick to spare)."""
        return self.tick_at(OUTAGE_AT) + max(1, round(self.outage_s / self.tick_s)) < self.ticks - 1 and (
            self.tick_at(RESTART_AT) + max(1, round(self.restart_down_s / self.tick_s)) < self.tick_at(OUTAGE_AT))

    @property
    def work(self) -> float:
        """Return the run's rough cost, for the estimate of the time left."""
        return float(self.ultraservers * self.ticks)


@dataclass(eq=False)
class RunResult:
    """What one run produced: its exposure, every raise with its evidence, and what it cost."""

    run: ControlRun
    chips: int  # present chips: a partial UltraServer's absent nodes hold none
    ticks: int
    raises: list[dict[str, Any]] = field(default_factory=list)
    clears: int = 0
    escalations: int = 0  # changes between two unhealthy states
    restored_learned: bool = False  # the restarted monitor took the learned state back
    restored_accounting: bool = False
    frames_published: int = 0
    frames_applied: int = 0
    frames_lost: int = 0  # the restarted monitor's count, carried by its checkpoint
    phase_seconds: dict[str, float] = field(default_factory=dict)
    phase_entries: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def chip_days(self) -> float:
        """Return the exposure: present chips x simulated days."""
        return self.chips * self.ticks * self.run.tick_s / 86_400.0


class _Broker:
    """The retained job documents, as a broker keeps them for whoever connects next."""

    def __init__(self) -> None:
        self.retained: dict[str, bytes] = {}

    def publish(self, changes: list[tuple[str, bytes]]) -> None:
        for topic, payload in changes:
            if payload:
                self.retained[topic] = payload
            else:
                self.retained.pop(topic, None)


def _raise_row(run: ControlRun, core: MonitorCore, event: Event, *, tick: int, log: PhaseLog) -> dict[str, Any]:
    """Return one raise as the report lists it: seed, tick, entity and its canonical id, state, reasons, the job
    phase it fell in, and the evidence that fired."""
    topo = core.topology
    # The phase log numbers ticks as the simulator does; the event's own tick is its monitor's analysis count.
    phase = log.attribute(replace(event, tick=tick), topo, run.tick_s)
    return {
        "profile": run.profile, "tick_s": run.tick_s, "seed": run.seed, "tick": tick, "t_s": tick * run.tick_s,
        "entity": event.entity, "id": entity_id(topo, event.entity, event.id), "index": event.id,
        "after": event.after, "reasons": list(event.reasons), "onset_tick": event.onset_tick,
        "phase": phase["phase"], "recent_phases": phase["recent"], "evidence": evidence(core, event),
    }


class _Monitor:
    """One monitor process of a run: its core, its job feed and its listening clock, from its start to its stop;
    its checkpoints at ``path``, as the daemon keeps them."""

    def __init__(self, topo: Topology, *, tick_s: float, path: Path, retained: dict[str, bytes] | None = None,
                 ) -> None:
        self.core, self.feed, self.path = monitor_of(topo, tick_s=tick_s), JobFeed(topo), path
        self.listening_s = 0.0  # a new process's listening clock starts at 0
        self.restored_accounting = self.restored_learned = False
        if retained is not None:  # a restart: both files taken back, the retained job documents heard
            self.restored_accounting = self._checkpointer().restore()
            self.restored_learned = bool(self.core.detector.chips.baseline.history_s.any())
            self.hear(list(retained.items()))

    def _checkpointer(self) -> Checkpointer:
        return Checkpointer(self.path, self.core.ingest, fleet=self.core.topology.name, learned=self.core)

    def stop(self) -> None:
        """Stop gracefully, as on SIGTERM: save the stream checkpoint and the learned state."""
        asyncio.run(self._checkpointer().save(final=True))

    def hear(self, documents: list[tuple[str, bytes]]) -> None:
        """Take job documents (topic, payload) as the session hands them to the job feed."""
        for topic, payload in documents:
            self.feed.hear(topic, payload)

    def analyse(self, frames: list[Frame], *, listened_s: float) -> list[Event]:
        """Move the listening clock on by ``listened_s``, receive ``frames`` at its time (whatever the publishers'
        clocks say) and analyse, with the jobs heard; return the events."""
        self.listening_s += listened_s
        now_s = self.listening_s
        analysis = self.core.analyse_frames([Received(now_s, None, frame) for frame in frames], now_s=now_s,
                                            jobs=self.feed.resolve(self.feed.pending()))
        self.core.ingest.record(analysis.flush)
        return analysis.events


def run_control(run: ControlRun, watch: Callable[[int, MonitorCore], None] | None = None) -> RunResult:
    """Simulate and watch ``run``; return its raises with their evidence, its exposure and what it cost.
    ``watch``, if given, is called after each analysis with the tick and the monitor's core (not while no
    monitor runs): the anchors' detectors read the same admitted telemetry there (``benchmarks/anchors``).

    Raises KeyError for a profile the simulator does not have.
    """
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    topo, ticks = fleet_of(run.profile, run.ultraservers), run.ticks
    params = FleetParams(noise=run.noise, jobs="mix", job_mix=campaign_mix(ticks * run.tick_s))
    model = simulator_of(topo, run.profile, seed=run.seed, tick_s=run.tick_s, params=params)
    assert isinstance(model.training, JobTraining)  # the mix runs: jobs="mix"
    result, log = RunResult(run, topo.n_present_chips, ticks), PhaseLog(topo.n_ultraservers)
    announcer, broker = JobAnnouncer(source="bench"), _Broker()
    restart, back = run.tick_at(RESTART_AT), run.tick_at(RESTART_AT) + max(1, round(run.restart_down_s / run.tick_s))
    outage, reconnect = run.tick_at(OUTAGE_AT), run.tick_at(OUTAGE_AT) + max(1, round(run.outage_s / run.tick_s))
    grace = max(0, round(RECONNECT_GRACE_S / run.tick_s))

    def deaf(tick: int) -> bool:
        """Return True while the monitor is disconnected, or in the reconnect grace after a connection
        (monitor/session.py): its listening clock stands still from this tick to the next."""
        return outage <= tick < reconnect or any(c <= tick < c + grace for c in (0, back, reconnect))

    with tempfile.TemporaryDirectory(prefix="rainierd-control-") as directory:
        monitor = _Monitor(topo, tick_s=run.tick_s, path=Path(directory) / "monitor.checkpoint", retained={})
        for tick in range(ticks):
            sample = model.step(tick)
            log.record(sample.truth)
            changes = announcer.changes(model.training.running_jobs(), restarting=model.training.restarting_jobs())
            broker.publish(changes)
            frames = frames_of(topo, sample)
            result.frames_published += len(frames)
            if tick == restart:
                monitor.stop()
            if restart <= tick < back:
                continue  # no monitor: the frames go nowhere
            if tick == back:  # a new process takes both files back and hears the retained documents
                monitor = _Monitor(topo, tick_s=run.tick_s, path=monitor.path, retained=broker.retained)
                result.restored_accounting, result.restored_learned = (monitor.restored_accounting,
                                                                       monitor.restored_learned)
            elif outage <= tick < reconnect:
                frames = []  # QoS 0 telemetry published into the outage is gone; documents wait, retained
            else:  # on reconnection the retained documents come with the subscription
                monitor.hear(list(broker.retained.items()) if tick == reconnect else changes)
            listened_s = 0.0 if tick == back or deaf(tick - 1) else run.tick_s
            for event in monitor.analyse(frames, listened_s=listened_s):
                if event.raised:
                    result.raises.append(_raise_row(run, monitor.core, event, tick=tick, log=log))
                elif event.after == "healthy":
                    result.clears += 1
                else:
                    result.escalations += 1
            if watch is not None:
                watch(tick, monitor.core)
    stats = monitor.core.ingest.stats
    result.frames_applied, result.frames_lost = stats.frames_applied, stats.frames_lost
    result.phase_seconds, result.phase_entries = phase_exposure(log, run.tick_s), dict(log.entries)
    result.wall_s, result.cpu_s = time.perf_counter() - started_wall, time.process_time() - started_cpu
    return result
