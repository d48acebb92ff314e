"""Health of node air cooling and of UltraServers' cooling, and node presence.

A node's cooling is degraded when its inlet air, its fans or its chips'
temperature stand out from the other nodes of its site (robust z-scores, so a
site-wide diurnal rise moves the median, not the alarms) for a few ticks.  An
UltraServer's cooling is degraded when at least half its nodes' are.  A node
is lost when every chip of it has gone stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rainierd._types import F32, B
from rainierd.core.detect._common import Reason, flag, persistence_seconds
from rainierd.core.detect._stats import PeerSample, robust_center_scale
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState

__all__ = ["NODE_COOLING", "NODE_HEALTHY", "NODE_LOST", "CoolingDetector", "CoolingParams"]

NODE_HEALTHY, NODE_COOLING, NODE_LOST = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CoolingParams:
    """Thresholds of the cooling detector (docs/detection.md justifies them)."""

    z_alarm: float = 6.0
    inlet_floor_c: float = 0.5
    fan_floor_rpm: float = 100.0
    temp_floor_c: float = 1.0
    raise_after_s: float = 2.0
    clear_after_s: float = 10.0


@dataclass(eq=False)
class CoolingDetector:
    """Node cooling and presence, and UltraServer cooling, for the whole fleet."""

    state: FleetState
    params: CoolingParams = field(default_factory=CoolingParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        self.seen = np.zeros(topo.n_nodes, dtype=np.uint32)
        self.sample = PeerSample.of(topo.n_nodes)
        self.nodes = StateTracker.create(topo.n_nodes, raise_after_s=[0.0, p.raise_after_s, 0.0],
                                         clear_after_s=p.clear_after_s)
        # An UltraServer's state follows its nodes' at once: their trackers already persist.
        self.ultraservers = StateTracker.create(topo.n_ultraservers, raise_after_s=[0.0, 0.0], clear_after_s=0.0)

    def _site_z(self, values: F32, mask: B, floor: float) -> F32:
        topo = self.state.topology
        site = topo.node_site
        z = np.zeros(values.shape, np.float32)
        for s in range(topo.n_sites):  # a handful of sites, never a loop over nodes
            of_site = mask & (site == s)
            center, scale = robust_center_scale(values, of_site, floor=floor, sample=self.sample)
            z = np.where(of_site, (values - center) / scale, z)
        return z

    def update(self, tick: int, *, chip_stale: B) -> tuple[Transitions, Transitions]:
        """Fold in the nodes' new samples; return (node changes, UltraServer changes)."""
        p, topo, state = self.params, self.state.topology, self.state
        table = state.cooling
        fresh = table.samples > self.seen
        np.copyto(self.seen, table.samples)
        cur = table.gauges
        chip_temp = state.chips.gauges["temp_c"].reshape(topo.n_nodes, -1).mean(axis=1)
        inlet_z = self._site_z(cur["inlet_c"], fresh, p.inlet_floor_c)
        fan_z = -self._site_z(cur["fan_rpm"], fresh, p.fan_floor_rpm)
        temp_z = self._site_z(chip_temp, fresh, p.temp_floor_c)
        lost: B = np.asarray(chip_stale.reshape(topo.n_nodes, -1).all(axis=1), dtype=bool)

        reasons = np.zeros(topo.n_nodes, dtype=np.int32)
        flag(reasons, fresh & (inlet_z > p.z_alarm), Reason.INLET)
        flag(reasons, fresh & (fan_z > p.z_alarm), Reason.FANS)
        flag(reasons, fresh & (temp_z > p.z_alarm), Reason.TEMPERATURE)
        flag(reasons, lost, Reason.SILENT)
        candidate = np.where(lost, NODE_LOST, np.where(reasons != 0, NODE_COOLING, NODE_HEALTHY))
        node_changes = self.nodes.update(candidate, reasons, fresh | lost, tick,
                                        seconds=persistence_seconds(table.dt_s, fresh, self.sample))

        cooling = (self.nodes.state == NODE_COOLING).reshape(topo.n_ultraservers, -1)
        us_degraded = cooling.sum(axis=1) * 2 >= topo.nodes_per_ultraserver
        us_reasons = np.bitwise_or.reduce(self.nodes.reason.reshape(topo.n_ultraservers, -1), axis=1)
        us_changes = self.ultraservers.update(
            us_degraded.astype(np.int64), us_reasons, np.ones(topo.n_ultraservers, dtype=bool), tick,
        )
        return node_changes, us_changes

    def lost_nodes(self) -> B:
        """Return which nodes are lost now."""
        return np.asarray(self.nodes.state == NODE_LOST, dtype=bool)
