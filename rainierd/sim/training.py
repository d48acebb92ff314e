"""The training job the simulated fleet runs: its synchronous groups, their
step cycle and the pace each group's slowest member and paths allow, and the
FP8 FLOP/s that pace truly costs, by cause and by fault (the ground truth the
monitor's estimate is graded against).

A group is ``FleetParams.group_ultraservers`` UltraServers.  The pace is
``1 / step`` with the step formula of ``rainierd/fleet/pace.py``, the monitor's
too; a group with a failed or silent member stalls (pace 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, B
from rainierd.fleet import CAUSES, Topology, Trainium2, path_stretch, step_excess, step_time
from rainierd.sim.faults import Effects, Fault, fault_ultraservers
from rainierd.sim.params import FleetParams

EFA_PACKET_BYTES: Final = 8192


@dataclass(frozen=True, eq=False)
class Pace:
    """One tick's pace: each chip's clock and speed, and per group what they and its paths allow."""

    clock: F64  # per chip: the clock ratio (thermal, fault caps, DVFS)
    speed: F64  # per chip: clock x (1 - slowdown)
    s_min: F64  # per group from here on: the slowest member's speed
    f_nl: F64  # the bandwidth share the slowest NeuronLink path keeps
    f_efa: F64  # the share the slowest EFA path keeps, its stretch priced in
    dead: B  # a member failed or fell silent: the group stalls
    pace: F64  # steps per healthy step's time (0 while stalled)
    step: F64  # the step's time relative to a healthy one
    traffic: F64 | None = None  # per group: collective traffic relative to training's (jobs only: phases)


class Training:
    """The synchronous groups of one fleet, their step cycle, pace and true loss."""

    def __init__(
        self, topology: Topology, params: FleetParams, rng: np.random.Generator, *, hardware: Trainium2,
    ) -> None:
        topo, p = topology, params
        self.topology, self.params, self.hw = topology, params, hardware
        self.n_groups = -(-topo.n_ultraservers // p.group_ultraservers)
        self.chip_group = topo.chip_ultraserver // p.group_ultraservers
        # Which synchronous group each link and port paces with, computed once, not every tick.
        self.link_group = (topo.link_node // (topo.nodes_per_ultraserver * p.group_ultraservers)).astype(np.int32)
        self.efa_group = (topo.efa_node // (topo.nodes_per_ultraserver * p.group_ultraservers)).astype(np.int32)
        self._phase = rng.uniform(0.0, 1.0, self.n_groups)  # where in its step cycle each group starts
        self._lost = np.zeros(self.n_groups)  # each group's true lost FLOP/s, as of the last tick

    def advance(self, tick: int) -> None:
        """Move to ``tick``: the fixed groups never change (``JobTraining`` moves its jobs)."""

    def running_jobs(self) -> tuple[tuple[str, tuple[int, ...], float], ...]:
        """Return the jobs running now as (id, UltraServers, start in Unix seconds): none for fixed groups."""
        return ()

    def restarting_jobs(self) -> frozenset[str]:
        """Return the ids of the jobs restarting now: none for fixed groups."""
        return frozenset()

    def cycle_phase(self) -> F64:
        """Return where in its step cycle each group started, as a share of a step."""
        return np.asarray(self._phase, dtype=np.float64)

    def busy_share(self, elapsed_s: float) -> F64:
        """Return each group's healthy busy share ``elapsed_s`` into the run: the mean, swinging over its step."""
        p = self.params
        cycle = np.sin(2.0 * np.pi * (elapsed_s / p.step_s + self._phase))
        return np.asarray(p.util_mean + p.util_cycle_amp * cycle, dtype=np.float64)

    def pace(self, e: Effects, thermal_clock: F64, efa_stretch: F64) -> Pace:
        """Per synchronous group: slowest member, slowest paths, and the pace they allow."""
        topo, p = self.topology, self.params
        chips_per_us = topo.chips_per_node * topo.nodes_per_ultraserver
        per_group = p.group_ultraservers
        clock = np.minimum(thermal_clock, e.chip_clock_cap) * e.site_dvfs[topo.chip_site]
        speed = clock * (1.0 - e.chip_slowdown)
        dead = e.chip_failed | e.node_silent[topo.chip_node]
        s_min = self._by_group(speed, chips_per_us * per_group, "min")
        f_nl = self._by_group(e.link_path_frac, topo.links_per_node * topo.nodes_per_ultraserver * per_group, "min")
        efa_path = e.efa_frac / efa_stretch
        f_efa = self._by_group(efa_path, topo.efa_ports_per_node * topo.nodes_per_ultraserver * per_group, "min")
        group_dead = self._by_group(dead.astype(np.float64), chips_per_us * per_group, "max") > 0
        step = step_time(s_min, f_nl, f_efa, shares=p.shares)
        pace = np.where(group_dead, 0.0, 1.0 / step)
        return Pace(clock, speed, s_min, f_nl, f_efa, group_dead, pace, step)

    def efa_stretch(self, e: Effects, *, retrans_per_s: F64, port_bytes_s: F64) -> F64:
        """Return how much each port stretches its group's EFA collective: 1 + share x (L - 1) + r.

        L is the port's latency multiplier relative to its own healthy
        latency, beyond what its lost throughput already explains (a degraded
        port's queueing, 1 / efa_frac, is priced in efa_frac).  r is the bytes
        it retransmits over the bytes it sends at a healthy pace, counting only
        the retransmits a fault adds and efa_frac does not already price: a
        multiple of the port's own trickle (``retrans_per_s``, packets a
        second).  Loss and degradation retransmits are in their efa_frac, and
        the healthy trickle (1e-5 of the bytes at most) is part of every
        baseline, so a healthy port stretches by exactly 1 and truth without
        efa_slow is what it was.
        """
        latency = np.maximum(e.efa_latency_mult * e.efa_frac, 1.0)
        added_bytes_per_s = (e.efa_retrans_mult - 1.0) * retrans_per_s * EFA_PACKET_BYTES
        retrans = added_bytes_per_s / (port_bytes_s * e.efa_frac)
        return path_stretch(latency, retrans, latency_share=self.params.efa_latency_share)

    def lost_by_cause(self, e: Effects, group: Pace) -> dict[str, float]:
        """Split each group's lost FLOP/s over the terms of its step time; keep each group's loss."""
        topo, p = self.topology, self.params
        chips_per_group = topo.chips_per_node * topo.nodes_per_ultraserver * p.group_ultraservers
        healthy = self.hw.fp8_dense_flops * p.util_mean * chips_per_group  # cycle-averaged
        lost = dict.fromkeys(CAUSES, 0.0)
        dead = group.dead
        failed_group = self._by_group(e.chip_failed.astype(np.float64), chips_per_group, "max") > 0
        lost["failed_chip"] = float(healthy * (dead & failed_group).sum())
        lost["stale_telemetry"] = float(healthy * (dead & ~failed_group).sum())
        compute, nl, efa = step_excess(group.s_min, group.f_nl, group.f_efa, shares=p.shares)
        excess = compute + nl + efa
        with np.errstate(invalid="ignore", divide="ignore"):
            share_lost = np.where(dead | (excess <= 0), 0.0, healthy * (1.0 - 1.0 / group.step) / excess)
        # The compute term is the slowest member's: a straggler if its slowdown
        # outweighs its clock loss, thermal throttling (DVFS included) otherwise.
        speed = group.speed.reshape(self.n_groups, -1) if topo.n_chips % chips_per_group == 0 else None
        straggler = np.zeros(self.n_groups, dtype=bool)
        if speed is not None:
            slowest = speed.argmin(axis=1) + np.arange(self.n_groups) * chips_per_group
            straggler = e.chip_slowdown[slowest] > (1.0 - group.clock[slowest])
        lost["straggler"] = float((share_lost * compute * straggler).sum())
        lost["thermal_throttle"] = float((share_lost * compute * ~straggler).sum())
        lost["degraded_neuronlink"] = float((share_lost * nl).sum())
        lost["degraded_efa"] = float((share_lost * efa).sum())
        self._lost = np.where(dead, healthy, share_lost * excess)
        return lost

    def fault_losses(self, faults: tuple[Fault, ...]) -> tuple[float, ...]:
        """Return each fault's true loss as of the last tick: its groups' (faults sharing a group share it)."""
        return tuple(float(self._lost[self._groups_of(f)].sum()) for f in faults)

    def _by_group(self, values: F64, per_group: int, reduce: str) -> F64:
        padded = np.resize(values, self.n_groups * per_group) if values.size % per_group else values
        shaped = padded.reshape(self.n_groups, per_group)
        return np.asarray(shaped.min(axis=1) if reduce == "min" else shaped.max(axis=1), dtype=np.float64)

    def _groups_of(self, fault: Fault) -> npt.NDArray[np.int64]:
        """Return the synchronous groups a fault's target belongs to."""
        return np.unique(fault_ultraservers(self.topology, fault) // self.params.group_ultraservers)
