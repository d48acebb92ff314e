"""Health of node air cooling and of UltraServers' cooling, and node presence.

A node's cooling is degraded when its inlet air, its fans or its chips'
temperature stand out from the other nodes of its site (robust z-scores, so a
site-wide diurnal rise moves the median, not the alarms) for a few seconds;
chips still hot but cooling down (their air is back, or their load fell) are
recovering, not failing.  Chips' temperature is compared with that of the
site's nodes *under the same load* (their chips' power, smoothed over the
chips' thermal time constant): training jobs run their chips at different
loads and move between them together (a checkpoint, an evaluation, a job's
end), and a site-wide median would read every busy node as hot whenever
most of the site is idle or stalled (issue 21: 1,911 false cooling alarms in
1,365 chip-days of the simulator's job mix before this).  An
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
    # The load a node's temperature is compared at: its chips' mean power, smoothed with the time constant
    # of a chip and its heat sink (an assumption: tens of seconds for a package under forced air; a wrong
    # figure only leaves a transient the cooling-down rule covers).  Peers are binned by that load
    # (load_bins between the site's lightest and heaviest node); a bin with fewer than load_bin_nodes nodes
    # is no reference, and a node between references is compared with the line between them.
    thermal_tau_s: float = 20.0
    load_bins: int = 8
    load_bin_nodes: int = 8


@dataclass(eq=False)
class CoolingDetector:
    """Node cooling and presence, and UltraServer cooling, for the whole fleet."""

    state: FleetState
    params: CoolingParams = field(default_factory=CoolingParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        self.seen = np.zeros(topo.n_nodes, dtype=np.uint32)
        self.sample = PeerSample.of(topo.n_nodes)
        self.temp_trend = np.full(topo.n_nodes, np.nan, np.float32)  # each node's recent chip temperature, C
        self.load = np.full(topo.n_nodes, np.nan, np.float32)  # each node's chips' mean power, smoothed (W)
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

    def _load_z(self, temp: F32, load: F32, mask: B, floor: float) -> tuple[F32, F32]:
        """Return each node's temperature z against its site's nodes under the same load, and the scale (C).

        Per site: the median temperature of each well-filled load bin is a
        reference point; a node's expected temperature is the line through
        them at its load (flat beyond the end points, the site's median
        where its load is unknown), and the scale the robust spread of every
        node's distance from its expectation.
        """
        topo = self.state.topology
        site = topo.node_site
        z = np.zeros(temp.shape, np.float32)
        scales = np.full(temp.shape, np.float32(floor), np.float32)
        picked_load, picked_temp = self.sample.pick(load), self.sample.pick(temp)
        for s in range(topo.n_sites):  # a handful of sites and bins, never a loop over nodes
            of_site = mask & (site == s)
            expected = self._expected(picked_load, picked_temp, self.sample.pick(of_site), load)
            residual = (temp - expected).astype(np.float32)
            _, scale = robust_center_scale(residual, of_site, floor=floor, sample=self.sample)
            z = np.where(of_site, residual / np.float32(scale), z)
            scales[of_site] = scale
        return z, scales

    def _expected(self, load_s: F32, temp_s: F32, on: B, load: F32) -> F32:
        """Return every node's expected temperature from the references of one site's (sampled) nodes ``on``."""
        p = self.params
        known = on & np.isfinite(load_s) & np.isfinite(temp_s)
        fallback = float(np.median(temp_s[on & np.isfinite(temp_s)])) if on.any() else float("nan")
        xs, ys = load_s[known], temp_s[known]
        points: list[tuple[float, float]] = []
        if xs.size:
            lo, hi = float(xs.min()), float(xs.max())
            width = (hi - lo) / p.load_bins
            which = (np.minimum(((xs - lo) / width).astype(np.int64), p.load_bins - 1) if width > 0
                     else np.zeros(xs.size, np.int64))
            for b in np.flatnonzero(np.bincount(which, minlength=p.load_bins) >= p.load_bin_nodes):
                in_bin = which == b
                points.append((float(np.median(xs[in_bin])), float(np.median(ys[in_bin]))))
        if not points:
            return np.full(load.shape, fallback, np.float32)
        x_ref, y_ref = np.array(points).T
        expected: F32 = np.interp(load, x_ref, y_ref).astype(np.float32)
        np.copyto(expected, np.float32(fallback), where=~np.isfinite(load))
        return expected

    def update(self, tick: int, *, chip_stale: B) -> tuple[Transitions, Transitions]:
        """Fold in the nodes' new samples; return (node changes, UltraServer changes)."""
        p, topo, state = self.params, self.state.topology, self.state
        table = state.cooling
        fresh = table.samples > self.seen
        np.copyto(self.seen, table.samples)
        cur = table.gauges
        chip_temp = state.chips.gauges["temp_c"].reshape(topo.n_nodes, -1).mean(axis=1)
        self._fold_load(state.chips.gauges["power_w"].reshape(topo.n_nodes, -1).mean(axis=1), fresh, table.dt_s)
        inlet_z = self._site_z(cur["inlet_c"], fresh, p.inlet_floor_c)
        fan_z = -self._site_z(cur["fan_rpm"], fresh, p.fan_floor_rpm)
        temp_z, temp_scale = self._load_z(chip_temp, self.load, fresh, p.temp_floor_c)
        lost: B = np.asarray(chip_stale.reshape(topo.n_nodes, -1).all(axis=1), dtype=bool)

        reasons = np.zeros(topo.n_nodes, dtype=np.int32)
        flag(reasons, fresh & (inlet_z > p.z_alarm), Reason.INLET)
        flag(reasons, fresh & (fan_z > p.z_alarm), Reason.FANS)
        cooling_down = self._cooling_down(chip_temp, temp_scale, fresh, table.dt_s)
        flag(reasons, fresh & (temp_z > p.z_alarm) & ~cooling_down, Reason.TEMPERATURE)
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

    def _fold_load(self, power: F32, fresh: B, dt_s: F32) -> None:
        """Fold each fresh node's chips' mean power into its load, smoothed over ``thermal_tau_s``."""
        weight = (1.0 - np.exp(-np.fmax(np.nan_to_num(dt_s, nan=0.0), 0.0) / self.params.thermal_tau_s))
        blended = (self.load + weight.astype(np.float32) * (power - self.load)).astype(np.float32)
        np.copyto(blended, power, where=np.isnan(self.load))  # first sample, or after an unknown one
        np.copyto(self.load, blended, where=fresh)

    def _cooling_down(self, temp: F32, scale: F32, fresh: B, dt_s: F32) -> B:
        """Return which nodes' chips are cooling (under their recent temperature); fold this sample in.

        In degrees, not in z: when a node's load falls its reference falls at
        once while its chips take tens of seconds to follow.
        """
        p = self.params
        falling = temp < self.temp_trend - np.float32(p.cooling_fall_z) * scale  # NaN (no history): not falling
        weight = (1.0 - np.exp(-np.fmax(np.nan_to_num(dt_s, nan=0.0), 0.0) / p.cooling_trend_s)).astype(np.float32)
        blended = self.temp_trend + weight * (temp - self.temp_trend)
        np.copyto(blended, temp, where=np.isnan(self.temp_trend))
        np.copyto(self.temp_trend, blended, where=fresh)
        return np.asarray(falling & fresh, dtype=bool)

    def lost_nodes(self) -> B:
        """Return which nodes are lost now."""
        return np.asarray(self.nodes.state == NODE_LOST, dtype=bool)
