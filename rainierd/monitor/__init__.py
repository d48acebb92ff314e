"""The monitor role: subscribes to telemetry, analyses it once a tick with the
core, and publishes one frozen ``MonitorSnapshot`` per analysis for the
exporter and everything else that reads it (docs/architecture.md).
"""

from __future__ import annotations

from rainierd.admission import SharePolicy
from rainierd.monitor.clock import ListeningClock
from rainierd.monitor.loop import Monitor
from rainierd.monitor.snapshot import MonitorSnapshot, MonitorStatus

__all__ = [
    "ListeningClock",
    "Monitor",
    "MonitorSnapshot",
    "MonitorStatus",
    "SharePolicy",
]
