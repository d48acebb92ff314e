"""The aggregation tier, ``rainierd aggregate``: hears the per-node frames a
real fleet's agents publish (one message per node and tick, JSON or binary,
from any agent) for its share of the fleet, and republishes them once a tick
as batch frames, the form a monitor ingests fast (docs/aggregation.md).

Every entry keeps its own publisher, ``seq``, ``tick`` and ``t_s``, so the
monitor's loss accounting is the same as if each frame had come alone; what
the aggregator drops it counts by reason, and the monitor counts it lost by
the node's sequence gap.  Shares are the monitor shards' scheme
(``--shard i/N``: the UltraServers whose topic bucket is ``i`` modulo ``N``),
so several aggregators split a fleet without overlap.

``_batcher`` is the pure part (messages in, batch frames out), ``_service``
the role on the event loop, ``_metrics`` its ``rainier_aggregator_*``.
"""

from __future__ import annotations

from rainierd.aggregate._batcher import DROP_REASONS, Batcher, Outgoing, TickResult, batch_name
from rainierd.aggregate._metrics import AggregatorCollector
from rainierd.aggregate._service import DRAIN_S, Aggregator, AggregatorStatus

__all__ = [
    "DRAIN_S",
    "DROP_REASONS",
    "Aggregator",
    "AggregatorCollector",
    "AggregatorStatus",
    "Batcher",
    "Outgoing",
    "TickResult",
    "batch_name",
]
