"""The exporter as the monitor wires it, in one place: the registry of
collectors and the text-rendered families, so the daemon, the scrape
benchmark and the golden-scrape test serve the same /metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from rainierd.core.ingest import IngestStats
from rainierd.exporter.collectors import FleetCollector, MonitorCollector, build_registry
from rainierd.exporter.fast import UltraServerFamilies
from rainierd.exporter.health import EntityFamilies, HealthCollector
from rainierd.exporter.snapshot import MonitorSnapshot
from rainierd.status import BacklogState, CheckpointState, ConnectionState, LagHistogram
from rainierd.topology import Topology

__all__ = ["Exporter", "build_exporter"]


@dataclass(frozen=True, eq=False)
class Exporter:
    """A registry plus the families rendered straight to text after it."""

    registry: CollectorRegistry
    extra: Callable[[], bytes]


def build_exporter(
    topology: Topology,
    snapshot: Callable[[], MonitorSnapshot | None],
    *,
    stats: IngestStats,
    connection: ConnectionState,
    backlog: BacklogState | None = None,
    lag: LagHistogram | None = None,
    loop_lag: Callable[[], float] | None = None,
    loop_lag_histogram: LagHistogram | None = None,
    checkpoint: CheckpointState | None = None,
    max_entity_series: int = 1_000,
    process_metrics: bool = True,
) -> Exporter:
    """Return the monitor's exporter over ``snapshot``.

    The fleet's figures (throughput, chips reporting, health) appear only once
    an analysis has applied telemetry: a monitor that has just started, or
    has heard nothing yet, exports them absent, never as a fleet of zeros
    that dashboards and alerts would take for a dead fleet.
    """

    def computed() -> MonitorSnapshot | None:
        snap = snapshot()
        return snap if snap is not None and snap.throughput.tick >= 0 else None

    entities = EntityFamilies(topology, computed, max_series=max_entity_series)
    ultraservers = UltraServerFamilies(topology, computed)
    registry = build_registry({
        "fleet": FleetCollector(topology, computed),
        "monitor": MonitorCollector(stats, snapshot, connection, loop_lag, backlog=backlog, lag=lag,
                                    loop_lag_histogram=loop_lag_histogram, checkpoint=checkpoint),
        "health": HealthCollector(computed, dropped=lambda: entities.dropped),
    }, process_metrics=process_metrics)
    return Exporter(registry, lambda: ultraservers.render() + entities.render())
