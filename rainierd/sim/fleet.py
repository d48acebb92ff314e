"""A Trainium2 fleet as vectorised numpy state, stepped one tick at a time, with
the faults of ``sim/faults.py`` applied and the ground truth they imply.

The model is plausible rather than precise (``FleetParams`` names every figure
it assumes): each synchronous group (an UltraServer by default) runs at the
pace of its slowest member and its collectives at the pace of its slowest
path, as docs/throughput-model.md describes; utilisation is the busy share
that pace leaves each chip; power follows utilisation, chip temperature relaxes
towards inlet air plus thermal resistance times power, and firmware throttles
the clock above ``throttle_start_c``.  Telemetry carries sensor noise and the
occasional burst (contention, error bursts) at a level scaled by ``noise``.
A ``Profile`` (``sim/profile.py``) says how real that telemetry looks: the
ideal one keeps every entity of a kind identical and every node on the tick;
the realistic one adds static per-entity baselines, heavy-tailed interval
averages, per-node sample times and counter resets (docs/simulator-profiles.md).

It holds no I/O and no clock: tick ``k`` is at ``start_s + k * tick_s``, and
all randomness comes from the injected generator, so a seed fixes every value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd.core.model import CAUSES
from rainierd.hardware import TRN2, Trainium2
from rainierd.sim._statics import Statics, static_rng
from rainierd.sim.faults import Effects, Fault, FaultKind, effects
from rainierd.sim.profile import PROFILES, Profile
from rainierd.topology import LINK_KIND_RING, Topology
from rainierd.wire.records import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
)

__all__ = ["CAUSES", "FleetModel", "FleetParams", "TickSample", "TickTruth"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
U64 = npt.NDArray[np.uint64]

_EFA_PACKET_BYTES: Final = 8192


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetParams:
    """Behaviour of the fleet; every default here is an assumption."""

    step_s: float = 6.0  # one training step (forward, backward, collectives)
    util_mean: float = 0.62  # busy share of a healthy chip
    util_cycle_amp: float = 0.03
    comm_nl_share: float = 0.15  # share of a healthy step in NeuronLink collectives, not overlapped
    comm_efa_share: float = 0.10  # share in EFA collectives, not overlapped
    group_ultraservers: int = 1  # UltraServers per synchronous group
    noise: float = 1.0  # scales every noise term below
    util_noise: float = 0.003  # the utilisation counter averages 8 cores over the tick
    link_bw_noise: float = 0.02
    burst_prob: float = 1e-3  # a contention dip or error burst, per entity and tick
    thermal_resistance_c_per_w: float = 0.12
    thermal_tau_s: float = 20.0
    temp_noise_c: float = 0.3
    throttle_start_c: float = 95.0
    throttle_per_c: float = 0.05  # clock lost per degree above throttle_start_c
    throttle_floor: float = 0.5
    link_bw_efficiency: float = 0.96
    link_crc_per_s: float = 1e-3
    link_replay_per_s: float = 5e-4
    torus_latency_us: float = 1.5
    ring_latency_us: float = 2.5
    efa_load: float = 0.2
    efa_retrans_pkts_per_s: float = 0.2
    efa_latency_us: float = 12.0
    # Assumption (no public figure): the share of a group's EFA collective time
    # that is latency-bound (small messages, synchronisation) rather than
    # bandwidth-bound; a port L times slower to answer stretches it by 1 + share x (L - 1).
    efa_latency_share: float = 0.3
    ecc_corrected_per_s: float = 2e-4
    outside_mean_c: float = 14.0
    outside_diurnal_amp_c: float = 7.0
    evaporative_above_c: float = 29.0  # water assist switches on above this
    # AWS: 0.15 L/kWh site-wide WUE; while assist runs it evaporates more.
    evaporative_l_per_kwh: float = 1.8
    time_scale: float = 1.0  # simulated seconds per tick second (demos, diurnal tests)

    @property
    def comm_share(self) -> float:
        """Return the share of a healthy step spent in collectives."""
        return self.comm_nl_share + self.comm_efa_share


@dataclass(frozen=True, eq=False)
class TickTruth:
    """What the simulator knows to be true for one tick."""

    tick: int
    t_s: float
    chips: int
    peak_flops: float
    delivered_flops: float
    effective_flops: float
    lost_flops: dict[str, float] = field(default_factory=dict)  # by cause, fleet-wide
    active_faults: tuple[Fault, ...] = ()
    fault_lost_flops: tuple[float, ...] = ()  # per active fault: its synchronous group's loss


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
    chip_silent: B
    node_silent: B
    node_t_s: F64  # when each node sampled (Unix seconds); t_s is the tick's nominal time
    node_reset: B  # nodes whose agent restarted this tick: their counters began again from zero
    node_seq: U64  # each node's frame sequence number: ticks since its agent (re)started, as a real agent counts


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

        self.n_groups = -(-topo.n_ultraservers // p.group_ultraservers)
        self._chip_group = topo.chip_ultraserver // p.group_ultraservers
        # Which synchronous group each link and port paces with, computed once, not every tick.
        self._link_group = (topo.link_node // (topo.nodes_per_ultraserver * p.group_ultraservers)).astype(np.int32)
        self._efa_group = (topo.efa_node // (topo.nodes_per_ultraserver * p.group_ultraservers)).astype(np.int32)
        self._group_phase = rng.uniform(0.0, 1.0, self.n_groups)
        self._node_inlet_offset_c = rng.normal(0.0, 0.5, topo.n_nodes)
        self._site_outside_offset_c = rng.normal(0.0, 2.0, topo.n_sites)
        ring = topo.link_kind == LINK_KIND_RING
        self._static = Statics.draw(profile, topo, static_rng(rng), base_retrans_per_s=p.efa_retrans_pkts_per_s,
                                    tick_s=tick_s, chip_group=self._chip_group)
        # Per-entity bases, static multipliers folded in once (exactly 1 for the ideal profile).
        nominal = np.where(ring, self.hw.neuronlink_ring_bytes_s, self.hw.neuronlink_intra_bytes_s)
        self._link_nominal = nominal * self._static.link_efficiency
        self._link_latency_us = np.where(ring, p.ring_latency_us, p.torus_latency_us) * self._static.link_latency
        self._efa_port_bytes_s = self.hw.efa_port_bytes_s * p.efa_load * self._static.efa_share
        self._efa_latency_us = p.efa_latency_us * self._static.efa_latency

        self.chips = np.zeros(topo.n_chips, CHIP_DTYPE)
        self.chips["chip"] = np.arange(topo.n_chips)
        self.chips["hbm_used_bytes"] = rng.uniform(0.70, 0.90, topo.n_chips) * self.hw.hbm_bytes
        self.links = np.zeros(topo.n_links, LINK_DTYPE)
        self.links["link"] = np.arange(topo.n_links)
        self.efa = np.zeros(topo.n_efa, EFA_DTYPE)
        self.efa["port"] = np.arange(topo.n_efa)
        self.cooling = np.zeros(topo.n_nodes, COOLING_DTYPE)
        self.facility = np.zeros(topo.n_sites, FACILITY_DTYPE)

        # Counters accumulate in float64 and are published rounded.
        self._flop = np.zeros(topo.n_chips)
        power0 = self.hw.chip_idle_power_w + (self.hw.chip_power_w - self.hw.chip_idle_power_w) * p.util_mean
        self._temp_c = self._inlet_c(0.0)[topo.chip_node] + p.thermal_resistance_c_per_w * power0
        self._last_tick = -1
        self._agent_start = np.zeros(topology.n_nodes, np.uint64)  # the tick each node's agent last started
        self._group_lost = np.zeros(self.n_groups)
        # Each node's interval since its previous sample; None while every node samples on the tick.
        self._node_dt: F64 | None = None
        self._node_t_prev: F64 | None = None

    def t_of(self, tick: int) -> float:
        """Return the sample time of ``tick`` (Unix seconds)."""
        return self.start_s + tick * self.tick_s

    def _day_phase(self, sim_s: float) -> float:
        # Coolest about 03:00, warmest about 15:00.
        return float(np.sin(2.0 * np.pi * ((sim_s / 86_400.0) - 0.375)))

    def _outside_c(self, sim_s: float) -> F64:
        p = self.params
        swing = p.outside_diurnal_amp_c * self._day_phase(sim_s)
        return np.asarray(p.outside_mean_c + self._site_outside_offset_c + swing, dtype=np.float64)

    def _inlet_c(self, sim_s: float) -> F64:
        site_inlet = np.clip(self._outside_c(sim_s) + 4.0, 18.0, 27.0)
        return np.asarray(site_inlet[self.topology.node_site] + self._node_inlet_offset_c, dtype=np.float64)

    def _add_poisson(
        self,
        counter: npt.NDArray[np.uint64],
        base_per_s: float | F64,
        extra_per_s: F64 | None = None,
        *,
        node_of: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """Add Poisson(rate x interval) events to every entity's ``counter``, in time that follows the events.

        A uniform ``base_per_s``: the fleet's total is drawn at once and
        spread over the entities, which gives each one exactly an independent
        Poisson count: a 1e-3/s trickle over 1.5M links costs ~1,500 draws,
        not 1.5M.  When nodes sample off the tick, events are drawn over the
        longest interval and each kept with its own node's (``node_of``)
        interval over that: thinning, exact for Poisson.  A per-entity
        ``base_per_s`` (a profile's uneven trickle) is one draw per entity.
        ``extra_per_s`` (faults) adds a Poisson draw where it is non-zero.
        """
        n, rng, dt_node = counter.size, self.rng, self._node_dt
        if not isinstance(base_per_s, float | int):
            per_node = n // self.topology.n_nodes
            counter += rng.poisson(self._per_entity_s(base_per_s, per_node)).astype(np.uint64)
            hits = None
        elif dt_node is None:
            total = int(rng.poisson(base_per_s * self.tick_s * n))
            hits = rng.integers(n, size=total) if total else None
        else:
            span = float(dt_node.max())
            hits = rng.integers(n, size=int(rng.poisson(base_per_s * n * span)))
            if node_of is not None:
                hits = hits[rng.uniform(0.0, span, hits.size) < dt_node[node_of[hits]]]
        if hits is not None and hits.size > n // 16:  # many events: one counting pass beats scattering them
            counter += np.bincount(hits, minlength=n).astype(np.uint64)
        elif hits is not None and hits.size:
            np.add.at(counter, hits, np.uint64(1))
        if extra_per_s is not None:
            hot = np.flatnonzero(extra_per_s)
            if hot.size:
                span_hot = self.tick_s if dt_node is None or node_of is None else dt_node[node_of[hot]]
                counter[hot] += rng.poisson(extra_per_s[hot] * span_hot).astype(np.uint64)

    def _per_entity_s(self, values: npt.NDArray[np.floating[Any]], per_node: int) -> F64:
        """Return ``values`` (per second) times each entity's interval: its node's time between samples."""
        if self._node_dt is None:
            return np.asarray(values * self.tick_s, dtype=np.float64)
        return np.asarray((values.reshape(-1, per_node) * self._node_dt[:, None]).ravel(), dtype=np.float64)

    def _bursts(self, n: int) -> npt.NDArray[np.int64]:
        """Return the entities that have a burst this tick.

        Ideal: each with probability burst_prob x noise a tick.  A profile
        with ``spike_per_s`` sets a rate in time, so a longer tick holds more.
        """
        per_s = self.profile.spike_per_s
        prob = self.params.burst_prob if per_s <= 0 else per_s * self.tick_s
        count = int(self.rng.binomial(n, min(1.0, prob * self.params.noise)))
        return self.rng.integers(n, size=count)

    def _spike(self, low: float, high: float, size: int) -> F64:
        """Return multipliers of gauges that spiked (or dipped) this tick, by U(low, high) while it lasted.

        A gauge averaged over the interval shows a spike of d seconds diluted
        by the interval: 1 + (m - 1) x min(d, tick) / tick.
        """
        mult = self.rng.uniform(low, high, size)
        if not self.profile.interval_averaged:
            return mult
        lasted_s = self.rng.uniform(*self.profile.spike_s, size)
        return np.asarray(1.0 + (mult - 1.0) * np.minimum(lasted_s, self.tick_s) / self.tick_s, dtype=np.float64)

    def _normal(self, n: int, sigma: float) -> npt.NDArray[np.float32]:
        noise = self.rng.standard_normal(n, dtype=np.float32)
        noise *= np.float32(sigma)
        return noise

    def _jitter(self, n: int, sigma: float) -> npt.NDArray[np.float32]:
        """Return a gauge's zero-mean noise with standard deviation ``sigma`` at a 1 s interval.

        Ideal: Gaussian.  The profile may make it Student-t (heavy tails,
        scaled to the same variance) and, for a gauge averaged over the
        interval, scale it by 1 / sqrt(tick_s).
        """
        prof = self.profile
        if prof.interval_averaged:
            sigma /= float(np.sqrt(self.tick_s))
        if prof.noise_dof <= 0:
            return self._normal(n, sigma)
        # t = z / sqrt(chi2 / dof), chi2 = 2 x Gamma(dof / 2); x sqrt((dof - 2) / dof) for unit variance.
        noise = self.rng.standard_normal(n, dtype=np.float32)
        shape = prof.noise_dof / 2.0
        if shape == int(shape) and shape <= 4:  # Gamma(k) as k exponentials: half the cost of standard_gamma
            chi_half = self.rng.standard_exponential((int(shape), n), dtype=np.float32).sum(axis=0)
        else:
            chi_half = self.rng.standard_gamma(shape, n, dtype=np.float32)
        np.maximum(chi_half, np.float32(1e-6), out=chi_half)
        noise *= np.float32(sigma * np.sqrt((prof.noise_dof - 2.0) / 2.0))
        noise /= np.sqrt(chi_half)
        return noise

    def _node_times(self, tick: int) -> F64:
        """Return each node's sample time this tick, and keep each node's interval since its last."""
        t, prof, n = self.t_of(tick), self.profile, self.topology.n_nodes
        if prof.tick_aligned:
            return np.full(n, t)
        sd = prof.sample_jitter_frac * self.tick_s
        # Clipped at 3 sigma so that a node's samples stay in order.
        jitter = np.clip(self.rng.normal(0.0, sd, n), -3.0 * sd, 3.0 * sd) if sd > 0 else np.zeros(n)
        node_t = np.asarray(t + self._static.node_phase_s + jitter, dtype=np.float64)
        self._node_dt = np.full(n, self.tick_s) if self._node_t_prev is None else node_t - self._node_t_prev
        self._node_t_prev = node_t
        return node_t

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

    def _by_group(self, values: F64, per_group: int, reduce: str) -> F64:
        padded = np.resize(values, self.n_groups * per_group) if values.size % per_group else values
        shaped = padded.reshape(self.n_groups, per_group)
        return np.asarray(shaped.min(axis=1) if reduce == "min" else shaped.max(axis=1), dtype=np.float64)

    def step(self, tick: int) -> TickSample:
        """Advance to ``tick`` (the next one) and return its records and truth.

        Raises ValueError if ticks are skipped or repeated: counters would jump.
        """
        if tick != self._last_tick + 1:
            raise ValueError(f"tick {tick} follows {self._last_tick}; the model steps one tick at a time")
        self._last_tick = tick
        topo, p = self.topology, self.params
        sim_s = tick * self.tick_s * p.time_scale
        e = effects(topo, self.faults, tick, diurnal_phase=self._day_phase(sim_s), tick_s=self.tick_s)
        inlet_node = self._inlet_c(sim_s) + e.node_inlet_rise_c
        node_t_s = self._node_times(tick)
        node_reset = self._reset_counters()
        self._agent_start[node_reset] = np.uint64(tick)

        group = self._pace(e)
        flops, power, clock, util_true = self._step_chips(tick, e, group, inlet_node)
        self._step_links(e, group["pace"])
        self._step_efa(e, group["pace"])
        node_power = self._step_cooling(e, inlet_node, power)
        self._step_facility(sim_s, node_power)

        chip_silent = (e.chip_failed & ~e.chip_fail_onset) | e.node_silent[topo.chip_node]
        lost_flops = self._lost_by_cause(e, group)
        active = tuple(f for f in self.faults if f.active(tick))
        truth = TickTruth(
            tick=tick, t_s=self.t_of(tick), chips=topo.n_chips,
            # Only chips that exist count: an inventory may leave nodes of an UltraServer out.
            peak_flops=topo.n_present_chips * self.hw.fp8_dense_flops,
            delivered_flops=float((self.hw.fp8_dense_flops * util_true * clock)[topo.chip_present].sum()),
            effective_flops=float(flops[topo.chip_present].sum()),
            lost_flops=lost_flops,
            active_faults=active,
            # A fault's true loss is its group's; faults sharing a group share it.
            fault_lost_flops=tuple(float(self._group_lost[self._group_of(f)].sum()) for f in active),
        )
        return TickSample(
            tick, truth.t_s, self.chips, self.links, self.efa, self.cooling, self.facility, truth,
            chip_silent, e.node_silent.copy(), node_t_s, node_reset, np.uint64(tick) - self._agent_start,
        )

    def _pace(self, e: Effects) -> dict[str, F64]:
        """Per synchronous group: slowest member, slowest paths, and the pace they allow."""
        topo, p = self.topology, self.params
        chips_per_us = topo.chips_per_node * topo.nodes_per_ultraserver
        per_group = p.group_ultraservers
        self._thermal_clock = np.clip(
            1.0 - p.throttle_per_c * np.maximum(self._temp_c - p.throttle_start_c, 0.0), p.throttle_floor, 1.0,
        )
        clock = np.minimum(self._thermal_clock, e.chip_clock_cap) * e.site_dvfs[topo.chip_site]
        speed = clock * (1.0 - e.chip_slowdown)
        dead = e.chip_failed | e.node_silent[topo.chip_node]
        s_min = self._by_group(speed, chips_per_us * per_group, "min")
        f_nl = self._by_group(e.link_path_frac, topo.links_per_node * topo.nodes_per_ultraserver * per_group, "min")
        efa_path = e.efa_frac / self._efa_stretch(e)
        f_efa = self._by_group(efa_path, topo.efa_ports_per_node * topo.nodes_per_ultraserver * per_group, "min")
        group_dead = self._by_group(dead.astype(np.float64), chips_per_us * per_group, "max") > 0
        compute = (1.0 - p.comm_share) / s_min
        step = compute + p.comm_nl_share / f_nl + p.comm_efa_share / f_efa
        pace = np.where(group_dead, 0.0, 1.0 / step)
        return {"clock": clock, "speed": speed, "s_min": s_min, "f_nl": f_nl, "f_efa": f_efa,
                "dead": group_dead.astype(np.float64), "pace": pace, "step": step}

    def _efa_stretch(self, e: Effects) -> F64:
        """Return how much each port stretches its group's EFA collective: 1 + share x (L - 1) + r.

        L is the port's latency multiplier relative to its own healthy
        latency, beyond what its lost throughput already explains (a degraded
        port's queueing, 1 / efa_frac, is priced in efa_frac).  r is the bytes
        it retransmits over the bytes it sends at a healthy pace, counting only
        the retransmits a fault adds and efa_frac does not already price: a
        multiple of the port's own trickle (``efa_retrans_mult``).  Loss and
        degradation retransmits are in their efa_frac, and the healthy trickle
        (1e-5 of the bytes at most) is part of every baseline, so a healthy
        port stretches by exactly 1 and truth without efa_slow is what it was.
        """
        p = self.params
        latency = np.maximum(e.efa_latency_mult * e.efa_frac, 1.0)
        added_bytes_per_s = (e.efa_retrans_mult - 1.0) * self._static.efa_retrans_per_s * _EFA_PACKET_BYTES
        retrans = added_bytes_per_s / (self._efa_port_bytes_s * e.efa_frac)
        return np.asarray(1.0 + p.efa_latency_share * (latency - 1.0) + retrans, dtype=np.float64)

    def _step_chips(
        self, tick: int, e: Effects, group: dict[str, F64], inlet_node: F64,
    ) -> tuple[F64, F64, F64, F64]:
        """FLOP at the group's pace; utilisation is the busy share that leaves each chip."""
        topo, p, hw, dt = self.topology, self.params, self.hw, self.tick_s
        g = self._chip_group
        base_util = p.util_mean + p.util_cycle_amp * np.sin(2.0 * np.pi * (tick * dt / p.step_s + self._group_phase))
        flops = hw.fp8_dense_flops * base_util[g] * group["pace"][g]
        clock, speed = group["clock"], group["speed"]
        stalled = group["dead"][g] > 0
        util_true = np.where(stalled, 0.01, flops / (hw.fp8_dense_flops * speed))
        util_true = np.where(e.chip_failed, 0.0, util_true)
        # A chip faster than its group's slowest waits for it: it is busy less (and draws less), while
        # the group's pace, and so the truth, stays the slowest chip's.
        util_seen = util_true * self._static.chip_util_scale if self.profile.chip_efficiency_sd else util_true
        power = hw.chip_idle_power_w + (hw.chip_power_w - hw.chip_idle_power_w) * util_seen * clock
        fan_frac = e.node_fan_frac[topo.chip_node]
        resistance = p.thermal_resistance_c_per_w * fan_frac ** -0.6
        target = inlet_node[topo.chip_node] + resistance * power
        self._temp_c += (target - self._temp_c) * (1.0 - np.exp(-dt / p.thermal_tau_s))
        self._flop += self._per_entity_s(flops, topo.chips_per_node)

        c = self.chips
        c["util"] = np.clip(util_seen + self._jitter(topo.n_chips, p.util_noise * p.noise), 0.0, 1.0)
        c["clock_ratio"] = clock
        c["throttled"] = (self._thermal_clock < 1.0) | (e.chip_clock_cap < 1.0)
        c["temp_c"] = np.where(e.chip_clock_cap < 1.0, np.maximum(self._temp_c, p.throttle_start_c), self._temp_c)
        c["temp_c"] += self._normal(topo.n_chips, p.temp_noise_c * p.noise)
        c["power_w"] = power
        c["fp8_flop_total"] = self._flop
        self._add_poisson(c["ecc_corrected_total"], p.ecc_corrected_per_s, node_of=topo.chip_node)
        c["ecc_uncorrected_total"] += e.chip_fail_onset.astype(np.uint64)
        return flops, power, clock, util_true

    def _step_links(self, e: Effects, pace: F64) -> None:
        """NeuronLinks: bandwidth near nominal with jitter and contention dips; errors at a trickle.

        Ideal: the bandwidth is the in-collective rate.  A profile with
        ``link_bw_utilised`` reports the interval's average instead: the
        collective rate times the group's communication share and pace.
        """
        topo, p, rng = self.topology, self.params, self.rng
        n = topo.n_links
        jitter = self._jitter(n, p.link_bw_noise * p.noise)
        jitter += np.float32(p.link_bw_efficiency)
        dips = self._bursts(n)
        jitter[dips] *= self._spike(0.7, 0.95, dips.size).astype(np.float32)
        bw = self._link_nominal * jitter
        bw *= e.link_bw_frac
        np.maximum(bw, 0.0, out=bw)
        links = self.links
        link_pace = pace[self._link_group]
        if self.profile.link_bw_utilised:
            bw *= p.comm_share * link_pace
            links["tx_bytes_total"] += self._per_entity_s(bw, topo.links_per_node).astype(np.uint64)
        else:
            links["tx_bytes_total"] += self._per_entity_s(bw * p.comm_share * link_pace,
                                                          topo.links_per_node).astype(np.uint64)
        links["bw_bytes_s"] = bw
        links["lanes_up"] = e.link_lanes
        self._add_poisson(links["crc_errors_total"], p.link_crc_per_s, e.link_crc_per_s, node_of=topo.link_node)
        self._add_poisson(links["replay_total"], p.link_replay_per_s, e.link_replay_per_s, node_of=topo.link_node)
        bursts = self._bursts(n)  # an error burst: a few tens of CRC errors and their replays
        crc_burst = rng.poisson(20.0 * p.noise, bursts.size).astype(np.uint64)
        np.add.at(links["crc_errors_total"], bursts, crc_burst)
        np.add.at(links["replay_total"], bursts, crc_burst // np.uint64(4))
        latency = self._jitter(n, 0.03 * p.noise)
        latency += np.float32(1.0)
        np.maximum(latency, np.float32(0.5), out=latency)  # heavy tails must not make a link faster than light
        latency *= self._link_latency_us
        spikes = self._bursts(n)
        latency[spikes] *= self._spike(1.5, 3.0, spikes.size).astype(np.float32)
        latency[e.link_lanes == 0] = 0.0
        links["latency_us"] = latency

    def _step_efa(self, e: Effects, pace: F64) -> None:
        """EFA ports: traffic at the group's pace; retransmits at a trickle, with bursts."""
        topo, p, rng, static = self.topology, self.params, self.rng, self._static
        n, per_node = topo.n_efa, topo.efa_ports_per_node
        port_pace = pace[self._efa_group]
        rate = (1.0 + self._jitter(n, 0.02 * p.noise)) * (self._efa_port_bytes_s * port_pace * e.efa_frac)
        rate = np.where(e.efa_down, 0.0, np.maximum(rate, 0.0))
        moved = self._per_entity_s(rate, per_node).astype(np.uint64)
        efa = self.efa
        efa["tx_bytes_total"] += moved
        efa["rx_bytes_total"] += moved
        lost_pkts_per_s = e.efa_loss * rate / _EFA_PACKET_BYTES
        # A slow port retransmits a multiple of its own healthy trickle.
        extra_pkts_per_s = e.efa_retrans_per_s + lost_pkts_per_s + (e.efa_retrans_mult - 1.0) * static.efa_retrans_per_s
        before = efa["retrans_pkts_total"].copy()
        uneven = bool(self.profile.site_retrans_per_s) or self.profile.efa_retrans_sigma > 0
        self._add_poisson(efa["retrans_pkts_total"], static.efa_retrans_per_s if uneven else p.efa_retrans_pkts_per_s,
                          extra_pkts_per_s, node_of=topo.efa_node)
        bursts = self._bursts(n)
        np.add.at(efa["retrans_pkts_total"], bursts, rng.poisson(50.0 * p.noise, bursts.size).astype(np.uint64))
        efa["retrans_bytes_total"] += (efa["retrans_pkts_total"] - before) * np.uint64(_EFA_PACKET_BYTES)
        self._add_poisson(efa["retrans_timeout_events_total"], 1e-4, np.where(e.efa_down, 5.0, 0.0),
                          node_of=topo.efa_node)
        self._add_poisson(efa["unresponsive_remote_events_total"], 0.0, np.where(e.efa_down, 2.0, 0.0),
                          node_of=topo.efa_node)
        self._add_poisson(efa["impaired_remote_conn_events_total"], 0.0, np.where(e.efa_loss > 1e-4, 0.5, 0.0),
                          node_of=topo.efa_node)
        latency = (1.0 + self._jitter(n, 0.04 * p.noise)) * (self._efa_latency_us * e.efa_latency_mult)
        np.maximum(latency, 0.5 * self._efa_latency_us, out=latency)
        spikes = self._bursts(n)
        latency[spikes] *= self._spike(1.5, 3.0, spikes.size)
        efa["latency_us"] = latency

    def _step_cooling(self, e: Effects, inlet_node: F64, chip_power: F64) -> F64:
        """Node air path: outlet rises with power over airflow; fans follow inlet air."""
        topo, hw = self.topology, self.hw
        node_power = np.bincount(topo.chip_node, weights=chip_power, minlength=topo.n_nodes) + hw.node_host_power_w
        airflow = e.node_fan_frac
        cool = self.cooling
        cool["inlet_c"] = inlet_node + self._normal(topo.n_nodes, 0.1 * self.params.noise)
        cool["outlet_c"] = inlet_node + node_power / (1_200.0 * airflow)  # ~1 m^3/s of air: 1.2 kW per degree
        cool["fan_rpm"] = np.clip(6_000.0 + 250.0 * (inlet_node - 20.0), 4_000.0, 12_000.0) * airflow
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

    def _lost_by_cause(self, e: Effects, group: dict[str, F64]) -> dict[str, float]:
        """Split each group's lost FLOP/s over the terms of its step time."""
        topo, p = self.topology, self.params
        chips_per_group = topo.chips_per_node * topo.nodes_per_ultraserver * p.group_ultraservers
        healthy = self.hw.fp8_dense_flops * p.util_mean * chips_per_group  # cycle-averaged
        lost = dict.fromkeys(CAUSES, 0.0)
        dead = group["dead"] > 0
        failed_group = self._by_group(e.chip_failed.astype(np.float64), chips_per_group, "max") > 0
        lost["failed_chip"] = float(healthy * (dead & failed_group).sum())
        lost["stale_telemetry"] = float(healthy * (dead & ~failed_group).sum())
        compute = (1.0 - p.comm_share) * (1.0 / group["s_min"] - 1.0)
        nl = p.comm_nl_share * (1.0 / group["f_nl"] - 1.0)
        efa = p.comm_efa_share * (1.0 / group["f_efa"] - 1.0)
        excess = compute + nl + efa
        with np.errstate(invalid="ignore", divide="ignore"):
            share_lost = np.where(dead | (excess <= 0), 0.0, healthy * (1.0 - 1.0 / group["step"]) / excess)
        # The compute term is the slowest member's: a straggler if its slowdown
        # outweighs its clock loss, thermal throttling (DVFS included) otherwise.
        speed = group["speed"].reshape(self.n_groups, -1) if topo.n_chips % chips_per_group == 0 else None
        straggler = np.zeros(self.n_groups, dtype=bool)
        if speed is not None:
            slowest = speed.argmin(axis=1) + np.arange(self.n_groups) * chips_per_group
            straggler = e.chip_slowdown[slowest] > (1.0 - group["clock"][slowest])
        lost["straggler"] = float((share_lost * compute * straggler).sum())
        lost["thermal_throttle"] = float((share_lost * compute * ~straggler).sum())
        lost["degraded_neuronlink"] = float((share_lost * nl).sum())
        lost["degraded_efa"] = float((share_lost * efa).sum())
        self._group_lost = np.where(dead, healthy, share_lost * excess)
        return lost

    def _group_of(self, fault: Fault) -> npt.NDArray[np.int64]:
        """Return the synchronous groups a fault's target belongs to."""
        topo, per = self.topology, self.params.group_ultraservers
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
        else:  # a site: all its groups
            us = np.flatnonzero(topo.ultraserver_site == t)
        return np.unique(np.atleast_1d(np.asarray(us, dtype=np.int64)) // per)

    def ground_truth(self) -> list[Fault]:
        """Return every injected fault except the diurnal swing, which is not a fault to find."""
        return [f for f in self.faults if f.kind is not FaultKind.DIURNAL]
