"""The raw telemetry aggregated per UltraServer and per site: the max and mean
of chip temperature, power and HBM in use and of node inlet air, outlet air
and fan speed, and monotonic counters of FP8 FLOP, ECC errors, water and IT
energy.  These answer "why is cooling degraded?" with a graph while staying
within the cardinality budget: a fixed number of series per UltraServer and
per site, never one per chip (the drill-down, api/drilldown.py, serves one
UltraServer's chips on demand).

Why counters are accumulated here rather than summed: a sum of publishers'
totals falls whenever one publisher restarts, and Prometheus reads any fall
of a counter as a reset to zero, so one restarted chip among 500,000 would
show as the whole fleet's FLOP executed again.  ``CounterSums`` adds each
entity's increase since its previous sample instead, counting a fall as a
restart from zero (what ``rate()`` does) and nothing for an entity's first
sample, so the exported sums only ever grow and ``rate()`` over them is
right across restarts and scrape gaps.  The increases are taken as each
sample lands (``Table.take_increase``, state.COUNTER_SUMS), not from one
analysis to the next, so two samples of a chip in one window both count.

Gauges count only fresh entities (heard from within ``stale_after_s``): a
stale chip's last temperature is history, not the UltraServer's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd._types import F64, I64, B
from rainierd.core.state import COUNTER_SUMS, FleetState, Table
from rainierd.fleet import Topology

AGGREGATE_GAUGES: Final = (
    ("chips", "temp_c"), ("chips", "power_w"), ("chips", "hbm_used_bytes"),
    ("cooling", "inlet_c"), ("cooling", "outlet_c"), ("cooling", "fan_rpm"),
)
"""(table, field) of every gauge aggregated to a max and a mean per UltraServer and site."""

@dataclass(frozen=True, eq=False)
class Extremes:
    """Max and mean of one gauge over the fresh entities that know it (NaN where none do)."""

    ultraserver_max: F64
    ultraserver_mean: F64
    site_max: F64
    site_mean: F64


@dataclass(frozen=True, eq=False)
class Aggregates:
    """One analysis tick's aggregates (copies, safe to hand to another thread).

    ``gauges`` is keyed by field (``temp_c``, ``inlet_c``, …); ``counters``
    by counter field, per UltraServer for chip counters and per site for all.
    """

    gauges: dict[str, Extremes]
    ultraserver_counters: dict[str, F64]
    site_counters: dict[str, F64]
    site_outside_c: F64
    site_water_assist: F64  # 1 while the site's cooling uses water, 0 on outside air, NaN unknown


def _group_extremes(values: F64, valid: B, groups: int, ultraserver_site: I64, n_sites: int) -> Extremes:
    """Return max and mean of ``values`` laid out as ``groups`` equal runs (one per UltraServer)."""
    masked = np.where(valid, values, np.nan).reshape(groups, -1)
    counts = valid.reshape(groups, -1).sum(axis=1)
    totals = np.where(valid, values, 0.0).reshape(groups, -1).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        us_mean = totals / counts
    us_max = np.fmax.reduce(masked, axis=1)  # NaN only where a whole UltraServer is unknown
    site_max = np.full(n_sites, np.nan)
    np.fmax.at(site_max, ultraserver_site, us_max)
    site_counts = np.bincount(ultraserver_site, weights=counts, minlength=n_sites)
    site_totals = np.bincount(ultraserver_site, weights=totals, minlength=n_sites)
    with np.errstate(invalid="ignore", divide="ignore"):
        site_mean = site_totals / site_counts
    return Extremes(us_max, np.where(counts > 0, us_mean, np.nan), site_max,
                    np.where(site_counts > 0, site_mean, np.nan))


class CounterSums:
    """Monotonic sums of entity counters: each entity's increases since its previous sample, accumulated.

    An entity's first sample adds nothing (its publisher's lifetime total is
    not news); a total lower than the previous one is a restart, and adds the
    new total (counted from zero).  Unknown totals add nothing and keep the
    previous one for when the field returns (``Table.take_increase``).
    """

    def __init__(self, topology: Topology) -> None:
        self._topo = topology
        self.ultraserver = {name: np.zeros(topology.n_ultraservers) for table, name in COUNTER_SUMS
                            if table == "chips"}
        self.site = {name: np.zeros(topology.n_sites) for _table, name in COUNTER_SUMS}

    def update(self, state: FleetState) -> None:
        """Add every counter's increases since the last update."""
        topo = self._topo
        for table_name, name in COUNTER_SUMS:
            table: Table = getattr(state, table_name)
            increase = table.take_increase(name)
            if table_name == "chips":
                per_us = increase.reshape(topo.n_ultraservers, -1).sum(axis=1)
                self.ultraserver[name] += per_us
                self.site[name] += np.bincount(topo.ultraserver_site, weights=per_us, minlength=topo.n_sites)
            else:
                self.site[name] += increase


def aggregate(state: FleetState, sums: CounterSums, *, chip_fresh: B, stale_after_s: float) -> Aggregates:
    """Return this tick's aggregates of ``state`` (after ``sums.update``); ``chip_fresh`` as the throughput
    model judged it, nodes and sites by ``stale_after_s``."""
    topo = state.topology
    fresh = {"chips": chip_fresh & topo.chip_present,
             "cooling": state.fresh(state.cooling, stale_after_s) & topo.node_present}
    gauges = {}
    for table_name, name in AGGREGATE_GAUGES:
        table: Table = getattr(state, table_name)
        values = table.gauges[name].astype(np.float64)
        valid = fresh[table_name] & ~np.isnan(values)
        gauges[name] = _group_extremes(values, valid, topo.n_ultraservers, topo.ultraserver_site, topo.n_sites)
    facility = state.facility
    site_fresh = state.fresh(facility, stale_after_s)
    outside = np.where(site_fresh, facility.gauges["outside_c"], np.nan).astype(np.float64)
    mode = np.where(site_fresh, facility.gauges["cooling_mode"], np.nan).astype(np.float64)
    return Aggregates(
        gauges,
        {name: values.copy() for name, values in sums.ultraserver.items()},
        {name: values.copy() for name, values in sums.site.items()},
        outside, np.where(np.isnan(mode), np.nan, (mode > 0).astype(np.float64)),
    )
