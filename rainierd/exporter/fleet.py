"""The fleet's figures as metrics: FP8 throughput of the fleet and its sites,
the sites' raw telemetry aggregates and facility (the per-UltraServer
families are text-rendered: ``ultraservers``), and which share of the fleet
this monitor watches.  Each collector takes its source as a callable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.exporter.ultraservers import AGGREGATE_FAMILIES, family_values
from rainierd.fleet import Topology
from rainierd.monitor import MonitorSnapshot
from rainierd.wire import Shard


class FleetCollector(Collector):
    """FP8 throughput of the fleet and its sites, and the sites' raw telemetry aggregates and facility
    (UltraServers: exporter/ultraservers.py)."""

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *,
        facility_sites: Sequence[bool] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._sites = [f"s{s}" for s in range(topology.n_sites)]
        self._site_names = list(topology.names.sites)
        # The sites whose facility frames this monitor takes (a shard: site % N); None: every site.
        self._facility_sites = facility_sites

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None:
            return
        tp = snap.throughput
        site_labels = ["site", "site_name"] if self._site_names else ["site"]
        # Delivered and effective over the chips that know them; no series where none of a level's chips does
        # (a fleet without clocks has no delivered figure): never a 0 that means unknown.
        levels = {"peak": (tp.fleet_peak, tp.site_peak),
                  "delivered": (float(tp.shown("delivered", "fleet")[0]), tp.shown("delivered", "site")),
                  "effective": (float(tp.shown("effective", "fleet")[0]), tp.shown("effective", "site"))}
        for level, (fleet_value, site_values) in levels.items():
            fleet = GaugeMetricFamily(f"rainier_fleet_fp8_{level}_flops",
                                      f"Fleet FP8 {level} throughput, dense FLOP/s.", labels=[])
            if not math.isnan(fleet_value):
                fleet.add_metric([], fleet_value)
            yield fleet
            site = GaugeMetricFamily(
                f"rainier_site_fp8_{level}_flops", f"Site FP8 {level} throughput, dense FLOP/s.", labels=site_labels,
            )
            for s, value in enumerate(site_values.tolist()):
                if not math.isnan(value):
                    site.add_metric([self._sites[s], *self._site_names[s:s + 1]], value)
            yield site
        unknown = GaugeMetricFamily(
            "rainier_fleet_fp8_unknown_chips", "Fresh chips whose FP8 figure is unknown (delivered: no utilisation "
            "or clock; effective: that, and no FLOP counter rate yet): left out of the figure's sum.",
            labels=["figure"])
        site_unknown = GaugeMetricFamily("rainier_site_fp8_unknown_chips", "Fresh chips whose FP8 figure is "
                                         "unknown, per site.", labels=[*site_labels, "figure"])
        for figure in ("delivered", "effective"):
            unknown.add_metric([figure], float(tp.unknown(figure, "fleet")[0]))
            for s, count in enumerate(tp.unknown(figure, "site").tolist()):
                site_unknown.add_metric([self._sites[s], *self._site_names[s:s + 1], figure], count)
        yield unknown
        yield site_unknown
        yield GaugeMetricFamily("rainier_fleet_chips", "Chips this monitor watches: the fleet's (its inventory's "
                                "nodes x 16), or its shard's share of them.",
                                value=snap.chips_total)
        yield GaugeMetricFamily(
            "rainier_fleet_chips_reporting",
            "Chips whose telemetry is fresh (within stale_after_ticks of the latest tick).",
            value=tp.chips_fresh,
        )
        yield from self._site_aggregates(snap)

    def _site_family(self, name: str, text: str, kind: str, values: list[float], *, facility: bool = False) -> Metric:
        labels = ["site", "site_name"] if self._site_names else ["site"]
        family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, text, labels=labels)
        owned = self._facility_sites if facility else None
        for s, value in enumerate(values):
            # Unknown: no series; another shard's site facility: that shard's series.
            if not math.isnan(value) and (owned is None or owned[s]):
                family.add_metric([self._sites[s], *self._site_names[s:s + 1]], value)
        return family

    def _site_aggregates(self, snap: MonitorSnapshot) -> Iterator[Metric]:
        aggregates = snap.aggregates
        if aggregates is None:
            return
        for family in AGGREGATE_FAMILIES:
            values = family_values(family, snap, "site")
            assert values is not None
            yield self._site_family(f"rainier_site_{family.name.removesuffix('_total')}", f"{family.help}, per site.",
                                    family.kind, values.tolist())
        yield CounterMetricFamily(
            "rainier_fleet_fp8_flop", "FP8 FLOP executed by the fleet's chips (monotonic: increases summed).",
            value=float(aggregates.site_counters["fp8_flop_total"].sum()),
        )
        yield self._site_family("rainier_site_outside_temperature_celsius", "Outside air at the site.", "gauge",
                                np.round(aggregates.site_outside_c, 2).tolist(), facility=True)
        yield self._site_family("rainier_site_cooling_water_assist", "1 while the site's cooling uses water "
                                "(evaporative assist), 0 on outside air alone.", "gauge",
                                aggregates.site_water_assist.tolist(), facility=True)
        yield self._site_family("rainier_site_water_cubic_meters", "Water the site's cooling used "
                                "(monotonic: increases summed).", "counter",
                                (aggregates.site_counters["water_l_total"] / 1e3).tolist(), facility=True)
        yield self._site_family("rainier_site_it_energy_joules", "Energy the site's IT equipment used "
                                "(monotonic: increases summed).", "counter",
                                aggregates.site_counters["it_energy_j_total"].tolist(), facility=True)


class ShardCollector(Collector):
    """Which share of the fleet this monitor watches, from its start (before any telemetry).

    The recording rules count the shards that report against the shards
    expected, and the chips of the whole fleet against the chips the
    reporting shards watch: a shard that is down is a share reported
    missing, never a share of healthy chips delivering nothing.
    """

    def __init__(self, shard: Shard, *, fleet_chips: int) -> None:
        self._shard, self._fleet_chips = shard, fleet_chips

    def collect(self) -> Iterator[Metric]:
        shards = GaugeMetricFamily(
            "rainier_shards", "Shards the fleet is split into, labelled with this monitor's shard (0 of 1: one "
            "monitor watches the whole fleet).", labels=["shard"],
        )
        shards.add_metric([str(self._shard.index)], self._shard.count)
        yield shards
        yield GaugeMetricFamily(
            "rainier_fleet_chips_inventory",
            "Chips in the whole fleet's inventory, every shard's share together (the same on every shard).",
            value=self._fleet_chips,
        )
