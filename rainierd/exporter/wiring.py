"""The exporter as the monitor wires it, in one place: the collectors and the
text-rendered families over the monitor's snapshot, so the daemon, the scrape
benchmark and the golden-scrape test serve the same /metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from prometheus_client.registry import Collector

from rainierd.exporter.actions import ActionsCollector
from rainierd.exporter.entities import DetectionCollector, EntityFamilies
from rainierd.exporter.fleet import FleetCollector, ShardCollector
from rainierd.exporter.jobs import JobFamilies
from rainierd.exporter.loss import LossCollector
from rainierd.exporter.registry import Exporter, build_registry
from rainierd.exporter.selfstatus import (
    AnalysisCollector,
    BacklogCollector,
    CheckpointCollector,
    IngestCollector,
    LoopCollector,
    MqttCollector,
)
from rainierd.exporter.ultraservers import UltraServerFamilies
from rainierd.fleet import Topology, shard_view
from rainierd.http.status import ServerCollector, ServerStatus
from rainierd.monitor import MonitorSnapshot
from rainierd.wire import WHOLE_FLEET, Shard


def build_exporter(
    topology: Topology,
    snapshot: Callable[[], MonitorSnapshot | None],
    *,
    max_entity_series: int = 1_000,
    max_jobs: int = 1_000,
    process_metrics: bool = True,
    shard: Shard = WHOLE_FLEET,
    server: Callable[[], ServerStatus | None] | None = None,
    extra: Mapping[str, Collector] | None = None,
) -> Exporter:
    """Return the monitor's exporter over ``snapshot``, of ``shard``'s share of ``topology``.

    Every family reads only the snapshot (the monitor's status included).
    A shard exports its own UltraServers, nodes and links, its sites'
    facility figures (``Shard.owns_site_facility``), and its share of every
    fleet and site total; the recording rules add the shards up.

    The fleet's figures (throughput, chips reporting, health) appear only once
    an analysis has applied telemetry: a monitor that has just started, or
    has heard nothing yet, exports them absent, never as a fleet of zeros
    that dashboards and alerts would take for a dead fleet.

    The jobs' families (exporter/jobs.py) export at most ``max_jobs`` jobs.

    With ``server`` (the HTTP server's ``ServerCounters.status``) it also
    exports the server's connections, drops and password checks.  ``extra``
    adds named collectors of the daemon's own (the webhook sink's counters).
    """

    def computed() -> MonitorSnapshot | None:
        snap = snapshot()
        return snap if snap is not None and snap.computed else None

    share = shard_view(topology, shard)
    entities = EntityFamilies(share, computed, max_series=max_entity_series)
    ours = None if shard.whole else np.flatnonzero(
        share.node_present.reshape(share.n_ultraservers, -1).any(axis=1)).astype(np.int64)
    facility = None if shard.whole else [shard.owns_site_facility(s) for s in range(topology.n_sites)]
    return build_registry({
        "fleet": FleetCollector(share, computed, facility_sites=facility),
        "shard": ShardCollector(shard, fleet_chips=topology.n_present_chips),
        "ingest": IngestCollector(snapshot),
        "backlog": BacklogCollector(snapshot),
        "checkpoint": CheckpointCollector(snapshot),
        "mqtt": MqttCollector(snapshot),
        "event_loop": LoopCollector(snapshot),
        "analysis": AnalysisCollector(snapshot),
        "detection": DetectionCollector(computed, dropped=lambda: entities.dropped),
        "loss": LossCollector(share, computed),
        "actions": ActionsCollector(computed),
        **({} if server is None else {"http": ServerCollector(server)}),
        **(extra or {}),
    }, texts={
        "ultraservers": UltraServerFamilies(share, computed, ultraservers=ours),
        "entities": entities,
        "jobs": JobFamilies(share, snapshot, max_jobs=max_jobs, whole_fleet=shard.whole),
    }, process_metrics=process_metrics)
