"""Faults the simulator can inject, and what each does to the telemetry this
tick (where a run's faults come from, a scenario file or calibrated random
rates, is ``sim/scenarios.py``).

A ``Fault`` names its kind, its target (an id in the target's own id space:
link, EFA port, chip, node, UltraServer or site), a severity whose meaning
depends on the kind, and its window ``[start_tick, end_tick)``.  ``effects``
turns the active faults of one tick into an ``Effects`` of per-entity arrays
the fleet model applies; the loop there is over active faults (a handful),
never over chips or links.  Every choice of a fault's shape that is not a
published figure is an assumption and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd.fleet import TRN2, Topology


class FaultKind(StrEnum):
    """Every kind of fault; the value is its name in scenario files and truth."""

    NL_DEGRADED = "nl_degraded"  # severity: bandwidth fraction left (lanes down)
    NL_DOWN = "nl_down"
    NL_FLAPPING = "nl_flapping"  # severity: number of down/up cycles
    NL_CRC_STORM = "nl_crc_storm"  # severity: CRC errors a second, bandwidth unchanged
    EFA_DEGRADED = "efa_degraded"  # severity: throughput fraction left
    EFA_LOSS = "efa_loss"  # severity: silent packet loss rate
    EFA_DOWN = "efa_down"
    EFA_SLOW = "efa_slow"  # severity: latency multiplier; throughput kept, retransmits 20x its trickle
    EFA_NODE_DEGRADED = "efa_node_degraded"  # severity: throughput fraction left on every port of one node
    CHIP_FAILED = "chip_failed"  # uncorrectable HBM ECC, then silence
    CHIP_THROTTLE = "chip_throttle"  # severity: clock ratio
    STRAGGLER = "straggler"  # severity: fraction slower, no counter moves
    COOLING_FAN = "cooling_fan"  # severity: fan speed fraction left (node or UltraServer)
    COOLING_INLET = "cooling_inlet"  # severity: inlet air rise, degrees C (node or UltraServer)
    NODE_LOST = "node_lost"  # stops publishing
    DIURNAL = "diurnal"  # severity: clock lost at mid-day heat; must NOT alarm


# What each kind targets (the id space of Fault.target).
TARGETS: Final[dict[FaultKind, tuple[str, ...]]] = {
    FaultKind.NL_DEGRADED: ("link",),
    FaultKind.NL_DOWN: ("link",),
    FaultKind.NL_FLAPPING: ("link",),
    FaultKind.NL_CRC_STORM: ("link",),
    FaultKind.EFA_DEGRADED: ("efa",),
    FaultKind.EFA_LOSS: ("efa",),
    FaultKind.EFA_DOWN: ("efa",),
    FaultKind.EFA_SLOW: ("efa",),
    FaultKind.EFA_NODE_DEGRADED: ("node",),
    FaultKind.CHIP_FAILED: ("chip",),
    FaultKind.CHIP_THROTTLE: ("chip",),
    FaultKind.STRAGGLER: ("chip",),
    FaultKind.COOLING_FAN: ("node", "ultraserver"),
    FaultKind.COOLING_INLET: ("node", "ultraserver"),
    FaultKind.NODE_LOST: ("node",),
    FaultKind.DIURNAL: ("site",),
}

# The graded severities of each kind.  efa_loss takes one representative rate
# per band of the CorrOpt loss-rate spread (docs/calibration.md).
SEVERITIES: Final[dict[FaultKind, tuple[float, ...]]] = {
    FaultKind.NL_DEGRADED: (0.875, 0.75, 0.5, 0.25),
    FaultKind.NL_DOWN: (0.0,),
    FaultKind.NL_FLAPPING: (3.0, 6.0, 10.0),
    FaultKind.NL_CRC_STORM: (20.0, 100.0, 500.0),
    FaultKind.EFA_DEGRADED: (0.875, 0.75, 0.5, 0.25),
    FaultKind.EFA_LOSS: (3e-7, 3e-5, 3e-4, 3e-3),
    FaultKind.EFA_DOWN: (0.0,),
    FaultKind.EFA_SLOW: (1.25, 1.5, 2.0),
    FaultKind.EFA_NODE_DEGRADED: (0.6, 0.45, 0.3),
    FaultKind.CHIP_FAILED: (0.0,),
    FaultKind.CHIP_THROTTLE: (0.85, 0.7, 0.5),
    FaultKind.STRAGGLER: (0.02, 0.05, 0.10),
    FaultKind.COOLING_FAN: (0.6, 0.3),
    FaultKind.COOLING_INLET: (8.0, 20.0),
    FaultKind.NODE_LOST: (0.0,),
    FaultKind.DIURNAL: (0.01, 0.02),
}

@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault: ground truth for grading detection."""

    kind: FaultKind
    target: int
    severity: float
    start_tick: int
    end_tick: int
    scope: str = ""  # "" means the kind's first target kind
    # Flapping: (down ticks, up ticks) per cycle, drawn when the fault is made.
    flaps: tuple[tuple[float, float], ...] = field(default=(), repr=False)

    @property
    def target_kind(self) -> str:
        """Return the id space of ``target``: link, efa, chip, node, ultraserver or site."""
        return self.scope or TARGETS[self.kind][0]

    def active(self, tick: int) -> bool:
        """Return True while the fault is in effect."""
        return self.start_tick <= tick < self.end_tick

    def as_dict(self) -> dict[str, Any]:
        """Return the fault as plain data (ground-truth files and messages)."""
        return {"kind": str(self.kind), "target_kind": self.target_kind, "target": self.target,
                "severity": self.severity, "start_tick": self.start_tick, "end_tick": self.end_tick}


