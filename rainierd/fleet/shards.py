"""A monitor shard's share of the fleet, as a topology: the one place that
turns ``--shard i/N`` (``rainierd.wire.topics.Shard``, which owns the topic
layout) into the nodes a shard watches, for the monitor and its exporter alike.
It knows a shard only by what it asks of one (``Sharding``), so the fleet's
vocabulary imports nothing above it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import numpy as np

from rainierd.fleet.topology import Topology


class Sharding(Protocol):
    """What a shard view asks of a shard (``rainierd.wire.topics.Shard`` is one)."""

    @property
    def whole(self) -> bool:
        """Return True for the whole fleet (one shard)."""
        ...

    def owns_ultraserver(self, ultraserver: int) -> bool:
        """Return True if ``ultraserver``'s frames are this shard's."""
        ...


def shard_view(topology: Topology, shard: Sharding) -> Topology:
    """Return ``topology`` as ``shard`` sees it: the same ids, with every node of another shard's UltraServers
    absent (the whole fleet returns ``topology`` itself).

    Absent nodes count nowhere (no peak, no chips, no silence, no series),
    exactly as nodes missing from an inventory, so a shard's figures are its
    share's and the shards' figures add up to the whole fleet's.  Frames of
    an absent node are rejected as ``unknown_node`` (one that reaches the
    wrong shard, say, in a batch published on the wrong bucket).
    """
    if shard.whole:
        return topology
    ours = np.array([shard.owns_ultraserver(u) for u in range(topology.n_ultraservers)], dtype=bool)
    present = topology.node_present & np.repeat(ours, topology.nodes_per_ultraserver)
    present.flags.writeable = False
    return replace(topology, node_present=present)
