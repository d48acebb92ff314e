"""A Trainium2 fleet as vectorised numpy state, stepped one tick at a time, with
the faults of ``sim/faults.py`` applied and the ground truth they imply.

The model is plausible rather than precise (``FleetParams``, ``sim/params.py``,
names every figure it assumes): each synchronous group (an UltraServer by
default) runs at the pace of its slowest member and its collectives at the pace
of its slowest path (``sim/training.py``, as docs/throughput-model.md
describes); utilisation is the busy share that pace leaves each chip; power
follows utilisation, chip temperature relaxes towards inlet air
(``sim/climate.py``) plus thermal resistance times power, and firmware
throttles the clock above ``throttle_start_c``.  Telemetry carries sensor
noise and the occasional burst (contention, error bursts) at a level scaled by
``noise`` (``sim/noise.py``).  A ``Profile`` (``sim/profile.py``) says how real
that telemetry looks: the ideal one keeps every entity of a kind identical and
every node on the tick; the realistic one adds static per-entity baselines,
heavy-tailed interval averages, per-node sample times and counter resets; the
training one adds skewed agent clocks and traffic that swings within each
step, each counter the exact integral of that swing up to its agent's sample
(``sim/stepcycle.py``; docs/simulator-profiles.md).

It holds no I/O and no clock: tick ``k`` is at ``start_s + k * tick_s``, and
all randomness comes from the injected generator, so a seed fixes every value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, B
from rainierd.fleet import LINK_KIND_RING, TRN2, Topology, Trainium2
from rainierd.sim._statics import Statics, static_rng
from rainierd.sim.climate import Climate
from rainierd.sim.faults import Effects, Fault, FaultKind, effects
from rainierd.sim.job_training import JobTraining
from rainierd.sim.noise import Noise
from rainierd.sim.params import FleetParams
from rainierd.sim.profile import PROFILES, Profile
from rainierd.sim.sample import TickSample, TickTruth
from rainierd.sim.stepcycle import StepCycle
from rainierd.sim.training import EFA_PACKET_BYTES, Pace, Training
from rainierd.sim.workload import JobSchedule, JobSpec
from rainierd.wire import CHIP_DTYPE_V1, COOLING_DTYPE, EFA_DTYPE_V1, FACILITY_DTYPE, LINK_DTYPE

_JOBS_SPAWN_KEY = 0x10B5  # the job mix's generator: another stream of the model's seed (sim/_statics.py)


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
        faults: list[Fault] | None = None,
        hardware: Trainium2 = TRN2,
        profile: Profile = PROFILES["ideal"],
        jobs: list[JobSpec] | None = None,
    ) -> None:
        self.topology = topology
        self.profile = profile
        self.rng = rng
        self.tick_s = tick_s
        self.start_s = start_s
        self.params = params or FleetParams()
        self.faults = list(faults or [])
        self.hw = hardware
        topo, p = topology, self.params

        # Drawn in this order from the generator: a seed's stream (the groups' phases first, then the air).
        # With jobs (a fixed list, or the mix), groups come and go: the mix draws from its own derived stream, and
        # the static per-chip speeds are relative to the chip's UltraServer.
        self.training: Training
        if jobs is not None or p.jobs == "mix" or profile.job_mix:
            schedule = JobSchedule(topology, tick_s, static_rng(rng, _JOBS_SPAWN_KEY),
                                   mix=p.job_mix if jobs is None else None, jobs=list(jobs or []))
            self.training = JobTraining(topology, p, schedule, hardware=hardware, start_s=start_s, tick_s=tick_s)
            static_groups = topo.chip_ultraserver
        else:
            self.training = Training(topology, self.params, rng, hardware=hardware)
            static_groups = self.training.chip_group
        self.climate = Climate(topology, self.params, rng)
        ring = topo.link_kind == LINK_KIND_RING
        # Each entity's fixed draws (a port's healthy retransmit trickle, ...): the world's truth, which a
        # benchmark of detection reads to place a fault relative to it.
        self.statics = Statics.draw(profile, topo, static_rng(rng), base_retrans_per_s=p.efa_retrans_pkts_per_s,
                                    tick_s=tick_s, chip_group=static_groups)
        self.noise = Noise(topology, rng, tick_s=tick_s, params=p, profile=profile,
                           node_phase_s=self.statics.node_phase_s)
        # Per-entity bases, static multipliers folded in once (exactly 1 for the ideal profile).
        nominal = np.where(ring, self.hw.neuronlink_ring_bytes_s, self.hw.neuronlink_intra_bytes_s)
        self._link_nominal = nominal * self.statics.link_efficiency
        self._link_latency_us = np.where(ring, p.ring_latency_us, p.torus_latency_us) * self.statics.link_latency
        self._efa_port_bytes_s = self.hw.efa_port_bytes_s * p.efa_load * self.statics.efa_share
        self._efa_latency_us = p.efa_latency_us * self.statics.efa_latency
        # Traffic within a step (None: flat); per node, the seconds of mean traffic its last interval held.
        self.cycle = (StepCycle(period_s=p.step_s, comm_share=p.comm_share, swing=profile.step_swing)
                      if profile.step_swing > 1.0 else None)
        self._cycle_s: F64 | None = None

        # The simulated agent reports what a binary node frame carries (wire v1's records).
        self.chips = np.zeros(topo.n_chips, CHIP_DTYPE_V1)
        self.chips["chip"] = np.arange(topo.n_chips)
        self.chips["hbm_used_bytes"] = rng.uniform(0.70, 0.90, topo.n_chips) * self.hw.hbm_bytes
        self.links = np.zeros(topo.n_links, LINK_DTYPE)
        self.links["link"] = np.arange(topo.n_links)
        self.efa = np.zeros(topo.n_efa, EFA_DTYPE_V1)
        self.efa["port"] = np.arange(topo.n_efa)
        self.cooling = np.zeros(topo.n_nodes, COOLING_DTYPE)
        self.facility = np.zeros(topo.n_sites, FACILITY_DTYPE)

        # Counters accumulate in float64 and are published rounded.
        self._flop = np.zeros(topo.n_chips)
        power0 = self.hw.chip_idle_power_w + (self.hw.chip_power_w - self.hw.chip_idle_power_w) * p.util_mean
        self._temp_c = self.climate.inlet_c(0.0)[topo.chip_node] + p.thermal_resistance_c_per_w * power0
        self._last_tick = -1
        self._agent_start = np.zeros(topology.n_nodes, np.uint64)  # the tick each node's agent last started

    def t_of(self, tick: int) -> float:
        """Return the sample time of ``tick`` (Unix seconds)."""
        return self.start_s + tick * self.tick_s

    def _reset_counters(self) -> B:
        """Restart the monotonic counters of the nodes whose agent restarted; return which did.

        A restart between two samples loses what the old agent had counted:
        the new sample holds only what was counted since (this tick's increments).
        """
        topo, p = self.topology, self.params
        reset = np.zeros(topo.n_nodes, dtype=bool)
        per_tick = self.profile.resets_per_node_day * self.tick_s * p.time_scale / 86_400.0
        if per_tick <= 0:
            return reset
        nodes = self.rng.integers(topo.n_nodes, size=int(self.rng.binomial(topo.n_nodes, min(1.0, per_tick))))
        if not nodes.size:
            return reset
        reset[nodes] = True
        for records, per_node in ((self.chips, topo.chips_per_node), (self.links, topo.links_per_node),
                                  (self.efa, topo.efa_ports_per_node)):
            hit = (nodes[:, None] * per_node + np.arange(per_node)).ravel()
            for name in records.dtype.names or ():
                if name.endswith("_total"):
                    records[name][hit] = 0
            if records is self.chips:
                self._flop[hit] = 0.0
        return reset

    def step(self, tick: int) -> TickSample:
        """Advance to ``tick`` (the next one) and return its records and truth.

        Raises ValueError if ticks are skipped or repeated: counters would jump.
        """
        if tick != self._last_tick + 1:
            raise ValueError(f"tick {tick} follows {self._last_tick}; the model steps one tick at a time")
        self._last_tick = tick
        topo, p = self.topology, self.params
        sim_s = tick * self.tick_s * p.time_scale
        e = effects(topo, self.faults, tick, diurnal_phase=self.climate.day_phase(sim_s), tick_s=self.tick_s)
        inlet_node = self.climate.inlet_c(sim_s) + e.node_inlet_rise_c
        sampled_t_s = self.noise.node_times(self.t_of(tick))
        node_t_s = sampled_t_s + self.statics.node_clock_offset_s  # what each agent's clock says it is
        node_reset = self._reset_counters()
        self._agent_start[node_reset] = np.uint64(tick)

        thermal_clock = np.clip(
            1.0 - p.throttle_per_c * np.maximum(self._temp_c - p.throttle_start_c, 0.0), p.throttle_floor, 1.0,
        )
        efa_stretch = self.training.efa_stretch(e, retrans_per_s=self.statics.efa_retrans_per_s,
                                                port_bytes_s=self._efa_port_bytes_s)
        self.training.advance(tick)
        self._cycle_s = self._cycle_seconds()
        group = self.training.pace(e, thermal_clock, efa_stretch)
        flops, power, util_true = self._step_chips(tick, e, group, inlet_node, thermal_clock)
        self._step_links(e, group.pace, group.traffic)
        self._step_efa(e, group.pace, group.traffic)
        node_power = self._step_cooling(e, inlet_node, power)
        self._step_facility(sim_s, node_power)

        chip_silent = (e.chip_failed & ~e.chip_fail_onset) | e.node_silent[topo.chip_node]
        lost_flops = self.training.lost_by_cause(e, group)
        active = tuple(f for f in self.faults if f.active(tick))
        jobs, unallocated, idle_chips = (self.training.job_truth(flops) if isinstance(self.training, JobTraining)
                                         else ((), None, 0))
        truth = TickTruth(
            tick=tick, t_s=self.t_of(tick), chips=topo.n_chips,
            # Only chips that exist count: an inventory may leave nodes of an UltraServer out.
            peak_flops=topo.n_present_chips * self.hw.fp8_dense_flops,
            delivered_flops=float((self.hw.fp8_dense_flops * util_true * group.clock)[topo.chip_present].sum()),
            effective_flops=float(flops[topo.chip_present].sum()),
            lost_flops=lost_flops,
            active_faults=active,
            fault_lost_flops=self.training.fault_losses(active),
            jobs=jobs, unallocated=unallocated, unallocated_chips=idle_chips,
            unallocated_peak_flops=idle_chips * self.hw.fp8_dense_flops,
        )
        return TickSample(
            tick, truth.t_s, self.chips, self.links, self.efa, self.cooling, self.facility, truth,
            chip_silent, e.node_silent.copy(), node_t_s, node_reset, np.uint64(tick) - self._agent_start,
            sampled_t_s,
        )

    def _cycle_seconds(self) -> F64 | None:
        """Return, per node, the integral of its job's step cycle over the node's interval (None: no cycle).

        Each node's interval runs between its agent's true sample times; the
        cycle's phase is its synchronous group's (``Training.cycle_phase``).
        """
        noise = self.noise
        if self.cycle is None or noise.node_t0 is None or noise.node_t1 is None:
            return None
        node_group = self.training.efa_group[::self.topology.efa_ports_per_node]
        phase = self.training.cycle_phase()[node_group]
        return self.cycle.seconds(noise.node_t0 - self.start_s, noise.node_t1 - self.start_s, phase)

    def _counted(self, rate: npt.NDArray[np.floating[Any]], per_node: int) -> F64:
        """Return what each entity's byte counter adds this tick at a mean ``rate`` a second.

        Flat traffic: rate x its node's interval.  With a step cycle, rate x
        the cycle's integral over that interval: the counter is the integral
        of the swinging rate up to the agent's sample, exactly.
        """
        if self._cycle_s is None:
            return self.noise.per_entity_s(rate, per_node)
        return np.asarray((rate.reshape(-1, per_node) * self._cycle_s[:, None]).ravel(), dtype=np.float64)

    def _interval_s(self, per_node: int) -> F64 | float:
        """Return each entity's interval: its node's time between samples (the tick while nodes sample on it)."""
        dt = self.noise.node_dt
        return self.tick_s if dt is None else np.repeat(dt, per_node)

    def _step_chips(
        self, tick: int, e: Effects, group: Pace, inlet_node: F64, thermal_clock: F64,
    ) -> tuple[F64, F64, F64]:
        """FLOP at the group's pace; utilisation is the busy share that leaves each chip.

        Returns each chip's FLOP/s, power and true utilisation.
        """
        topo, p, hw, dt = self.topology, self.params, self.hw, self.tick_s
        g = self.training.chip_group
        base_util = self.training.busy_share(tick * dt)
        flops = hw.fp8_dense_flops * base_util[g] * group.pace[g]
        clock, speed = group.clock, group.speed
        stalled = group.dead[g]
        util_true = np.where(stalled, 0.01, flops / (hw.fp8_dense_flops * speed))
        util_true = np.where(e.chip_failed, 0.0, util_true)
        # A chip faster than its group's slowest waits for it: it is busy less (and draws less), while
        # the group's pace, and so the truth, stays the slowest chip's.
        util_seen = util_true * self.statics.chip_util_scale if self.profile.chip_efficiency_sd else util_true
        power = hw.chip_idle_power_w + (hw.chip_power_w - hw.chip_idle_power_w) * util_seen * clock
        fan_frac = e.node_fan_frac[topo.chip_node]
        resistance = p.thermal_resistance_c_per_w * fan_frac ** -0.6
        target = inlet_node[topo.chip_node] + resistance * power
        self._temp_c += (target - self._temp_c) * (1.0 - np.exp(-dt / p.thermal_tau_s))
        self._flop += self.noise.per_entity_s(flops, topo.chips_per_node)

        c = self.chips
        c["util"] = np.clip(util_seen + self.noise.jitter(topo.n_chips, p.util_noise * p.noise), 0.0, 1.0)
        c["clock_ratio"] = clock
        c["throttled"] = (thermal_clock < 1.0) | (e.chip_clock_cap < 1.0)
        c["temp_c"] = np.where(e.chip_clock_cap < 1.0, np.maximum(self._temp_c, p.throttle_start_c), self._temp_c)
        c["temp_c"] += self.noise.normal(topo.n_chips, p.temp_noise_c * p.noise)
        c["power_w"] = power
        c["fp8_flop_total"] = self._flop
        self.noise.add_poisson(c["ecc_corrected_total"], p.ecc_corrected_per_s, node_of=topo.chip_node)
        c["ecc_uncorrected_total"] += e.chip_fail_onset.astype(np.uint64)
        return flops, power, util_true

    def _step_links(self, e: Effects, pace: F64, traffic: F64 | None = None) -> None:
        """NeuronLinks: bandwidth near nominal with jitter and contention dips; errors at a trickle.

        Ideal: the bandwidth is the in-collective rate.  A profile with
        ``link_bw_utilised`` reports the interval's average instead: the
        collective rate times the group's communication share and pace.
        With jobs, ``traffic`` (per group) scales both by the job's phase:
        silent in a checkpoint, a restart or idle, lighter in evaluation.
        """
        topo, p, rng, noise = self.topology, self.params, self.rng, self.noise
        n = topo.n_links
        jitter = noise.jitter(n, p.link_bw_noise * p.noise)
        jitter += np.float32(p.link_bw_efficiency)
        dips = noise.bursts(n)
        jitter[dips] *= noise.spike(0.7, 0.95, dips.size).astype(np.float32)
        bw = self._link_nominal * jitter
        bw *= e.link_bw_frac
        np.maximum(bw, 0.0, out=bw)
        links = self.links
        link_pace = pace[self.training.link_group]
        if traffic is not None:  # the gauge and the bytes both follow it (the bytes are the gauge's)
            bw *= traffic[self.training.link_group]
        if self.profile.link_bw_utilised:
            bw *= p.comm_share * link_pace
            moved = self._counted(bw, topo.links_per_node)
            if self._cycle_s is not None:  # the interval's average is what the agent's counter gives it
                bw = moved / self._interval_s(topo.links_per_node)
            links["tx_bytes_total"] += moved.astype(np.uint64)
        else:
            links["tx_bytes_total"] += self._counted(bw * p.comm_share * link_pace,
                                                     topo.links_per_node).astype(np.uint64)
        links["bw_bytes_s"] = bw
        links["lanes_up"] = e.link_lanes
        noise.add_poisson(links["crc_errors_total"], p.link_crc_per_s, e.link_crc_per_s, node_of=topo.link_node)
        noise.add_poisson(links["replay_total"], p.link_replay_per_s, e.link_replay_per_s, node_of=topo.link_node)
        bursts = noise.bursts(n)  # an error burst: a few tens of CRC errors and their replays
        crc_burst = rng.poisson(20.0 * p.noise, bursts.size).astype(np.uint64)
        np.add.at(links["crc_errors_total"], bursts, crc_burst)
        np.add.at(links["replay_total"], bursts, crc_burst // np.uint64(4))
        latency = noise.jitter(n, 0.03 * p.noise)
        latency += np.float32(1.0)
        np.maximum(latency, np.float32(0.5), out=latency)  # heavy tails must not make a link faster than light
        latency *= self._link_latency_us
        spikes = noise.bursts(n)
        latency[spikes] *= noise.spike(1.5, 3.0, spikes.size).astype(np.float32)
        latency[e.link_lanes == 0] = 0.0
        links["latency_us"] = latency

    def _step_efa(self, e: Effects, pace: F64, traffic: F64 | None = None) -> None:
        """EFA ports: traffic at the group's pace (and, with jobs, its phase's share); retransmits a share of it."""
        topo, p, rng, static, noise = self.topology, self.params, self.rng, self.statics, self.noise
        n, per_node = topo.n_efa, topo.efa_ports_per_node
        port_pace = pace[self.training.efa_group]
        if traffic is not None:
            port_pace = port_pace * traffic[self.training.efa_group]
        rate = (1.0 + noise.jitter(n, 0.02 * p.noise)) * (self._efa_port_bytes_s * port_pace * e.efa_frac)
        rate = np.where(e.efa_down, 0.0, np.maximum(rate, 0.0))
        moved = self._counted(rate, per_node).astype(np.uint64)
        efa = self.efa
        efa["tx_bytes_total"] += moved
        efa["rx_bytes_total"] += moved
        lost_pkts_per_s = e.efa_loss * rate / EFA_PACKET_BYTES
        before = efa["retrans_pkts_total"].copy()
        # A healthy port retransmits a small share of the packets it sends (its trickle is what it retransmits
        # at its full share of the node's traffic): an idle port retransmits nothing, a busy phase more, as the
        # EFA driver's counters do.  A slow port retransmits a multiple of that share.
        per_packet = static.efa_retrans_per_s * e.efa_retrans_mult / (self._efa_port_bytes_s / EFA_PACKET_BYTES)
        noise.add_poisson_means(efa["retrans_pkts_total"], per_packet * (moved / EFA_PACKET_BYTES))
        noise.add_poisson(efa["retrans_pkts_total"], 0.0, e.efa_retrans_per_s + lost_pkts_per_s,
                          node_of=topo.efa_node)
        bursts = noise.bursts(n)
        np.add.at(efa["retrans_pkts_total"], bursts, rng.poisson(50.0 * p.noise, bursts.size).astype(np.uint64))
        efa["retrans_bytes_total"] += (efa["retrans_pkts_total"] - before) * np.uint64(EFA_PACKET_BYTES)
        noise.add_poisson(efa["retrans_timeout_events_total"], 1e-4, np.where(e.efa_down, 5.0, 0.0),
                          node_of=topo.efa_node)
        noise.add_poisson(efa["unresponsive_remote_events_total"], 0.0, np.where(e.efa_down, 2.0, 0.0),
                          node_of=topo.efa_node)
        noise.add_poisson(efa["impaired_remote_conn_events_total"], 0.0, np.where(e.efa_loss > 1e-4, 0.5, 0.0),
                          node_of=topo.efa_node)
        latency = (1.0 + noise.jitter(n, 0.04 * p.noise)) * (self._efa_latency_us * e.efa_latency_mult)
        np.maximum(latency, 0.5 * self._efa_latency_us, out=latency)
        spikes = noise.bursts(n)
        latency[spikes] *= noise.spike(1.5, 3.0, spikes.size)
        efa["latency_us"] = latency

    def _step_cooling(self, e: Effects, inlet_node: F64, chip_power: F64) -> F64:
        """Node air path: outlet rises with power over airflow; fans follow inlet air."""
        topo, hw = self.topology, self.hw
        node_power = np.bincount(topo.chip_node, weights=chip_power, minlength=topo.n_nodes) + hw.node_host_power_w
        airflow = e.node_fan_frac
        cool = self.cooling
        cool["inlet_c"] = inlet_node + self.noise.normal(topo.n_nodes, 0.1 * self.params.noise)
        cool["outlet_c"] = inlet_node + node_power / (1_200.0 * airflow)  # ~1 m^3/s of air: 1.2 kW per degree
        cool["fan_rpm"] = np.clip(6_000.0 + 250.0 * (inlet_node - 20.0), 4_000.0, 12_000.0) * airflow
        cool["power_w"] = node_power
        return np.asarray(node_power, dtype=np.float64)

    def _step_facility(self, sim_s: float, node_power: F64) -> None:
        """Outside air cools most of the time; water assist runs in the heat."""
        topo, p, dt = self.topology, self.params, self.tick_s
        outside = self.climate.outside_c(sim_s)
        site_power = np.bincount(topo.node_site, weights=node_power, minlength=topo.n_sites)
        assist = outside > p.evaporative_above_c
        fac = self.facility
        fac["outside_c"] = outside
        fac["cooling_mode"] = assist
        fac["it_energy_j_total"] += site_power * dt
        fac["water_l_total"] += np.where(assist, site_power * dt / 3.6e6 * p.evaporative_l_per_kwh, 0.0)

    def ground_truth(self) -> list[Fault]:
        """Return every injected fault except the diurnal swing, which is not a fault to find."""
        return [f for f in self.faults if f.kind is not FaultKind.DIURNAL]