def flap_schedule(rng: np.random.Generator, cycles: int, tick_s: float) -> tuple[tuple[float, float], ...]:
    """Return (down, up) durations in ticks: down 0.5-3 s, up 5-30 s (MegaScale, Alibaba HPN)."""
    down = rng.uniform(0.5, 3.0, cycles) / tick_s
    up = rng.uniform(5.0, 30.0, cycles) / tick_s
    return tuple(zip(down.tolist(), up.tolist(), strict=True))


def flapping_fault(rng: np.random.Generator, link: int, cycles: int, start_tick: int, tick_s: float) -> Fault:
    """Return a flapping fault whose window covers its whole schedule."""
    flaps = flap_schedule(rng, cycles, tick_s)
    length = math.ceil(sum(d + u for d, u in flaps))
    return Fault(FaultKind.NL_FLAPPING, link, float(cycles), start_tick, start_tick + length, flaps=flaps)


def _down_fraction(fault: Fault, tick: int) -> tuple[float, bool]:
    """Return (share of the tick the flapping link was down, down at the tick's end)."""
    t0, t1 = float(tick - fault.start_tick), float(tick - fault.start_tick + 1)
    down_s, at_end, cursor = 0.0, False, 0.0
    for down, up in fault.flaps:
        a, b = cursor, cursor + down
        down_s += max(0.0, min(b, t1) - max(a, t0))
        at_end = at_end or (a < t1 <= b)
        cursor = b + up
    return down_s, at_end


