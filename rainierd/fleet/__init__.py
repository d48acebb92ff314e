"""The fleet's vocabulary, below everything that watches or simulates it: the
Trainium2 hardware figures, the numbering of sites, UltraServers, nodes, chips,
links and ports (topology), a real fleet's inventory and the neuron-ls reader
that builds one, a shard's view of the fleet, and the training step's pace.
It imports nothing of rainierd but ``errors`` and ``_types``.
"""

from __future__ import annotations

from rainierd.fleet.hardware import TRN2, Trainium2
from rainierd.fleet.inventory import load_inventory, load_topology
from rainierd.fleet.neuronls import build_inventory, parse_ultraservers, read_node_listing
from rainierd.fleet.pace import CAUSES, SHARES, StepShares, path_stretch, step_excess, step_time
from rainierd.fleet.shards import shard_view
from rainierd.fleet.topology import LINK_KIND_NAMES, LINK_KIND_RING, PRESETS, Topology, build_sites, parse_topology

__all__ = [
    "CAUSES",
    "LINK_KIND_NAMES",
    "LINK_KIND_RING",
    "PRESETS",
    "SHARES",
    "TRN2",
    "StepShares",
    "Topology",
    "Trainium2",
    "build_inventory",
    "build_sites",
    "load_inventory",
    "load_topology",
    "parse_topology",
    "parse_ultraservers",
    "path_stretch",
    "read_node_listing",
    "shard_view",
    "step_excess",
    "step_time",
]
