"""FP8 throughput of the fleet from its state: peak, delivered and effective
FLOP/s per chip, summed per UltraServer, site and fleet.

* peak: the chip's dense FP8 figure, for every chip in the topology;
* delivered: peak x utilisation x clock ratio, what the chip says it is doing;
* effective: the FP8 FLOP the chip actually executed per second, the rate of
  its FLOP counter over its last interval (its delivered figure until it has
  two samples, or when its counter restarted).

A chip the monitor has not heard from within ``stale_after_s`` (on its
listening clock) counts in peak but delivers nothing.  The synchronous-group model (a group runs at its
slowest member's pace, its collectives at its slowest link's) and lost FLOP/s
by cause plug in here; see docs/throughput-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rainierd._types import F64
from rainierd.core.state import FleetState

__all__ = ["Throughput", "compute_throughput"]


@dataclass(frozen=True, eq=False)
class Throughput:
    """FP8 FLOP/s at every level of the fleet for one analysis tick."""

    tick: int
    chip_fresh: npt.NDArray[np.bool_]
    chip_delivered: F64
    chip_effective: F64
    ultraserver_peak: F64
    ultraserver_delivered: F64
    ultraserver_effective: F64
    site_peak: F64
    site_delivered: F64
    site_effective: F64

    @property
    def fleet_peak(self) -> float:
        """Return the fleet's peak FP8 FLOP/s."""
        return float(self.site_peak.sum())

    @property
    def fleet_delivered(self) -> float:
        """Return the fleet's delivered FP8 FLOP/s."""
        return float(self.site_delivered.sum())

    @property
    def fleet_effective(self) -> float:
        """Return the fleet's effective FP8 FLOP/s."""
        return float(self.site_effective.sum())

    @property
    def chips_fresh(self) -> int:
        """Return how many chips reported recently enough to count."""
        return int(self.chip_fresh.sum())


def _sum_by(group: npt.NDArray[np.int64], values: F64, n: int) -> F64:
    return np.bincount(group, weights=values, minlength=n).astype(np.float64, copy=False)


def compute_throughput(
    state: FleetState,
    *,
    peak_flops_per_chip: float,
    stale_after_s: float,
) -> Throughput:
    """Return the FP8 throughput implied by the state at ``state.now_s``."""
    topo, chips = state.topology, state.chips
    fresh = state.fresh(chips, stale_after_s)
    delivered = chips.gauges["util"].astype(np.float64)
    delivered *= chips.gauges["clock_ratio"]
    delivered *= peak_flops_per_chip
    # A chip that is silent, or whose utilisation or clock is unknown, delivers
    # nothing the monitor can vouch for.
    delivered[~fresh | np.isnan(delivered)] = 0.0
    rate = chips.rates["fp8_flop_total"]
    # Until a chip has two samples, or after its counter went backwards (a
    # publisher restart), it has no measured rate: its delivered figure stands
    # in, so a monitor that just started does not report a fleet at 7 %.
    with np.errstate(invalid="ignore"):
        countable = fresh & (rate >= 0)
    effective = np.where(countable, rate, delivered)

    chip_us = topo.chip_ultraserver
    n_us = topo.n_ultraservers
    # Peak counts the chips that exist: an inventory's UltraServer may have fewer than 4 nodes.
    us_peak = topo.node_present.reshape(n_us, -1).sum(axis=1) * (peak_flops_per_chip * topo.chips_per_node)
    us_delivered = _sum_by(chip_us, delivered, n_us)
    us_effective = _sum_by(chip_us, effective, n_us)

    def per_site(values: F64) -> F64:
        return _sum_by(topo.ultraserver_site, values, topo.n_sites)

    return Throughput(
        tick=state.latest_tick,
        chip_fresh=fresh,
        chip_delivered=delivered,
        chip_effective=effective,
        ultraserver_peak=us_peak,
        ultraserver_delivered=us_delivered,
        ultraserver_effective=us_effective,
        site_peak=per_site(us_peak),
        site_delivered=per_site(us_delivered),
        site_effective=per_site(us_effective),
    )
