"""The Prometheus metrics: collectors and text-rendered families over the
monitor's frozen snapshot, under one registry that times each producer.  What
serves them is the HTTP edge's business (``rainierd.http``), which knows none
of them: ``/metrics`` is a route the roles register on it (``route``).
"""

from __future__ import annotations

from rainierd.exporter.entities import DetectionCollector, EntityFamilies
from rainierd.exporter.exposition import family_head
from rainierd.exporter.fleet import FleetCollector, ShardCollector
from rainierd.exporter.loss import goodput
from rainierd.exporter.registry import BuildInfoCollector, Exporter, build_registry
from rainierd.exporter.route import MetricsRoute, route_metrics_and_probes
from rainierd.exporter.wiring import build_exporter

__all__ = [
    "BuildInfoCollector",
    "DetectionCollector",
    "EntityFamilies",
    "Exporter",
    "FleetCollector",
    "MetricsRoute",
    "ShardCollector",
    "build_exporter",
    "build_registry",
    "family_head",
    "goodput",
    "route_metrics_and_probes",
]
