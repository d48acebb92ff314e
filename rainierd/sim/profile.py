"""Named behaviours of the simulated fleet beyond ``FleetParams``: how far the
telemetry departs from identical, Gaussian, tick-aligned entities.

``FleetParams`` says how the fleet works (step shares, loads, trickles); a
``Profile`` says how *real* its telemetry looks.  ``"ideal"`` is the original
model, value for value for a seed: every link, port and chip of a kind is
statistically identical, noise is Gaussian and every publisher samples on the
tick.  Detectors tuned only on it meet per-entity baselines, heavy tails,
skewed clocks and counter resets for the first time in production, and raise
false alarms there; ``"realistic"`` brings those into the simulator.
``"training"`` adds what a synchronous training job does to them: agents
whose clocks are off by seconds, traffic that swings many-fold within each
step (so agents sampling at different moments see different rates), a job
mix with checkpoints, restarts and idle UltraServers, and a fleet whose
UltraServers are not all whole and whose nodes have 8 EFA ports; a profile
also says the shape of the fleet it runs on (``fleet``).

No public figure gives per-entity spreads for Trainium2, NeuronLink or EFA:
each realistic value below is an assumption whose reasoning its comment
gives, and docs/simulator-profiles.md tabulates them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from rainierd.fleet import TRN2, Topology, build_sites


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """How real the simulated telemetry looks; every default is the ideal fleet's."""

    name: str
    # Static per-entity heterogeneity, drawn once per model from a generator
    # derived from the seed (the per-tick stream is untouched).
    link_latency_sigma: float = 0.0  # lognormal sigma of each NeuronLink's latency multiplier
    link_latency_long_share: float = 0.0  # share of NeuronLinks on a longer path (cable, retimer)
    link_latency_long_extra: tuple[float, float] = (0.0, 0.0)  # extra latency of those, uniform range
    link_efficiency_sd: float = 0.0  # relative spread of each link's bandwidth efficiency
    efa_latency_sigma: float = 0.0  # lognormal sigma of each EFA port's latency multiplier
    efa_share_sd: float = 0.0  # spread of a port's share of its node's EFA traffic (node total kept)
    site_retrans_per_s: tuple[float, ...] = ()  # healthy retransmit trickle by site (cycled); () = FleetParams'
    efa_retrans_sigma: float = 0.0  # lognormal sigma of each port's trickle around its site's (median 1)
    chip_efficiency_sd: float = 0.0  # relative spread of a chip's speed (silicon, HBM)
    # Per-tick noise.
    noise_dof: float = 0.0  # Student-t degrees of freedom of gauge jitter; 0 = Gaussian (ideal)
    spike_per_s: float = 0.0  # spikes, dips and bursts per entity-second; 0 = FleetParams.burst_prob a tick
    spike_s: tuple[float, float] = (0.0, 0.0)  # how long a latency spike or bandwidth dip lasts, uniform
    interval_averaged: bool = False  # gauges average over the tick: noise / sqrt(tick_s), spikes diluted
    link_bw_utilised: bool = False  # NeuronLink bandwidth is the interval average, not the in-collective rate
    # Publishers' clocks and agents.
    sample_phase_frac: float = 0.0  # each node samples at a fixed phase in [0, this) of the tick
    sample_jitter_frac: float = 0.0  # plus this much jitter (standard deviation, share of a tick)
    sample_jitter_s: float = 0.0  # and this much more, in seconds (a timer's jitter does not scale with the tick)
    resets_per_node_day: float = 0.0  # node agent restarts: its counters start again from zero
    clock_skew_s: float = 0.0  # each agent's clock is off by a fixed U(-this, this), seconds: its timestamps too
    # Traffic within a step: NeuronLink and EFA bytes run this many times faster in the step's collectives than
    # while the chips compute (sim/stepcycle.py); 1 = flat, each interval's bytes its mean rate x its length.
    step_swing: float = 1.0
    # The fleet's shape (``fleet``): what a benchmark builds for this profile.
    efa_ports_per_node: int = 0  # 0: the hardware's
    sites: int = 1  # the UltraServers split over this many sites
    partial_every: int = 0  # every this-many-th UltraServer is partial (0: none) ...
    partial_nodes: tuple[int, ...] = ()  # ... with these many nodes present, cycled
    job_mix: bool = False  # the fleet runs the simulator's job mix (FleetParams jobs="mix")

    @property
    def tick_aligned(self) -> bool:
        """Return True if every node samples exactly on the tick."""
        return self.sample_phase_frac == 0.0 and self.sample_jitter_frac == 0.0 and self.sample_jitter_s == 0.0

    def fleet(self, ultraservers: int, *, name: str, efa_ports_per_node: int = TRN2.efa_ports_per_node) -> Topology:
        """Return a fleet of ``ultraservers`` UltraServers in this profile's shape.

        Sites split the UltraServers as evenly as they go (at least one each);
        a partial UltraServer keeps its first nodes and lacks the rest, as an
        inventory that lists only the nodes a capacity block holds.  The
        profile's EFA port count wins over ``efa_ports_per_node`` (the
        hardware's, given by the caller).  Raises ConfigError for a bad size.
        """
        sites = max(1, min(self.sites, ultraservers))
        per_site = [ultraservers // sites + (s < ultraservers % sites) for s in range(sites)]
        nodes_per_us = TRN2.nodes_per_ultraserver
        present = np.ones(ultraservers * nodes_per_us, dtype=bool)
        if self.partial_every and self.partial_nodes:
            partial = np.arange(self.partial_every - 1, ultraservers, self.partial_every)
            for i, us in enumerate(partial):
                present[us * nodes_per_us + self.partial_nodes[i % len(self.partial_nodes)]:
                        (us + 1) * nodes_per_us] = False
        return build_sites(per_site, name=name, efa_ports_per_node=self.efa_ports_per_node or efa_ports_per_node,
                           node_present=present)


PROFILES: Final[dict[str, Profile]] = {
    "ideal": Profile(name="ideal"),
    "realistic": Profile(
        name="realistic",
        # Most links of a kind share a path length within a few %; a few run
        # through an extra retimer or a longer cable between racks, and a
        # fixed-cost hop on a ~1.5-2.5 us link adds tens of %.
        link_latency_sigma=0.05,
        link_latency_long_share=0.03,
        link_latency_long_extra=(0.40, 0.60),
        # SerDes tuning and lane margins differ per cable: a few % of payload
        # bandwidth (the links' mean stays FleetParams.link_bw_efficiency).
        link_efficiency_sd=0.02,
        # An EFA port's latency is mostly switch hops and queues on its path
        # through the network: ports reach the spine at different distances.
        efa_latency_sigma=0.25,
        # Flow hashing over a node's ports is not perfectly even: about +-5-10 %.
        efa_share_sd=0.05,
        # CorrOpt (docs/calibration.md): corruption differs from link to link and
        # is stable over time; sites differ in optics and cabling generation.
        site_retrans_per_s=(0.2, 0.8, 0.4),
        efa_retrans_sigma=0.7,
        # Binning leaves a fraction of a % between parts of one SKU.
        chip_efficiency_sd=0.003,
        # Heavy tails: occasional samples many sigmas out, as contention makes them.
        noise_dof=4.0,
        # Five times the ideal fleet's 1e-3 a tick at 1 s: short contention
        # moments, each 0.1-1 s long.
        spike_per_s=5e-3,
        spike_s=(0.1, 1.0),
        interval_averaged=True,
        # A link counter over the interval sees the whole step, not only the
        # collectives: nominal x efficiency x communication share x pace.
        link_bw_utilised=True,
        # Node agents start at arbitrary moments and their timers jitter.
        sample_phase_frac=0.9,
        sample_jitter_frac=0.02,
        # About one agent restart (upgrade, crash, reboot) per node a day; the
        # monotonic counters then restart from zero, as Prometheus assumes.
        resets_per_node_day=1.0,
    ),
}
PROFILES["training"] = replace(
    PROFILES["realistic"],
    name="training",
    # An independent publisher (issue 22) ran its agents like this: each agent's clock within +-1.5 s of the
    # truth (NTP-disciplined hosts keep milliseconds; a host whose chrony lost its source, or an agent stamping
    # with a VM's drifting clock, seconds: an assumption at the pessimistic end), each sampling at its own
    # phase with 25 ms of timer jitter (a Python asyncio timer on a busy host: an assumption).
    sample_jitter_frac=0.0,
    sample_jitter_s=0.025,
    clock_skew_s=1.5,
    # Collectives are bursts: ~25 % of a step (FleetParams.comm_share) carries the step's traffic at line rate,
    # the rest nearly nothing (pipeline sends, parameter prefetch).  x16 between the two is the swing the
    # independent publisher used; no public trace of Trainium2 training traffic gives the figure (an assumption).
    step_swing=16.0,
    # The fleet's shape: 3 sites, every fourth UltraServer partial (3 or 2 of its 4 nodes: a node out for repair,
    # a capacity block that does not fill it) and 8 EFA ports a node (an instance type or an inventory that
    # exposes half the 16 ports), as the independent publisher's inventory had.
    efa_ports_per_node=8,
    sites=3,
    partial_every=4,
    partial_nodes=(3, 2),
    # Jobs come and go, checkpoint, evaluate and restart, and some UltraServers idle (sim/workload.py, JobMix).
    job_mix=True,
)
