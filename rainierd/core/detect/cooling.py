"""Health of node air cooling and of UltraServers' cooling, and node presence.

A node's cooling is degraded when its inlet air, its fans or its chips'
temperature stand out from the other nodes of its site (robust z-scores, so a
site-wide diurnal rise moves the median, not the alarms) for a few seconds;
chips still hot but cooling down (their air is back) are recovering, not failing.  An
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
    clear_after_s: float = 5.0
    # Chips cool with a time constant of tens of seconds once their air is back: a node whose chips
    # are still hot but cooling is recovering, not failing.  Hot counts only while the node's
    # temperature is not falling: under its own recent level (an average over cooling_trend_s) by
    # less than cooling_fall_z site sigmas.
    cooling_trend_s: float = 5.0
    cooling_fall_z: float = 1.0


@dataclass(eq=False)
class CoolingDetector:
    """Node cooling and presence, and UltraServer cooling, for the whole fleet."""

    state: FleetState
    params: CoolingParams = field(default_factory=CoolingParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        self.seen = np.zeros(topo.n_nodes, dtype=np.uint32)
        self.sample = PeerSample.of(topo.n_nodes)
        self.temp_trend = np.full(topo.n_nodes, np.nan, np.float32)  # each node's recent temperature z
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
        flag(reasons, fresh & (temp_z > p.z_alarm) & ~self._cooling_down(temp_z, fresh, table.dt_s), Reason.TEMPERATURE)
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

    def _cooling_down(self, temp_z: F32, fresh: B, dt_s: F32) -> B:
        """Return which nodes' temperature is falling (under their recent level); fold this sample in."""
        p = self.params
        falling = temp_z < self.temp_trend - np.float32(p.cooling_fall_z)  # NaN (no history): not falling
        weight = (1.0 - np.exp(-np.fmax(np.nan_to_num(dt_s, nan=0.0), 0.0) / p.cooling_trend_s)).astype(np.float32)
        blended = self.temp_trend + weight * (temp_z - self.temp_trend)
        np.copyto(blended, temp_z, where=np.isnan(self.temp_trend))
        np.copyto(self.temp_trend, blended, where=fresh)
        return np.asarray(falling & fresh, dtype=bool)

    def lost_nodes(self) -> B:
        """Return which nodes are lost now."""
        return np.asarray(self.nodes.state == NODE_LOST, dtype=bool)
