"""The figures the simulated fleet assumes, in one frozen value: kept apart
from the model that steps them so that callers (the daemon, the benchmarks)
configure a fleet without reading how it is stepped.

The step shares default to ``rainierd.fleet.pace.SHARES``, the monitor's defaults
too, so the world and the observer price a healthy step alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rainierd.fleet import SHARES, StepShares
from rainierd.sim.workload import JobMix


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetParams:
    """Behaviour of the fleet; every default here is an assumption."""

    step_s: float = 6.0  # one training step (forward, backward, collectives)
    util_mean: float = 0.62  # busy share of a healthy chip
    util_cycle_amp: float = 0.03
    comm_nl_share: float = SHARES.comm_nl_share  # share of a healthy step in NeuronLink collectives, not overlapped
    comm_efa_share: float = SHARES.comm_efa_share  # share in EFA collectives, not overlapped
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
    # The share of a group's EFA collective time that is latency-bound (``rainierd.fleet.pace.StepShares``).
    efa_latency_share: float = SHARES.efa_latency_share
    ecc_corrected_per_s: float = 2e-4
    outside_mean_c: float = 14.0
    outside_diurnal_amp_c: float = 7.0
    evaporative_above_c: float = 29.0  # water assist switches on above this
    # AWS: 0.15 L/kWh site-wide WUE; while assist runs it evaporates more.
    evaporative_l_per_kwh: float = 1.8
    time_scale: float = 1.0  # simulated seconds per tick second (demos, diurnal tests)
    # "mix": the fleet runs a seed-driven mix of jobs (sim/workload.py) instead of fixed groups; "none" (default): the
    # fixed groups of group_ultraservers, every value as before.
    jobs: Literal["none", "mix"] = "none"
    job_mix: JobMix = field(default_factory=JobMix)

    @property
    def comm_share(self) -> float:
        """Return the share of a healthy step spent in collectives."""
        return self.comm_nl_share + self.comm_efa_share

    @property
    def shares(self) -> StepShares:
        """Return the step shares the simulated training job runs with."""
        return StepShares(comm_nl_share=self.comm_nl_share, comm_efa_share=self.comm_efa_share,
                          efa_latency_share=self.efa_latency_share)