@dataclass(eq=False)
class Effects:
    """What the active faults do this tick, per entity; neutral values by default."""

    link_bw_frac: npt.NDArray[np.float64]
    link_lanes: npt.NDArray[np.int64]
    link_path_frac: npt.NDArray[np.float64]  # collective bandwidth share left (reroute)
    link_crc_per_s: npt.NDArray[np.float64]
    link_replay_per_s: npt.NDArray[np.float64]
    efa_frac: npt.NDArray[np.float64]
    efa_down: npt.NDArray[np.bool_]
    efa_loss: npt.NDArray[np.float64]
    efa_retrans_per_s: npt.NDArray[np.float64]
    efa_latency_mult: npt.NDArray[np.float64]
    efa_retrans_mult: npt.NDArray[np.float64]  # times the port's own healthy retransmit trickle
    chip_clock_cap: npt.NDArray[np.float64]
    chip_slowdown: npt.NDArray[np.float64]
    chip_failed: npt.NDArray[np.bool_]
    chip_fail_onset: npt.NDArray[np.bool_]
    node_silent: npt.NDArray[np.bool_]
    node_fan_frac: npt.NDArray[np.float64]
    node_inlet_rise_c: npt.NDArray[np.float64]
    site_dvfs: npt.NDArray[np.float64]
    tick_s: float = 1.0  # the tick's length, for effects that unfold in time

    @classmethod
    def neutral(cls, topo: Topology) -> Effects:
        """Return the effects of no fault at all."""
        ones, zeros = np.ones, np.zeros
        return cls(
            ones(topo.n_links), np.full(topo.n_links, TRN2.neuronlink_lanes), ones(topo.n_links),
            zeros(topo.n_links), zeros(topo.n_links),
            ones(topo.n_efa), zeros(topo.n_efa, bool), zeros(topo.n_efa), zeros(topo.n_efa), ones(topo.n_efa),
            ones(topo.n_efa),
            ones(topo.n_chips), zeros(topo.n_chips), zeros(topo.n_chips, bool), zeros(topo.n_chips, bool),
            zeros(topo.n_nodes, bool), ones(topo.n_nodes), zeros(topo.n_nodes), ones(topo.n_sites),
        )


# Assumptions (no public figure): a NeuronLink that is down costs its
# collectives half their bandwidth (the torus routes around it over a
# neighbour); a down EFA port fails over to the node's other ports (15 of 16
# by default; the topology's configured count, as the monitor's model uses).
_REROUTE_FRAC: Final = 0.5
# Assumption: a slow path (a congested or long-winded route, a marginal optic
# that SRD still delivers over) retransmits about 20x a healthy port's trickle.
_SLOW_RETRANS_MULT: Final = 20.0
_INLET_RAMP_S: Final = 20.0  # inlet air rises to the fault's severity over this many seconds


def fault_ultraservers(topo: Topology, fault: Fault) -> npt.NDArray[np.int64]:
    """Return the UltraServers a fault's target is in (a site's: all of them), as an int64 array."""
    kind, t = fault.target_kind, fault.target
    if kind == "link":
        us: object = topo.node_ultraserver[topo.link_node[t]]
    elif kind == "efa":
        us = topo.node_ultraserver[topo.efa_node[t]]
    elif kind == "chip":
        us = topo.chip_ultraserver[t]
    elif kind == "node":
        us = topo.node_ultraserver[t]
    elif kind == "ultraserver":
        us = t
    else:  # a site
        us = np.flatnonzero(topo.ultraserver_site == t)
    return np.atleast_1d(np.asarray(us, dtype=np.int64))


def _nodes_of(topo: Topology, fault: Fault) -> npt.NDArray[np.int64]:
    if fault.target_kind == "ultraserver":
        return np.arange(topo.nodes_per_ultraserver) + fault.target * topo.nodes_per_ultraserver
    return np.array([fault.target])


