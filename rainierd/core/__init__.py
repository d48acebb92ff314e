"""The pure numpy core: fleet state, frame ingest and the throughput model.

Nothing here does I/O, reads a clock or touches asyncio; arrays and frozen
configuration go in, arrays and frozen dataclasses come out.
"""

from __future__ import annotations

from rainierd.core.ingest import FlushResult, Ingest, IngestStats
from rainierd.core.state import EntityTable, FleetState
from rainierd.core.throughput import Throughput, compute_throughput

__all__ = [
    "EntityTable",
    "FleetState",
    "FlushResult",
    "Ingest",
    "IngestStats",
    "Throughput",
    "compute_throughput",
]
