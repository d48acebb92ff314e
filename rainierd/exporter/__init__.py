"""The Prometheus edge: collectors over the monitor's snapshot and stats, and
the HTTP server that exposes them with health probes.
"""

from __future__ import annotations

from rainierd.exporter.collectors import (
    BuildInfoCollector,
    FleetCollector,
    MonitorCollector,
    MonitorSnapshot,
    build_registry,
)
from rainierd.exporter.http import Health, MetricsServer

__all__ = [
    "BuildInfoCollector",
    "FleetCollector",
    "Health",
    "MetricsServer",
    "MonitorCollector",
    "MonitorSnapshot",
    "build_registry",
]