def _nl_degraded(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.link_lanes[f.target] = round(TRN2.neuronlink_lanes * f.severity)
    e.link_bw_frac[f.target] = e.link_path_frac[f.target] = f.severity


def _nl_down(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.link_lanes[f.target], e.link_bw_frac[f.target], e.link_path_frac[f.target] = 0, 0.0, _REROUTE_FRAC


def _nl_flapping(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    down, at_end = _down_fraction(f, tick)
    e.link_bw_frac[f.target] = 1.0 - min(1.0, down)
    e.link_path_frac[f.target] = 1.0 - min(1.0, down) * (1.0 - _REROUTE_FRAC)
    e.link_lanes[f.target] = 0 if at_end else TRN2.neuronlink_lanes
    e.link_replay_per_s[f.target] = 30.0 * math.ceil(down)  # retraining replays after each drop


def _nl_crc_storm(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.link_crc_per_s[f.target] = f.severity
    e.link_replay_per_s[f.target] = f.severity / 4.0


def _efa_degraded(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.efa_frac[f.target] = f.severity
    e.efa_retrans_per_s[f.target] = 400.0 * (1.0 - f.severity) / 0.125
    e.efa_latency_mult[f.target] = 1.0 / f.severity


def _efa_loss(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.efa_loss[f.target] = f.severity
    e.efa_frac[f.target] = 1.0 / (1.0 + 200.0 * f.severity)  # assumption: SRD recovers, at a cost


def _efa_down(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.efa_down[f.target] = True
    e.efa_frac[f.target] = 1.0 - 1.0 / topo.efa_ports_per_node


def _efa_slow(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.efa_latency_mult[f.target] = f.severity
    e.efa_retrans_mult[f.target] = _SLOW_RETRANS_MULT


def _efa_node_degraded(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    # Assumption (no public figure): a node-wide NIC, PCIe or firmware limit caps every port of the node
    # alike and shows in throughput only; its ports' latency and retransmits stay their own (a port that
    # also retransmits or answers slowly is efa_degraded or efa_slow, judged per port).
    ports = np.arange(topo.node_efa(f.target).start, topo.node_efa(f.target).stop)
    e.efa_frac[ports] = np.minimum(e.efa_frac[ports], f.severity)


def _chip_failed(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.chip_failed[f.target] = True
    e.chip_fail_onset[f.target] = tick == f.start_tick


def _chip_throttle(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.chip_clock_cap[f.target] = min(e.chip_clock_cap[f.target], f.severity)


def _straggler(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.chip_slowdown[f.target] = max(e.chip_slowdown[f.target], f.severity)


def _cooling_fan(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.node_fan_frac[_nodes_of(topo, f)] = f.severity


def _cooling_inlet(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    ramp = min(1.0, (tick - f.start_tick + 1) * e.tick_s / _INLET_RAMP_S)
    e.node_inlet_rise_c[_nodes_of(topo, f)] = f.severity * ramp


def _node_lost(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.node_silent[f.target] = True


def _diurnal(e: Effects, f: Fault, tick: int, topo: Topology, phase: float) -> None:
    e.site_dvfs[f.target] = 1.0 - f.severity * max(0.0, phase)


_APPLY: Final[dict[FaultKind, Callable[[Effects, Fault, int, Topology, float], None]]] = {
    FaultKind.NL_DEGRADED: _nl_degraded,
    FaultKind.NL_DOWN: _nl_down,
    FaultKind.NL_FLAPPING: _nl_flapping,
    FaultKind.NL_CRC_STORM: _nl_crc_storm,
    FaultKind.EFA_DEGRADED: _efa_degraded,
    FaultKind.EFA_LOSS: _efa_loss,
    FaultKind.EFA_DOWN: _efa_down,
    FaultKind.EFA_SLOW: _efa_slow,
    FaultKind.EFA_NODE_DEGRADED: _efa_node_degraded,
    FaultKind.CHIP_FAILED: _chip_failed,
    FaultKind.CHIP_THROTTLE: _chip_throttle,
    FaultKind.STRAGGLER: _straggler,
    FaultKind.COOLING_FAN: _cooling_fan,
    FaultKind.COOLING_INLET: _cooling_inlet,
    FaultKind.NODE_LOST: _node_lost,
    FaultKind.DIURNAL: _diurnal,
}


def effects(topo: Topology, faults: list[Fault], tick: int, *, diurnal_phase: float, tick_s: float = 1.0) -> Effects:
    """Return the combined effects of the faults active at ``tick``.

    ``diurnal_phase`` is the sine of the site's time of day, used by diurnal
    faults (clock loss only while it is positive: the mid-day heat).
    """
    e = Effects.neutral(topo)
    e.tick_s = tick_s
    for fault in faults:
        if fault.active(tick):
            _APPLY[fault.kind](e, fault, tick, topo, diurnal_phase)
    return e
