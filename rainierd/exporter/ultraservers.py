"""The part of a scrape that grows with the fleet, rendered straight to
exposition text: the per-UltraServer families (FP8 throughput, and the raw
telemetry's max, mean and counter sums; 18 x 7,800 series at Rainier scale).

prometheus-client builds a Python object per sample and takes about 10 us a
series to render; these families are fixed label sets over numpy arrays, so
their label blocks are built once and each render only formats the values
(``repr`` of a float is the same text prometheus-client writes).  Gauges
that come from float32 telemetry are rounded to what float32 holds, so
``71.3`` is not written ``71.30000305175781``; an unknown value (NaN: no
fresh chip or node knows it) has no series.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

import numpy as np

from rainierd._types import F64, I64
from rainierd.exporter.exposition import family_head
from rainierd.fleet import Topology
from rainierd.monitor import MonitorSnapshot

_LEVELS = ("peak", "delivered", "effective")


class Family(NamedTuple):
    """One aggregate family: its name after the level prefix, help, type, and how to read and round it."""

    name: str
    help: str
    kind: str
    field: str
    stat: str  # "max", "mean" or "sum" (a counter)
    decimals: int | None  # round to this many decimals (None: as is)
    scale: float = 1.0


AGGREGATE_FAMILIES: Final = (
    Family("chip_max_temperature_celsius", "Hottest chip's temperature", "gauge", "temp_c", "max", 2),
    Family("chip_mean_temperature_celsius", "Mean chip temperature", "gauge", "temp_c", "mean", 2),
    Family("chip_max_power_watts", "Largest chip power", "gauge", "power_w", "max", 1),
    Family("chip_mean_power_watts", "Mean chip power", "gauge", "power_w", "mean", 1),
    Family("chip_max_hbm_used_bytes", "Largest HBM in use on one chip", "gauge", "hbm_used_bytes", "max", 0),
    Family("chip_mean_hbm_used_bytes", "Mean HBM in use per chip", "gauge", "hbm_used_bytes", "mean", 0),
    Family("chip_ecc_corrected_errors_total", "Corrected ECC errors of its chips (monotonic: increases summed)",
           "counter", "ecc_corrected_total", "sum", None),
    Family("chip_ecc_uncorrected_errors_total",
           "Uncorrected ECC errors of its chips (monotonic: increases summed)", "counter", "ecc_uncorrected_total",
           "sum", None),
    Family("node_max_inlet_temperature_celsius", "Warmest node inlet air", "gauge", "inlet_c", "max", 2),
    Family("node_mean_inlet_temperature_celsius", "Mean node inlet air", "gauge", "inlet_c", "mean", 2),
    Family("node_max_outlet_temperature_celsius", "Warmest node outlet air", "gauge", "outlet_c", "max", 2),
    Family("node_mean_outlet_temperature_celsius", "Mean node outlet air", "gauge", "outlet_c", "mean", 2),
    Family("node_max_fan_rpm", "Fastest node fan speed", "gauge", "fan_rpm", "max", 0),
    Family("node_mean_fan_rpm", "Mean node fan speed", "gauge", "fan_rpm", "mean", 0),
    Family("fp8_flop_total", "FP8 FLOP executed by its chips (monotonic: increases summed)", "counter",
           "fp8_flop_total", "sum", None),
)
"""The raw telemetry's aggregates, per UltraServer (``rainier_ultraserver_…``) and per site (``rainier_site_…``),
over fresh chips and nodes (exporter/fleet.py renders the site ones)."""


def family_values(family: Family, snap: MonitorSnapshot, level: str) -> F64 | None:
    """Return ``family``'s values at ``level`` (``ultraserver`` or ``site``), rounded, or None before any."""
    aggregates = snap.aggregates
    if aggregates is None:
        return None
    if family.stat == "sum":
        counters = aggregates.ultraserver_counters if level == "ultraserver" else aggregates.site_counters
        return counters[family.field] * family.scale
    extremes = aggregates.gauges[family.field]
    values: F64 = getattr(extremes, f"{level}_{family.stat}") * family.scale
    return values if family.decimals is None else np.round(values, family.decimals)


class UltraServerFamilies:
    """Renders the per-UltraServer families for every UltraServer."""

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *,
        ultraservers: I64 | None = None,
    ) -> None:
        self._snapshot = snapshot
        names = topology.names
        # A shard renders its own UltraServers only (None: every one).
        self._ids = ultraservers
        ids = range(topology.n_ultraservers) if ultraservers is None else ultraservers.tolist()
        self._labels = [f'{{site="s{site}",ultraserver="u{us}"{names.site_label(site)}{names.ultraserver_label(us)}}} '
                        for us, site in ((us, int(topology.ultraserver_site[us])) for us in ids)]
        self._prefixes = {level: [f"rainier_ultraserver_fp8_{level}_flops{lb}" for lb in self._labels]
                          for level in _LEVELS}
        self._aggregates = {f.name: [f"rainier_ultraserver_{f.name}{lb}" for lb in self._labels]
                            for f in AGGREGATE_FAMILIES}

    def _take(self, values: F64) -> F64:
        return values if self._ids is None else values[self._ids]

    @property
    def series(self) -> int:
        """Return how many series a render holds at most (every aggregate known)."""
        return len(self._labels) * (len(_LEVELS) + len(AGGREGATE_FAMILIES))

    def render(self) -> bytes:
        """Return the families as exposition text (empty before the first snapshot)."""
        snap = self._snapshot()
        if snap is None:
            return b""
        parts = []
        tp = snap.throughput
        # Delivered and effective over the chips that know them, none where no chip does (core/throughput.py).
        levels = {"peak": tp.ultraserver_peak, "delivered": tp.shown("delivered", "ultraserver"),
                  "effective": tp.shown("effective", "ultraserver")}
        for level, values in levels.items():
            name = f"rainier_ultraserver_fp8_{level}_flops"
            parts.append(family_head(name, f"UltraServer FP8 {level} throughput, dense FLOP/s."))
            parts.append(_known_lines(self._prefixes[level], self._take(values)))
        for family in AGGREGATE_FAMILIES:
            values_or_none = family_values(family, snap, "ultraserver")
            if values_or_none is None:
                break
            name = f"rainier_ultraserver_{family.name}"
            # Text format 0.0.4: HELP and TYPE name the samples, ``_total`` included.
            parts.append(family_head(name, f"{family.help}, per UltraServer.", family.kind))
            parts.append(_known_lines(self._aggregates[family.name], self._take(values_or_none)))
        return "".join(parts).encode()


def _known_lines(prefixes: list[str], values: F64) -> str:
    """Return one exposition line a known value (its prefix, then the value), none for a NaN (unknown)."""
    known = np.flatnonzero(~np.isnan(values))
    if known.size == len(prefixes):
        return "\n".join(map(str.__add__, prefixes, map(repr, values.tolist()))) + "\n"
    lines = "\n".join(prefixes[i] + repr(v) for i, v in zip(known.tolist(), values[known].tolist(), strict=True))
    return lines + "\n" if known.size else ""
