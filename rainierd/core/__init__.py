"""The pure numpy core: fleet state, frame ingest and the throughput model.

Nothing here does I/O, reads a clock or touches asyncio; arrays and frozen
configuration go in, arrays and frozen dataclasses come out.
"""

from __future__ import annotations

from rainierd.core.ingest import FlushResult, Ingest, IngestStats, Message, Received
from rainierd.core.state import FleetState, Table
from rainierd.core.throughput import Throughput, compute_throughput

__all__ = [
    "FleetState",
    "FlushResult",
    "Ingest",
    "IngestStats",
    "Message",
    "Received",
    "Table",
    "Throughput",
    "compute_throughput",
]
