"""The air the simulated fleet breathes: each site's outside temperature over
the day and each node's inlet air, from which the fleet model derives chip
temperatures, fan speeds and when the facility's water assist runs.

Coolest about 03:00, warmest about 15:00; each site and node keeps a static
offset drawn once from the model's generator.
"""

from __future__ import annotations

import numpy as np

from rainierd._types import F64
from rainierd.fleet import Topology
from rainierd.sim.params import FleetParams


class Climate:
    """Outside and inlet air of one fleet, as a function of simulated time."""

    def __init__(self, topology: Topology, params: FleetParams, rng: np.random.Generator) -> None:
        self.topology, self.params = topology, params
        self._node_inlet_offset_c = rng.normal(0.0, 0.5, topology.n_nodes)
        self._site_outside_offset_c = rng.normal(0.0, 2.0, topology.n_sites)

    @staticmethod
    def day_phase(sim_s: float) -> float:
        """Return where ``sim_s`` is in the day's swing: -1 at the coolest (03:00), 1 at the warmest (15:00)."""
        return float(np.sin(2.0 * np.pi * ((sim_s / 86_400.0) - 0.375)))

    def outside_c(self, sim_s: float) -> F64:
        """Return each site's outside air temperature at ``sim_s``."""
        p = self.params
        swing = p.outside_diurnal_amp_c * self.day_phase(sim_s)
        return np.asarray(p.outside_mean_c + self._site_outside_offset_c + swing, dtype=np.float64)

    def inlet_c(self, sim_s: float) -> F64:
        """Return each node's inlet air temperature at ``sim_s``: outside air, held between 18 and 27 degrees."""
        site_inlet = np.clip(self.outside_c(sim_s) + 4.0, 18.0, 27.0)
        return np.asarray(site_inlet[self.topology.node_site] + self._node_inlet_offset_c, dtype=np.float64)
