"""The Prometheus edge: collectors over the monitor's snapshot and stats, the
drill-down probe of one UltraServer, and the HTTP server that exposes them
with health probes.
"""

from __future__ import annotations

from rainierd.exporter.collectors import (
    BuildInfoCollector,
    FleetCollector,
    MonitorCollector,
    build_registry,
)
from rainierd.exporter.health import EntityFamilies, HealthCollector
from rainierd.exporter.http import Health, MetricsServer
from rainierd.exporter.probe import UltraServerProbe
from rainierd.exporter.snapshot import MonitorSnapshot

__all__ = [
    "BuildInfoCollector",
    "EntityFamilies",
    "FleetCollector",
    "Health",
    "HealthCollector",
    "MetricsServer",
    "MonitorCollector",
    "MonitorSnapshot",
    "UltraServerProbe",
    "build_registry",
]
