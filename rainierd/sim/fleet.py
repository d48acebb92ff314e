"""A healthy Trainium2 fleet as vectorised numpy state, stepped one tick at a time.

The model is plausible rather than precise (the figures it assumes are named
in ``FleetParams`` and say so): utilisation follows each UltraServer's
training-step cycle, power follows utilisation, chip temperature relaxes
towards inlet air plus a thermal resistance times power, inlet air follows the
site's outside air, and every counter is monotone.  It holds no I/O and no
clock: tick ``k`` is at ``start_s + k * tick_s``, and all randomness comes
from the injected generator, so a seed fixes every value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rainierd.hardware import TRN2, Trainium2
from rainierd.topology import LINK_KIND_RING, Topology
from rainierd.wire.records import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
)

__all__ = ["FleetModel", "FleetParams", "TickSample", "TickTruth"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetParams:
    """Behaviour of the healthy fleet; every default here is an assumption."""

    step_s: float = 6.0  # one training step (forward, backward, collectives)
    util_mean: float = 0.62
    util_cycle_amp: float = 0.04
    util_noise: float = 0.01
    comm_share: float = 0.25  # share of a step the links are busy
    thermal_resistance_c_per_w: float = 0.075
    thermal_tau_s: float = 20.0
    temp_noise_c: float = 0.3
    throttle_start_c: float = 95.0
    throttle_per_c: float = 0.05  # clock lost per degree above throttle_start_c
    throttle_floor: float = 0.5
    link_bw_efficiency: float = 0.96
    link_bw_noise: float = 0.008
    link_crc_per_s: float = 1e-3
    link_replay_per_s: float = 5e-4
    torus_latency_us: float = 1.5
    ring_latency_us: float = 2.5
    efa_load: float = 0.2
    efa_retrans_pkts_per_s: float = 0.2
    efa_latency_us: float = 12.0
    ecc_corrected_per_s: float = 2e-4
    outside_mean_c: float = 14.0
    outside_diurnal_amp_c: float = 7.0
    evaporative_above_c: float = 29.0  # water assist switches on above this
    # AWS: 0.15 L/kWh site-wide WUE; while assist runs it evaporates more.
    evaporative_l_per_kwh: float = 1.8
    time_scale: float = 1.0  # simulated seconds per wall second (demos)


@dataclass(frozen=True, eq=False)
class TickTruth:
    """What the simulator knows to be true for one tick, fleet-wide."""

    tick: int
    t_s: float
    chips: int
    peak_flops: float
    delivered_flops: float
    effective_flops: float


@dataclass(frozen=True, eq=False)
class TickSample:
    """Every record of one tick; a node's frame is a slice of these arrays."""

    tick: int
    t_s: float
    chips: npt.NDArray[np.void]
    links: npt.NDArray[np.void]
    efa: npt.NDArray[np.void]
    cooling: npt.NDArray[np.void]
    facility: npt.NDArray[np.void]
    truth: TickTruth


