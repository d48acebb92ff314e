"""FP8 throughput of the fleet from its state: peak, delivered and effective
FLOP/s per chip, summed per UltraServer, site and fleet.

* peak: the chip's dense FP8 figure, for every chip in the topology;
* delivered: peak x utilisation x clock ratio, what the chip says it is doing;
* effective: the FP8 FLOP the chip actually executed per second, from the
  difference of its last two FLOP counter samples (its delivered figure until
  it has two samples, or when its counter restarted).

A chip whose last sample is older than ``stale_after_ticks`` ticks counts in
peak but delivers nothing.  The synchronous-group model (a group runs at its
slowest member's pace, its collectives at its slowest link's) and lost FLOP/s
by cause plug in here; see docs/throughput-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rainierd.core.state import FleetState

__all__ = ["Throughput", "compute_throughput"]

F64 = npt.NDArray[np.float64]


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
    stale_after_ticks: int,
) -> Throughput:
    """Return the FP8 throughput implied by the state at its latest tick."""
    topo, chips = state.topology, state.chips
    fresh = (chips.tick >= 0) & ~state.stale_chips(stale_after_ticks)
    cur, prev = chips.cur, chips.prev
    delivered = np.where(
        fresh, peak_flops_per_chip * cur["util"].astype(np.float64) * cur["clock_ratio"], 0.0
    )
    dt = chips.t_s - chips.prev_t_s  # NaN until a chip has two samples
    dflop = cur["fp8_flop_total"] - prev["fp8_flop_total"]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = dflop / dt
    # Until a chip has two samples, or after its counter went backwards (a
    # publisher restart), it has no measured rate: its delivered figure stands
    # in, so a monitor that just started does not report a fleet at 7 %.
    countable = fresh & (dt > 0) & (dflop >= 0)
    effective = np.where(countable, rate, delivered)

    chip_us = topo.chip_ultraserver
    n_us = topo.n_ultraservers
    us_peak = np.full(n_us, peak_flops_per_chip * topo.chips_per_node * topo.nodes_per_ultraserver)
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
