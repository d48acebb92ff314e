"""The pure numpy core: fleet state, frame ingest and the throughput model.

Nothing here does I/O, reads a clock or touches asyncio; arrays and frozen
configuration go in, arrays and frozen dataclasses come out.
"""

from __future__ import annotations

from rainierd.core.aggregates import Aggregates
from rainierd.core.analysis import Analysis, DetailView, HealthView, MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.fleetloss import LostByCause
from rainierd.core.ingest import FlushResult, Ingest, IngestStats, Message, Received
from rainierd.core.jobmodel import CULPRIT_KINDS, JobLoss
from rainierd.core.jobphase import CHECKPOINT, PHASE_NAMES, RESTARTING, JobPhases
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.core.state import REFUSALS, FleetState, Table
from rainierd.core.streams import Streams
from rainierd.core.throughput import Throughput, compute_throughput

__all__ = [
    "CHECKPOINT",
    "CULPRIT_KINDS",
    "PHASE_NAMES",
    "REFUSALS",
    "RESTARTING",
    "Aggregates",
    "Analysis",
    "DetailView",
    "FleetState",
    "FlushResult",
    "HealthView",
    "Ingest",
    "IngestStats",
    "JobLoss",
    "JobMembership",
    "JobPhases",
    "LostByCause",
    "Message",
    "MonitorConfig",
    "MonitorCore",
    "NameIndex",
    "Received",
    "Streams",
    "Table",
    "Throughput",
    "compute_throughput",
    "resolve_jobs",
]
