"""The Prometheus edge: collectors and text families over the monitor's
frozen snapshot, the drill-down of one UltraServer, and the HTTP server that
exposes them with the health probes.
"""

from __future__ import annotations

from rainierd.exporter.drilldown import UltraServerProbe
from rainierd.exporter.entities import DetectionCollector, EntityFamilies
from rainierd.exporter.fleet import FleetCollector, ShardCollector
from rainierd.exporter.http import MetricsServer
from rainierd.exporter.registry import BuildInfoCollector, Exporter, build_registry
from rainierd.exporter.wiring import build_exporter

__all__ = [
    "BuildInfoCollector",
    "DetectionCollector",
    "EntityFamilies",
    "Exporter",
    "FleetCollector",
    "MetricsServer",
    "ShardCollector",
    "UltraServerProbe",
    "build_exporter",
    "build_registry",
]
