"""The exporter as the monitor wires it, in one place: the registry of
collectors and the text-rendered families, so the daemon, the scrape
benchmark and the golden-scrape test serve the same /metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry

from rainierd.core.ingest import IngestStats
from rainierd.exporter.collectors import FleetCollector, MonitorCollector, ShardCollector, build_registry
from rainierd.exporter.fast import UltraServerFamilies
from rainierd.exporter.health import EntityFamilies, HealthCollector
from rainierd.exporter.snapshot import MonitorSnapshot
from rainierd.shards import shard_view
from rainierd.status import BacklogState, CheckpointState, ConnectionState, LagHistogram
from rainierd.topology import Topology
from rainierd.wire.topics import WHOLE_FLEET, Shard

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
    shard: Shard = WHOLE_FLEET,
) -> Exporter:
    """Return the monitor's exporter over ``snapshot``, of ``shard``'s share of ``topology``.

    A shard exports its own UltraServers, nodes and links, its sites'
    facility figures (``Shard.owns_site_facility``), and its share of every
    fleet and site total; the recording rules add the shards up.

    The fleet's figures (throughput, chips reporting, health) appear only once
    an analysis has applied telemetry: a monitor that has just started, or
    has heard nothing yet, exports them absent, never as a fleet of zeros
    that dashboards and alerts would take for a dead fleet.
    """

    def computed() -> MonitorSnapshot | None:
        snap = snapshot()
        return snap if snap is not None and snap.throughput.tick >= 0 else None

    share = shard_view(topology, shard)
    entities = EntityFamilies(share, computed, max_series=max_entity_series)
    ours = None if shard.whole else np.flatnonzero(
        share.node_present.reshape(share.n_ultraservers, -1).any(axis=1)).astype(np.int64)
    ultraservers = UltraServerFamilies(share, computed, ultraservers=ours)
    facility = None if shard.whole else [shard.owns_site_facility(s) for s in range(topology.n_sites)]
    registry = build_registry({
        "fleet": FleetCollector(share, computed, facility_sites=facility),
        "shard": ShardCollector(shard, fleet_chips=topology.n_present_chips),
        "monitor": MonitorCollector(stats, snapshot, connection, loop_lag, backlog=backlog, lag=lag,
                                    loop_lag_histogram=loop_lag_histogram, checkpoint=checkpoint),
        "health": HealthCollector(computed, dropped=lambda: entities.dropped),
    }, process_metrics=process_metrics)
    return Exporter(registry, lambda: ultraservers.render() + entities.render())
