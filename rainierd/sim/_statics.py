"""Per-entity properties that a profile fixes for a model's lifetime: each link's
latency and efficiency, each port's latency, traffic share and retransmit
trickle, each chip's speed, each node's sampling phase and its agent's clock offset.

They are drawn from their own generator, derived from the model's seed, so
that the per-tick stream of the ideal profile stays what it always was.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd.fleet import Topology
from rainierd.sim.profile import Profile

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

# A grandchild index that no spawn of a seed's children reaches in practice.
_STATIC_SPAWN_KEY: Final = 0x57A71C


def static_rng(rng: np.random.Generator, key: int = _STATIC_SPAWN_KEY) -> np.random.Generator:
    """Return a generator for static draws, derived from ``rng``'s seed without drawing from ``rng``.

    ``key`` names the stream: another key (the job mix's) gives another generator of the same seed.
    """
    seq = rng.bit_generator.seed_seq
    if isinstance(seq, np.random.SeedSequence):
        return np.random.default_rng(
            np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, key)),
        )
    # A generator built from bare state has no seed sequence: seed from a copy's next value.
    return np.random.default_rng([int(copy.deepcopy(rng.bit_generator).random_raw()), key])


@dataclass(frozen=True, eq=False)
class Statics:
    """Static multipliers per entity; all ones (and on-tick sampling) for the ideal profile."""

    link_latency: F32  # multiplies the link kind's latency
    link_efficiency: F32  # multiplies FleetParams.link_bw_efficiency
    efa_latency: F64  # multiplies FleetParams.efa_latency_us
    efa_share: F64  # each port's share of its node's traffic, mean 1 over the node's ports
    efa_retrans_per_s: F64  # each port's healthy retransmit trickle, packets a second
    chip_util_scale: F64  # busy share of a chip relative to its group's slowest (<= 1)
    node_phase_s: F64  # when each node samples within the tick
    node_clock_offset_s: F64  # how far each node's agent's clock is off: its timestamps minus the true time

    @classmethod
    def draw(
        cls,
        profile: Profile,
        topo: Topology,
        rng: np.random.Generator,
        *,
        base_retrans_per_s: float,
        tick_s: float,
        chip_group: npt.NDArray[np.int64],
    ) -> Statics:
        """Return the static properties ``profile`` gives every entity of ``topo``."""
        p = profile
        link_latency = rng.lognormal(0.0, p.link_latency_sigma, topo.n_links)
        long = rng.random(topo.n_links) < p.link_latency_long_share
        link_latency[long] *= 1.0 + rng.uniform(*p.link_latency_long_extra, int(long.sum()))
        link_efficiency = 1.0 + rng.normal(0.0, p.link_efficiency_sd, topo.n_links)
        efa_latency = rng.lognormal(0.0, p.efa_latency_sigma, topo.n_efa)
        share = np.clip(1.0 + rng.normal(0.0, p.efa_share_sd, topo.n_efa), 0.5, 1.5).reshape(topo.n_nodes, -1)
        share /= share.mean(axis=1, keepdims=True)
        site_rates = np.asarray(p.site_retrans_per_s or (base_retrans_per_s,), dtype=np.float64)
        port_site = topo.node_site[topo.efa_node]
        retrans = site_rates[port_site % site_rates.size] * rng.lognormal(0.0, p.efa_retrans_sigma, topo.n_efa)
        speed = 1.0 + rng.normal(0.0, p.chip_efficiency_sd, topo.n_chips)
        # Groups are consecutive chip ranges numbered from 0: reduce each range, then spread it back.
        starts = np.flatnonzero(np.r_[True, np.diff(chip_group) != 0])
        slowest = np.minimum.reduceat(speed, starts)[chip_group]
        return cls(
            link_latency=link_latency.astype(np.float32),
            link_efficiency=np.clip(link_efficiency, 0.5, None).astype(np.float32),
            efa_latency=efa_latency,
            efa_share=share.ravel(),
            efa_retrans_per_s=retrans,
            chip_util_scale=slowest / speed,
            node_phase_s=rng.uniform(0.0, p.sample_phase_frac * tick_s, topo.n_nodes),
            # Drawn last, so that the draws above are what they were before clocks had offsets.
            node_clock_offset_s=rng.uniform(-p.clock_skew_s, p.clock_skew_s, topo.n_nodes),
        )
