"""The one part of a scrape that grows with the fleet, rendered straight to
exposition text: the per-UltraServer FP8 families (3 x 7,800 series at
Rainier scale).

prometheus-client builds a Python object per sample and takes about 10 us a
series to render; these families are fixed label sets over numpy arrays, so
their label blocks are built once and each render only formats the values
(``repr`` of a float is the same text prometheus-client writes).
"""

from __future__ import annotations

from collections.abc import Callable

from rainierd.exporter.snapshot import MonitorSnapshot
from rainierd.topology import Topology

__all__ = ["UltraServerFamilies"]

_LEVELS = ("peak", "delivered", "effective")


class UltraServerFamilies:
    """Renders ``rainier_ultraserver_fp8_{peak,delivered,effective}_flops`` for every UltraServer."""

    def __init__(self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None]) -> None:
        self._snapshot = snapshot
        names = topology.names
        labels = [f'{{site="s{site}",ultraserver="u{us}"{names.site_label(site)}{names.ultraserver_label(us)}}} '
                  for us, site in enumerate(topology.ultraserver_site.tolist())]
        self._prefixes = {level: [f"rainier_ultraserver_fp8_{level}_flops{lb}" for lb in labels]
                          for level in _LEVELS}

    @property
    def series(self) -> int:
        """Return how many series a render holds."""
        return sum(len(p) for p in self._prefixes.values())

    def render(self) -> bytes:
        """Return the families as exposition text (empty before the first snapshot)."""
        snap = self._snapshot()
        if snap is None:
            return b""
        parts = []
        for level in _LEVELS:
            name = f"rainier_ultraserver_fp8_{level}_flops"
            values = map(repr, getattr(snap.throughput, f"ultraserver_{level}").tolist())
            parts.append(f"# HELP {name} UltraServer FP8 {level} throughput, dense FLOP/s.\n# TYPE {name} gauge\n")
            parts.append("\n".join(map(str.__add__, self._prefixes[level], values)))
            parts.append("\n")
        return "".join(parts).encode()
