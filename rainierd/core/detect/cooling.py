"""Health of node air cooling and of UltraServers' cooling, and node presence.

A node's cooling is degraded when its inlet air, its fans or its chips'
temperature stand out from the other nodes of its site (robust z-scores, so a
site-wide diurnal rise moves the median, not the alarms) for a few seconds;
chips still hot but cooling down (their air is back, or their load fell) are
recovering, not failing.  Chips' temperature is judged under their load:
its rise over the node's inlet air against the site's thermal resistance
times the chips' power (smoothed over their thermal time constant).
Training jobs run their chips at different loads and move between them
together (a checkpoint, an evaluation, a job's end); a site-wide median of
temperature read every busy node as hot whenever most of the site was idle
or stalled (issue 21: 1,911 false cooling alarms in 1,365 chip-days of the
simulator's job mix).  An UltraServer's cooling is degraded when at least
half its nodes' are.  A node is lost when every chip of it has gone stale.
A node's temperature is judged only once its trend covers ``cooling_trend_s``
of samples: a monitor that starts (or first hears a node) while its chips
still cool from a job that just ended cannot yet tell them from hot ones
(issue 22: every one of the training control's 13 false cooling alarms was an
idle UltraServer's chips cooling in the monitor's first seconds).

Heating is physics (issue 38): an idle node that starts work heats toward
its new load, and chips faster than the assumed ``thermal_tau_s`` run ahead
of the load smoothed over it (the independent publisher's nodes and
UltraServer at a job's start).  So a node is hot only over the expectation
at its load smoothed over ``thermal_tau_s`` and over ``fast_tau_s`` both: it
is judged against a level that follows its load at the fastest credible
pace, never held unjudged through a load step, so chips that stay hot once
that level has caught up are still found.  And the load starts from one
sample (a monitor's start or restart, a node first heard, a silence longer
than ``thermal_tau_s`` whose power nobody saw), which under training's x16
swing may be a collective's: temperature is judged once the load has seen
``load_warmup_s``.  That is why cooling is not in the learned state a restart
carries (``core/learned.py``): it learns again in a minute, where a carried
load would be as old as the restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rainierd._types import F32, B
from rainierd.core.detect._common import Reason, flag, persistence_seconds
from rainierd.core.detect._stats import PeerSample, robust_center_scale
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState

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
    # A node's temperature counts only once that average has seen cooling_trend_s of its samples (the
    # trend is known): until then chips that are cooling cannot be told from hot ones.
    cooling_trend_s: float = 5.0
    cooling_fall_z: float = 1.0
    # The load a node's temperature is compared at: its chips' mean power, smoothed with the time constant
    # of a chip and its heat sink (an assumption: tens of seconds for a package under forced air; a wrong
    # figure only leaves a transient the cooling-down rule covers).
    thermal_tau_s: float = 20.0
    # Chips faster than thermal_tau_s run ahead of that load while it rises (an idle node starting work, issue
    # 38): a node is hot only over what its load smoothed at fast_tau_s holds too, the quickest time constant a
    # packaged chip under a heat sink is given credit for.  A falling load needs no such allowance: chips
    # slower than assumed stay over it while they cool, which the cooling-down rule covers.
    fast_tau_s: float = 5.0
    # The load starts from one sample (a monitor's start or restart, a node first heard, or back after a
    # silence longer than thermal_tau_s, whose power nobody saw): temperature is judged once the load has
    # seen load_warmup_s of samples, three time constants, after which its start weighs e^-3 (5 %).
    load_warmup_s: float = 60.0


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
        self.trend_s = np.zeros(topo.n_nodes, np.float32)  # the seconds of samples its trend has seen
        self.load = np.full(topo.n_nodes, np.nan, np.float32)  # each node's chips' mean power, smoothed (W)
        self.fast_load = np.full(topo.n_nodes, np.nan, np.float32)  # the same at fast_tau_s: what it heats toward
        self.load_s = np.zeros(topo.n_nodes, np.float32)  # the seconds of samples the load has seen since it began
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

    def _load_z(self, temp: F32, inlet: F32, load: F32, mask: B, floor: float, *, heating: F32 | None = None,
                ) -> tuple[F32, F32]:
        """Return each node's chip temperature z against its site's nodes under the same load, and the scale (C).

        A chip sits above its inlet air by its thermal resistance times its
        power.  Per site, the resistance is the median over its nodes of
        (temperature - inlet) / load; a node's expected temperature is its
        inlet plus that times its load, and the scale is the robust spread of
        every node's distance from its expectation.  No bins: a handful of
        nodes alone at some load (a small job still busy while the rest of the
        site checkpoints) has a reference like any other.  A node whose load or
        inlet is unknown is compared with its site's median temperature.
        ``heating`` (per node, W) is a load it may be heating toward: its z is
        taken over the higher of the two expectations, on the same scale.
        """
        topo = self.state.topology
        site = topo.node_site
        z = np.zeros(temp.shape, np.float32)
        scales = np.full(temp.shape, np.float32(floor), np.float32)
        rise = temp - inlet
        modelled = np.isfinite(rise) & np.isfinite(load) & (load > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_watt = np.where(modelled, rise / load, np.float32(np.nan)).astype(np.float32)
        for s in range(topo.n_sites):  # a handful of sites, never a loop over nodes
            of_site = mask & (site == s)
            resistance, _ = robust_center_scale(per_watt, of_site & modelled, floor=0.0, sample=self.sample)
            median_temp, _ = robust_center_scale(temp, of_site, floor=0.0, sample=self.sample)
            expected = np.where(modelled & np.isfinite(resistance), inlet + np.float32(resistance) * load,
                                np.float32(median_temp))
            residual = (temp - expected).astype(np.float32)
            _, scale = robust_center_scale(residual, of_site, floor=floor, sample=self.sample)
            if heating is not None:
                toward = inlet + np.float32(resistance) * heating
                residual = np.where(modelled & np.isfinite(resistance) & (toward > expected), temp - toward,
                                    residual).astype(np.float32)
            z = np.where(of_site, residual / np.float32(scale), z)
            scales[of_site] = scale
        return z, scales

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
        temp_z, temp_scale = self._load_z(chip_temp, cur["inlet_c"], self.load, fresh, p.temp_floor_c,
                                          heating=self.fast_load)
        lost: B = np.asarray(chip_stale.reshape(topo.n_nodes, -1).all(axis=1), dtype=bool)

        reasons = np.zeros(topo.n_nodes, dtype=np.int32)
        flag(reasons, fresh & (inlet_z > p.z_alarm), Reason.INLET)
        flag(reasons, fresh & (fan_z > p.z_alarm), Reason.FANS)
        steady = self._steady(chip_temp, temp_scale, fresh, table.dt_s)
        learned = self.load_s >= np.float32(p.load_warmup_s)
        flag(reasons, fresh & (temp_z > p.z_alarm) & steady & learned, Reason.TEMPERATURE)
        flag(reasons, lost, Reason.SILENT)
        candidate = np.where(lost, NODE_LOST, np.where(reasons != 0, NODE_COOLING, NODE_HEALTHY))
        node_changes = self.nodes.update(candidate, reasons, fresh | lost, tick,
                                        seconds=persistence_seconds(table.dt_s, fresh, self.sample,
                                                                    self.state.node_cadence.typical_s()))

        cooling = (self.nodes.state == NODE_COOLING).reshape(topo.n_ultraservers, -1)
        us_degraded = cooling.sum(axis=1) * 2 >= topo.nodes_per_ultraserver
        us_reasons = np.bitwise_or.reduce(self.nodes.reason.reshape(topo.n_ultraservers, -1), axis=1)
        us_changes = self.ultraservers.update(
            us_degraded.astype(np.int64), us_reasons, np.ones(topo.n_ultraservers, dtype=bool), tick,
        )
        return node_changes, us_changes

    def _fold_load(self, power: F32, fresh: B, dt_s: F32) -> None:
        """Fold each fresh node's chips' mean power into its load, smoothed over ``thermal_tau_s`` (and over
        ``fast_tau_s`` into its fast load); count the seconds the load has seen.

        A first sample, one after an unknown power, or one after a silence
        longer than ``thermal_tau_s`` starts both again from this sample, and
        the count from 0: the power in the silence nobody saw, and it moved
        the chips' temperature by most of the way to it.
        """
        p = self.params
        dt = np.fmax(np.nan_to_num(dt_s, nan=0.0), 0.0).astype(np.float32)
        restart = np.isnan(self.load) | np.isnan(self.fast_load) | (dt > np.float32(p.thermal_tau_s))
        for average, tau_s in ((self.load, p.thermal_tau_s), (self.fast_load, p.fast_tau_s)):
            weight = (1.0 - np.exp(-dt / np.float32(tau_s))).astype(np.float32)
            blended = (average + weight * (power - average)).astype(np.float32)
            np.copyto(blended, power, where=restart)
            np.copyto(average, blended, where=fresh)
        seen = np.where(restart, np.float32(0.0), self.load_s + dt)
        np.copyto(self.load_s, np.where(np.isnan(self.load), np.float32(0.0), seen), where=fresh)

    def _steady(self, temp: F32, scale: F32, fresh: B, dt_s: F32) -> B:
        """Return which fresh nodes' chips are known not to be cooling; fold this sample into their trend.

        Cooling: under their recent temperature (the trend) by more than
        ``cooling_fall_z`` times ``scale``, in degrees, not in z: when a
        node's load falls its reference falls at once while its chips take
        tens of seconds to follow.  Known: the trend has seen
        ``cooling_trend_s`` of samples (a first sample, or one after an
        unknown temperature, starts it again); before that a fall cannot be
        told from noise.
        """
        p = self.params
        falling = temp < self.temp_trend - np.float32(p.cooling_fall_z) * scale  # NaN (no history): not falling
        known = self.trend_s >= np.float32(p.cooling_trend_s)
        dt = np.fmax(np.nan_to_num(dt_s, nan=0.0), 0.0).astype(np.float32)
        weight = (1.0 - np.exp(-dt / p.cooling_trend_s)).astype(np.float32)
        blended = self.temp_trend + weight * (temp - self.temp_trend)
        restart = np.isnan(self.temp_trend)
        np.copyto(blended, temp, where=restart)
        np.copyto(self.temp_trend, blended, where=fresh)
        # A trend that starts (or starts again) has seen no interval yet; a NaN temperature empties it.
        age = np.where(restart, np.float32(0.0), self.trend_s + dt)
        age = np.where(np.isnan(self.temp_trend), np.float32(0.0), age).astype(np.float32)
        np.copyto(self.trend_s, age, where=fresh)
        return np.asarray(fresh & known & ~falling, dtype=bool)

    def lost_nodes(self) -> B:
        """Return which nodes are lost now."""
        return np.asarray(self.nodes.state == NODE_LOST, dtype=bool)
