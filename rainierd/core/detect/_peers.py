"""Who an entity is judged against: the nodes (and so the chips) that carry
the same work.  A job is a synchronous group, so its chips execute the same
FLOP per step and the same graph: a node's peers are its job's nodes when
the jobs are known, else the nodes of its UltraServer that no known job holds
(``peer_groups``; ``nodepaths.py`` judges nodes by it, ``chips.py`` chips).

``ChipPeers`` gives each chip its group's median of a figure.  While no node
is in a known job the groups are the UltraServers, and the median is exact
over their 64 chips (one sort of 64-wide rows: ~1 ms at ``rainier``).  With
jobs, groups are of any size: the median is then the median of the group's
nodes' medians (a node's 16 chips always belong to one job), one sort of the
rows of 16 and one float64 argsort of the nodes (``group_nanmedian``): ~3 ms
a figure at ``rainier`` against ~27 for one argsort of every chip.  One slow
chip moves neither median: it is one of its node's 16 values, and its node
one of its group's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rainierd._types import F32, I64, B
from rainierd.core.detect._stats import group_nanmedian, row_nanmedian
from rainierd.topology import Topology

__all__ = ["ChipPeers", "peer_groups"]


def peer_groups(ultraserver_group: I64, node_group: I64 | None) -> I64:
    """Return each node's peer group: its job (``node_group``, -1 for none) where it has one, else its
    UltraServer (``ultraserver_group``, among the nodes in no job); -1 for a node the inventory leaves out
    (``ultraserver_group`` -1)."""
    if node_group is None:
        return ultraserver_group
    n_jobs = int(node_group.max(initial=-1)) + 1
    grouped = np.where(node_group >= 0, node_group, n_jobs + ultraserver_group)
    return np.where(ultraserver_group >= 0, grouped, -1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class ChipPeers:
    """Each chip's peers for one analysis (``of``), and its group's median or any of a figure."""

    chips_per_node: int
    chips_per_ultraserver: int
    node_group: I64 | None  # each node's peer group (-1: none); None: the UltraServers, exactly
    n_groups: int
    node_in_job: B  # each node held by a known job

    @classmethod
    def of(cls, topology: Topology, node_job: I64 | None) -> ChipPeers:
        """Return the chips' peers with ``node_job`` (each node's job, -1 for none; None: jobs unknown)."""
        cpn = topology.chips_per_node
        per_us = cpn * topology.nodes_per_ultraserver
        if node_job is None or not (node_job >= 0).any():
            return cls(cpn, per_us, None, topology.n_ultraservers, np.zeros(topology.n_nodes, dtype=bool))
        ultraserver = np.where(topology.node_present, topology.node_ultraserver, -1).astype(np.int64)
        group = peer_groups(ultraserver, node_job)
        return cls(cpn, per_us, group, int(group.max(initial=-1)) + 1, np.asarray(node_job >= 0, dtype=bool))

    def median(self, values: F32) -> F32:
        """Return, per chip, the median of its group's finite ``values`` (NaN for a group with none)."""
        if self.node_group is None:
            return np.repeat(row_nanmedian(values.reshape(-1, self.chips_per_ultraserver)),
                             self.chips_per_ultraserver)
        node = row_nanmedian(values.reshape(-1, self.chips_per_node))
        group = group_nanmedian(node, self.node_group, self.n_groups)
        per_node = np.where(self.node_group >= 0, group[np.maximum(self.node_group, 0)], np.nan)
        return np.repeat(per_node.astype(np.float32), self.chips_per_node)

    def node_median(self, values: F32) -> F32:
        """Return, per chip, the median of its node's finite ``values`` (NaN for a node with none)."""
        return np.repeat(row_nanmedian(values.reshape(-1, self.chips_per_node)), self.chips_per_node)

    def any(self, mask: B) -> B:
        """Return, per chip, whether ``mask`` holds for any chip of its group."""
        if self.node_group is None:
            per_us = self.chips_per_ultraserver
            return np.repeat(np.asarray(mask.reshape(-1, per_us).any(axis=1), dtype=bool), per_us)
        node: B = np.asarray(mask.reshape(-1, self.chips_per_node).any(axis=1), dtype=bool)
        member = self.node_group >= 0
        group: B = np.asarray(np.bincount(self.node_group[member], weights=node[member], minlength=self.n_groups) > 0)
        per_node = member & group[np.maximum(self.node_group, 0)]
        return np.repeat(per_node, self.chips_per_node)

    def chip_in_job(self) -> B:
        """Return, per chip, whether its node is held by a known job."""
        return np.repeat(self.node_in_job, self.chips_per_node)
