"""FP8 throughput of the fleet from its state: peak, delivered and effective
FLOP/s per chip, summed per UltraServer, site and fleet.

* peak: the chip's dense FP8 figure, for every chip in the topology;
* delivered: peak x utilisation x clock ratio, what the chip says it is doing
  (at least what its counter says it executed, at most peak);
* effective: the FP8 FLOP the chip actually executed per second, the rate of
  its FLOP counter over its last interval (its delivered figure until it has
  two samples, or when its counter restarted), at most peak.

So every chip has ``effective <= delivered <= peak`` where it knows them,
and every level's sums keep that over chips that know both.

A chip the monitor has not heard from within ``stale_after_s`` (on its
listening clock) counts in peak but delivers nothing.  The synchronous-group model (a group runs at its
slowest member's pace, its collectives at its slowest link's) and lost FLOP/s
by cause plug in here; see docs/throughput-model.md.

Never invented: a fresh chip whose utilisation or clock is unknown (AWS
neuron-monitor reports no clock) has an unknown delivered figure, NaN, not 0
and not one at an assumed nominal clock; and until its counter has a rate its
effective figure is that unknown too.  Each level's figure is the sum over
its chips that know it, and counts the fresh chips that do not
(``*_unknown``); ``shown`` gives a level's figure as the surfaces show it,
NaN (no series, ``null``) where none of its fresh chips knows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64, B
from rainierd.core.state import FleetState

Figure = Literal["delivered", "effective"]


@dataclass(frozen=True, eq=False)
class Throughput:
    """FP8 FLOP/s at every level of the fleet for one analysis tick.

    Per-chip figures are NaN where unknown; each level's sum is over its chips
    that know the figure, with ``*_unknown`` the fresh chips that do not.
    """

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
    ultraserver_site: I64  # each UltraServer's site
    ultraserver_fresh: I64  # fresh chips of each UltraServer
    ultraserver_delivered_unknown: I64  # its fresh chips whose delivered figure is unknown
    ultraserver_effective_unknown: I64  # its fresh chips whose effective figure is unknown

    @property
    def fleet_peak(self) -> float:
        """Return the fleet's peak FP8 FLOP/s."""
        return float(self.site_peak.sum())

    @property
    def fleet_delivered(self) -> float:
        """Return the fleet's delivered FP8 FLOP/s over the chips that know it."""
        return float(self.site_delivered.sum())

    @property
    def fleet_effective(self) -> float:
        """Return the fleet's effective FP8 FLOP/s over the chips that know it."""
        return float(self.site_effective.sum())

    @property
    def chips_fresh(self) -> int:
        """Return how many chips reported recently enough to count."""
        return int(self.chip_fresh.sum())

    def unknown(self, figure: Figure, level: Literal["ultraserver", "site", "fleet"]) -> I64:
        """Return, per entity of ``level`` (one value for the fleet), its fresh chips whose ``figure`` is
        unknown."""
        per_us = getattr(self, f"ultraserver_{figure}_unknown")
        if level == "ultraserver":
            return np.asarray(per_us, np.int64)
        per_site = np.bincount(self.ultraserver_site, weights=per_us, minlength=self.site_peak.size).astype(np.int64)
        return per_site if level == "site" else np.asarray([per_site.sum()], np.int64)

    def shown(self, figure: Figure, level: Literal["ultraserver", "site", "fleet"]) -> F64:
        """Return ``figure`` per entity of ``level`` (one value for the fleet) as the surfaces show it: the sum
        over its chips that know it, NaN where it has fresh chips and none of them knows it (its silent chips'
        0 is then no figure of what it delivers)."""
        unknown = self.unknown(figure, level)
        fresh = self.ultraserver_fresh
        if level != "ultraserver":
            per_site = np.bincount(self.ultraserver_site, weights=fresh, minlength=self.site_peak.size).astype(np.int64)
            fresh = per_site if level == "site" else np.asarray([per_site.sum()], np.int64)
        values = getattr(self, f"{level}_{figure}") if level != "fleet" else np.asarray(
            [getattr(self, f"fleet_{figure}")])
        return np.where((unknown >= fresh) & (fresh > 0), np.nan, values).astype(np.float64)


def _sum_by(group: npt.NDArray[np.int64], values: F64, n: int) -> F64:
    return np.bincount(group, weights=values, minlength=n).astype(np.float64, copy=False)


def _sum_known(group: I64, values: F64, n: int) -> tuple[F64, I64, B]:
    """Return each group's sum of the finite ``values``, how many were NaN, and which were."""
    unknown = np.isnan(values)
    if not unknown.any():
        return _sum_by(group, values, n), np.zeros(n, np.int64), unknown
    return (_sum_by(group, np.where(unknown, 0.0, values), n),
            np.bincount(group[unknown], minlength=n).astype(np.int64), unknown)


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
    # Physics: no chip delivers more than its peak (NaN, unknown, stays unknown).
    np.minimum(delivered, peak_flops_per_chip, out=delivered)
    # A chip that is silent delivers nothing the monitor can vouch for (the model charges its group's stall to
    # stale telemetry); a fresh chip whose utilisation or clock is unknown has an unknown figure (NaN).
    delivered[~fresh] = 0.0
    rate = chips.rates["fp8_flop_total"]
    # Until a chip has two samples, or after its counter went backwards (a
    # publisher restart), it has no measured rate: its delivered figure stands
    # in, so a monitor that just started does not report a fleet at 7 %; and
    # where that is unknown too, so is its effective figure.  The counter's
    # rate is admitted up to a margin over peak (core/bounds.py: two
    # publishers' clocks never agree to the millisecond); what a chip executed
    # is at most its peak.
    with np.errstate(invalid="ignore"):
        countable = fresh & (rate >= 0)
    effective = np.where(countable, np.minimum(rate, peak_flops_per_chip), delivered)
    # What a chip executed it delivered: a utilisation sampled at one instant may read below the FLOP its
    # counter says ran over the interval, and delivered is then at least that (an unknown one stays unknown).
    np.maximum(delivered, effective, out=delivered)

    chip_us = topo.chip_ultraserver
    n_us = topo.n_ultraservers
    # Peak counts the chips that exist: an inventory's UltraServer may have fewer than 4 nodes.
    us_peak = topo.node_present.reshape(n_us, -1).sum(axis=1) * (peak_flops_per_chip * topo.chips_per_node)
    us_delivered, us_delivered_unknown, _ = _sum_known(chip_us, delivered, n_us)
    us_effective, us_effective_unknown, _ = _sum_known(chip_us, effective, n_us)

    def per_site(values: F64) -> F64:
        return _sum_by(topo.ultraserver_site, values, topo.n_sites)

    return Throughput(
        tick=state.latest_tick,
        chip_fresh=fresh,
        chip_delivered=delivered,
        chip_effective=effective,
        ultraserver_peak=us_peak.astype(np.float64),
        ultraserver_delivered=us_delivered,
        ultraserver_effective=us_effective,
        site_peak=per_site(us_peak.astype(np.float64)),
        site_delivered=per_site(us_delivered),
        site_effective=per_site(us_effective),
        ultraserver_site=np.asarray(topo.ultraserver_site, np.int64),
        ultraserver_fresh=np.bincount(chip_us[fresh], minlength=n_us).astype(np.int64),
        ultraserver_delivered_unknown=us_delivered_unknown,
        ultraserver_effective_unknown=us_effective_unknown,
    )
