"""What one analysis tick concluded, frozen for the collectors: they read only
this (and the ingest counters), never the live numpy state that the next
analysis mutates in a worker thread.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rainierd.core.aggregates import Aggregates
from rainierd.core.analysis import DetailView, HealthView
from rainierd.core.model import LostByCause
from rainierd.core.throughput import Throughput

__all__ = ["Aggregates", "DetailView", "HealthView", "MonitorSnapshot"]

@dataclass(frozen=True, eq=False)
class MonitorSnapshot:
    """What one analysis tick concluded."""

    generation: int
    throughput: Throughput
    chips_total: int
    analysis_s: float
    analysed_ticks: int
    lost: LostByCause | None = None
    health: HealthView | None = None
    events: Counter[tuple[str, str]] = field(default_factory=Counter)  # cumulative, by (entity, new state)
    lag_s: float = float("nan")  # wall time at analysis minus the newest sample's time
    detail: DetailView | None = None  # the inventory's detail nodes' chips, one by one
    aggregates: Aggregates | None = None  # the raw telemetry per UltraServer and site