class FleetModel:
    """The simulated fleet's state; ``step`` advances it by one tick."""

    def __init__(
        self,
        topology: Topology,
        rng: np.random.Generator,
        *,
        tick_s: float,
        start_s: float,
        params: FleetParams | None = None,
        hardware: Trainium2 = TRN2,
    ) -> None:
        self.topology = topology
        self.rng = rng
        self.tick_s = tick_s
        self.start_s = start_s
        self.params = params or FleetParams()
        self.hw = hardware
        topo, p = topology, self.params

        self._chip_phase = rng.uniform(0.0, 1.0, topo.n_ultraservers)[topo.chip_ultraserver]
        self._node_inlet_offset_c = rng.normal(0.0, 0.5, topo.n_nodes)
        self._site_outside_offset_c = rng.normal(0.0, 2.0, topo.n_sites)
        ring = topo.link_kind == LINK_KIND_RING
        self._link_nominal = np.where(ring, self.hw.neuronlink_ring_bytes_s, self.hw.neuronlink_intra_bytes_s)
        self._link_latency_us = np.where(ring, p.ring_latency_us, p.torus_latency_us)

        self.chips = np.zeros(topo.n_chips, CHIP_DTYPE)
        self.chips["chip"] = np.arange(topo.n_chips)
        self.chips["clock_ratio"] = 1.0
        self.chips["hbm_used_bytes"] = rng.uniform(0.70, 0.90, topo.n_chips) * self.hw.hbm_bytes
        self.links = np.zeros(topo.n_links, LINK_DTYPE)
        self.links["link"] = np.arange(topo.n_links)
        self.links["lanes_up"] = self.hw.neuronlink_lanes
        self.efa = np.zeros(topo.n_efa, EFA_DTYPE)
        self.efa["port"] = np.arange(topo.n_efa)
        self.cooling = np.zeros(topo.n_nodes, COOLING_DTYPE)
        self.facility = np.zeros(topo.n_sites, FACILITY_DTYPE)

        # Counters accumulate in float64 and are published rounded.
        self._flop = np.zeros(topo.n_chips)
        self._temp_c = self._inlet_c(0.0)[topo.chip_node] + 20.0
        self._last_tick = -1

    def t_of(self, tick: int) -> float:
        """Return the sample time of ``tick`` (Unix seconds)."""
        return self.start_s + tick * self.tick_s

    def _outside_c(self, sim_s: float) -> F64:
        p = self.params
        day_phase = 2.0 * np.pi * ((sim_s / 86_400.0) - 0.375)  # coolest ~03:00, warmest ~15:00
        swing = p.outside_diurnal_amp_c * np.sin(day_phase)
        return np.asarray(p.outside_mean_c + self._site_outside_offset_c + swing, dtype=np.float64)

    def _inlet_c(self, sim_s: float) -> F64:
        site_inlet = np.clip(self._outside_c(sim_s) + 4.0, 18.0, 27.0)
        node_site = self.topology.node_site
        return np.asarray(site_inlet[node_site] + self._node_inlet_offset_c, dtype=np.float64)

    def _poisson(self, rate_per_s: float, n: int) -> npt.NDArray[np.int64]:
        return self.rng.poisson(rate_per_s * self.tick_s, n)

    def step(self, tick: int) -> TickSample:
        """Advance to ``tick`` (the next one) and return its records and truth.

        Raises ValueError if ticks are skipped or repeated: counters would jump.
        """
        if tick != self._last_tick + 1:
            raise ValueError(f"tick {tick} follows {self._last_tick}; the model steps one tick at a time")
        self._last_tick = tick
        t_s = self.t_of(tick)
        sim_s = tick * self.tick_s * self.params.time_scale
        inlet_node = self._inlet_c(sim_s)
        flops, power = self._step_chips(tick, inlet_node)
        self._step_links()
        self._step_efa()
        node_power = self._step_cooling(inlet_node, power)
        self._step_facility(sim_s, node_power)
        truth = TickTruth(
            tick=tick, t_s=t_s, chips=self.topology.n_chips,
            peak_flops=self.topology.n_chips * self.hw.fp8_dense_flops,
            delivered_flops=float(flops.sum()),
            effective_flops=float(flops.sum()),
        )
        return TickSample(tick, t_s, self.chips, self.links, self.efa, self.cooling, self.facility, truth)

    def _step_chips(self, tick: int, inlet_node: F64) -> tuple[F64, F64]:
        """Utilisation follows the step cycle; power, heat and clock follow it."""
        topo, p, hw, rng, dt = self.topology, self.params, self.hw, self.rng, self.tick_s
        cycle = np.sin(2.0 * np.pi * (tick * dt / p.step_s + self._chip_phase))
        util = np.clip(p.util_mean + p.util_cycle_amp * cycle + rng.normal(0, p.util_noise, topo.n_chips), 0, 1)
        clock = np.clip(
            1.0 - p.throttle_per_c * np.maximum(self._temp_c - p.throttle_start_c, 0.0), p.throttle_floor, 1.0
        )
        power = hw.chip_idle_power_w + (hw.chip_power_w - hw.chip_idle_power_w) * util * clock
        target = inlet_node[topo.chip_node] + p.thermal_resistance_c_per_w * power
        self._temp_c += (target - self._temp_c) * (1.0 - np.exp(-dt / p.thermal_tau_s))
        flops = hw.fp8_dense_flops * util * clock
        self._flop += flops * dt
        c = self.chips
        c["util"] = util
        c["clock_ratio"] = clock
        c["throttled"] = clock < 1.0
        c["temp_c"] = self._temp_c + rng.normal(0, p.temp_noise_c, topo.n_chips)
        c["power_w"] = power
        c["fp8_flop_total"] = self._flop
        c["ecc_corrected_total"] += self._poisson(p.ecc_corrected_per_s, topo.n_chips).astype(np.uint64)
        return flops, power

    def _step_links(self) -> None:
        """Healthy NeuronLinks run near nominal with small jitter."""
        topo, p, hw, rng, dt = self.topology, self.params, self.hw, self.rng, self.tick_s
        links = self.links
        lane_share = links["lanes_up"] / hw.neuronlink_lanes
        bw = self._link_nominal * lane_share * (p.link_bw_efficiency + rng.normal(0, p.link_bw_noise, topo.n_links))
        links["bw_bytes_s"] = bw
        links["tx_bytes_total"] += (bw * p.comm_share * dt).astype(np.uint64)
        links["crc_errors_total"] += self._poisson(p.link_crc_per_s, topo.n_links).astype(np.uint64)
        links["replay_total"] += self._poisson(p.link_replay_per_s, topo.n_links).astype(np.uint64)
        links["latency_us"] = self._link_latency_us * (1.0 + rng.normal(0, 0.03, topo.n_links))

    def _step_efa(self) -> None:
        """EFA ports carry a steady load with a trickle of retransmits."""
        topo, p, hw, rng, dt = self.topology, self.params, self.hw, self.rng, self.tick_s
        efa = self.efa
        moved = (hw.efa_port_bytes_s * p.efa_load * dt * (1.0 + rng.normal(0, 0.02, topo.n_efa))).astype(np.uint64)
        efa["tx_bytes_total"] += moved
        efa["rx_bytes_total"] += moved
        pkts = self._poisson(p.efa_retrans_pkts_per_s, topo.n_efa).astype(np.uint64)
        efa["retrans_pkts_total"] += pkts
        efa["retrans_bytes_total"] += pkts * np.uint64(8192)
        efa["latency_us"] = p.efa_latency_us * (1.0 + self.rng.normal(0, 0.04, topo.n_efa))

    def _step_cooling(self, inlet_node: F64, chip_power: F64) -> F64:
        """Node outlet air rises with the node's power, fans with inlet air."""
        topo, hw = self.topology, self.hw
        node_power = np.bincount(topo.chip_node, weights=chip_power, minlength=topo.n_nodes) + hw.node_host_power_w
        cool = self.cooling
        cool["inlet_c"] = inlet_node + self.rng.normal(0, 0.1, topo.n_nodes)
        cool["outlet_c"] = inlet_node + node_power / 1_200.0  # ~1 m^3/s of air: 1.2 kW per degree
        cool["fan_rpm"] = np.clip(6_000.0 + 250.0 * (inlet_node - 20.0), 4_000.0, 12_000.0)
        cool["power_w"] = node_power
        return np.asarray(node_power, dtype=np.float64)

    def _step_facility(self, sim_s: float, node_power: F64) -> None:
        """Outside air cools most of the time; water assist runs in the heat."""
        topo, p, dt = self.topology, self.params, self.tick_s
        outside = self._outside_c(sim_s)
        site_power = np.bincount(topo.node_site, weights=node_power, minlength=topo.n_sites)
        assist = outside > p.evaporative_above_c
        fac = self.facility
        fac["outside_c"] = outside
        fac["cooling_mode"] = assist
        fac["it_energy_j_total"] += site_power * dt
        fac["water_l_total"] += np.where(assist, site_power * dt / 3.6e6 * p.evaporative_l_per_kwh, 0.0)
