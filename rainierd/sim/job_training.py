"""The training the simulated fleet runs when it runs jobs: each job a
synchronous group over its own, arbitrary set of UltraServers, paced like
``Training``'s fixed groups, through its phases (``sim/workload.py``).

Groups are renumbered when the set of jobs changes: the active jobs first
(in start order), then one group of every idle UltraServer, which never
steps (utilisation and FLOP 0) and whose capacity truth counts as
unallocated, never lost.  A job in a checkpoint or a restart steps no work
either, its collectives silent; truth charges that to no fault cause, and
counts it in the job's stall seconds.  A fault in one UltraServer of a job
slows the whole job, and no other.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rainierd._types import F64
from rainierd.fleet import CAUSES, Topology, Trainium2, step_excess, step_time
from rainierd.sim.faults import Effects, Fault, fault_ultraservers
from rainierd.sim.params import FleetParams
from rainierd.sim.sample import JobTruth
from rainierd.sim.training import Pace, Training
from rainierd.sim.workload import EVAL, PHASES, RESTARTING, RUNNING, STALLS, JobMix, JobSchedule, JobSpec

_IDLE = -1  # the idle group's phase


class JobTraining(Training):
    """The jobs of one fleet as synchronous groups: their phases, pace and true loss, per job."""

    def __init__(
        self, topology: Topology, params: FleetParams, schedule: JobSchedule, *, hardware: Trainium2,
        start_s: float, tick_s: float,
    ) -> None:
        # Not Training.__init__: it draws the fixed groups' phases from the model's stream, which jobs leave alone.
        self.topology, self.params, self.hw = topology, params, hardware
        self.schedule, self.start_s, self.tick_s = schedule, start_s, tick_s
        self.mix = schedule.mix or JobMix()
        self.jobs: list[JobSpec] = []
        self._stall_ticks: dict[str, int] = {}
        self._set_groups([])
        self.phase = np.full(self.n_groups, _IDLE, dtype=np.int64)
        self._lost = np.zeros(self.n_groups)
        self._lost_g: dict[str, F64] = {c: np.zeros(self.n_groups) for c in CAUSES}

    def _set_groups(self, jobs: list[JobSpec]) -> None:
        topo = self.topology
        self.jobs = jobs
        self.n_groups = len(jobs) + 1
        us_group = np.full(topo.n_ultraservers, len(jobs), dtype=np.int64)
        for g, job in enumerate(jobs):
            us_group[list(job.ultraservers)] = g
        self.us_group = us_group
        self.chip_group = us_group[topo.chip_ultraserver]
        self.link_group = us_group[topo.node_ultraserver[topo.link_node]].astype(np.int32)
        self.efa_group = us_group[topo.node_ultraserver[topo.efa_node]].astype(np.int32)
        self._chips_g = np.bincount(self.chip_group[topo.chip_present], minlength=self.n_groups)

    def advance(self, tick: int) -> None:
        """Move to ``tick``: start and end jobs (regrouping when the set changes), and set each job's phase."""
        jobs = self.schedule.active(tick)
        if [j.id for j in jobs] != [j.id for j in self.jobs]:
            self._set_groups(jobs)
        self.phase = np.array([j.phase(tick) for j in jobs] + [_IDLE], dtype=np.int64)
        # Ended jobs are forgotten; a job's stall count lives as long as the job.
        self._stall_ticks = {job.id: self._stall_ticks.get(job.id, 0) + (int(phase) in STALLS)
                             for job, phase in zip(jobs, self.phase, strict=False)}

    def running_jobs(self) -> tuple[tuple[str, tuple[int, ...], float], ...]:
        """Return the jobs running now as (id, UltraServers, start in Unix seconds)."""
        return tuple((j.id, j.ultraservers, self.start_s + j.start_tick * self.tick_s) for j in self.jobs)

    def restarting_jobs(self) -> frozenset[str]:
        """Return the ids of the jobs restarting now (their documents say so)."""
        return frozenset(j.id for j, phase in zip(self.jobs, self.phase, strict=False) if phase == RESTARTING)

    def cycle_phase(self) -> F64:
        """Return where in its step cycle each job started, as a share of a step (the idle group's: 0)."""
        return np.array([j.cycle_phase for j in self.jobs] + [0.0])

    def busy_share(self, elapsed_s: float) -> F64:
        """Return each group's healthy busy share: training's cycle, evaluation's lower one, 0 when not stepping."""
        p, m = self.params, self.mix
        cycle_phase = np.array([j.cycle_phase for j in self.jobs] + [0.0])
        train = p.util_mean + p.util_cycle_amp * np.sin(2.0 * np.pi * (elapsed_s / p.step_s + cycle_phase))
        evaluate = m.eval_busy_share + p.util_cycle_amp * np.sin(2.0 * np.pi * (elapsed_s / m.eval_step_s
                                                                                 + cycle_phase))
        return np.where(self.phase == RUNNING, train, np.where(self.phase == EVAL, evaluate, 0.0))

    def _reduce(self, values: npt.NDArray[np.generic], group: npt.NDArray[np.integer], reduce: str) -> F64:
        out = np.full(self.n_groups, np.inf if reduce == "min" else -np.inf)
        (np.minimum if reduce == "min" else np.maximum).at(out, group, values.astype(np.float64))
        return np.where(np.isfinite(out), out, 1.0 if reduce == "min" else 0.0)

    def pace(self, e: Effects, thermal_clock: F64, efa_stretch: F64) -> Pace:
        """Per job: slowest member, slowest paths, the pace they allow, and its phase's collective traffic."""
        topo, p = self.topology, self.params
        clock = np.minimum(thermal_clock, e.chip_clock_cap) * e.site_dvfs[topo.chip_site]
        speed = clock * (1.0 - e.chip_slowdown)
        dead = e.chip_failed | e.node_silent[topo.chip_node]
        s_min = self._reduce(speed, self.chip_group, "min")
        f_nl = self._reduce(e.link_path_frac, self.link_group, "min")
        f_efa = self._reduce(e.efa_frac / efa_stretch, self.efa_group, "min")
        group_dead = self._reduce(dead, self.chip_group, "max") > 0
        step = step_time(s_min, f_nl, f_efa, shares=p.shares)
        stepping = (self.phase == RUNNING) | (self.phase == EVAL)
        pace = np.where(group_dead | ~stepping, 0.0, 1.0 / step)
        traffic = np.where(self.phase == RUNNING, 1.0, np.where(self.phase == EVAL, self.mix.eval_comm_share, 0.0))
        return Pace(clock, speed, s_min, f_nl, f_efa, group_dead, pace, step, traffic)

    def lost_by_cause(self, e: Effects, group: Pace) -> dict[str, float]:
        """Split each stepping job's lost FLOP/s over the terms of its step time; keep it per job and cause.

        A job in a checkpoint or restart, and the idle UltraServers, have no
        healthy work to lose: nothing is charged to a fault for them.
        """
        p, m = self.params, self.mix
        busy = np.where(self.phase == RUNNING, p.util_mean, np.where(self.phase == EVAL, m.eval_busy_share, 0.0))
        healthy = self.hw.fp8_dense_flops * busy * self._chips_g  # cycle-averaged
        dead = group.dead
        failed_group = self._reduce(e.chip_failed, self.chip_group, "max") > 0
        lost = {c: np.zeros(self.n_groups) for c in CAUSES}
        lost["failed_chip"] = healthy * (dead & failed_group)
        lost["stale_telemetry"] = healthy * (dead & ~failed_group)
        compute, nl, efa = step_excess(group.s_min, group.f_nl, group.f_efa, shares=p.shares)
        excess = compute + nl + efa
        with np.errstate(invalid="ignore", divide="ignore"):
            share_lost = np.where(dead | (excess <= 0), 0.0, healthy * (1.0 - 1.0 / group.step) / excess)
        # The compute term is the slowest member's (the first of equals): a straggler if its slowdown
        # outweighs its clock loss, thermal throttling otherwise.
        n_chips = group.speed.size
        is_min = group.speed == group.s_min[self.chip_group]
        slowest = np.full(self.n_groups, n_chips)
        np.minimum.at(slowest, self.chip_group[is_min], np.flatnonzero(is_min))
        straggler = np.zeros(self.n_groups, dtype=bool)
        held = slowest < n_chips
        straggler[held] = e.chip_slowdown[slowest[held]] > (1.0 - group.clock[slowest[held]])
        lost["straggler"] = share_lost * compute * straggler
        lost["thermal_throttle"] = share_lost * compute * ~straggler
        lost["degraded_neuronlink"] = share_lost * nl
        lost["degraded_efa"] = share_lost * efa
        self._lost_g = lost
        self._lost = np.where(dead, healthy, share_lost * excess)
        return {c: float(v.sum()) for c, v in lost.items()}

    def _groups_of(self, fault: Fault) -> npt.NDArray[np.int64]:
        """Return the jobs (and the idle group, whose loss is 0) a fault's target belongs to."""
        return np.unique(self.us_group[fault_ultraservers(self.topology, fault)])

    def job_truth(self, flops: F64) -> tuple[tuple[JobTruth, ...], tuple[int, ...], int]:
        """Return each active job's truth this tick, given each chip's FLOP/s; the idle UltraServers and chips."""
        topo = self.topology
        present = topo.chip_present
        effective = np.bincount(self.chip_group[present], weights=flops[present], minlength=self.n_groups)
        peak = self._chips_g * self.hw.fp8_dense_flops
        jobs = tuple(
            JobTruth(
                id=job.id, ultraservers=job.ultraservers, start_s=self.start_s + job.start_tick * self.tick_s,
                phase=PHASES[int(self.phase[g])], chips=int(self._chips_g[g]), peak_flops=float(peak[g]),
                effective_flops=float(effective[g]), lost_flops={c: float(v[g]) for c, v in self._lost_g.items()},
                stall_s=self._stall_ticks.get(job.id, 0) * self.tick_s,
            )
            for g, job in enumerate(self.jobs)
        )
        idle = tuple(int(u) for u in np.flatnonzero(self.us_group == len(self.jobs)))
        return jobs, idle, int(self._chips_g[-1])
