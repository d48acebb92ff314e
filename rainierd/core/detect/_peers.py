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

No node can convict another's chips (issue 35): one node's agent reporting
its chips far off theirs moves a median over three nodes or more no further
than the others' own range, but the median of two nodes is their mean.  So a
group with fewer than ``MIN_NODES`` nodes reporting a figure (a job of two
nodes, an UltraServer with two nodes heard) is no reference: each chip there
is compared with its own node's chips, as in a job of one node, which only
its own agent reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd._types import F32, I64, B
from rainierd.core.detect._stats import group_nanmedian, row_nanmedian
from rainierd.fleet import Topology

MIN_NODES: Final = 3
"""The fewest nodes with a figure a group's median is taken over: one node of three or more cannot move it outside
the others' range, while the median of two is their mean, which either can move at will."""


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
        """Return, per chip, the median of its group's finite ``values`` (NaN for a group with none); in a group
        of fewer than ``MIN_NODES`` nodes with a value, the median of its own node's (module docstring)."""
        cpn = self.chips_per_node
        reporting = _any_per_row(np.isfinite(values), cpn)
        if self.node_group is None:
            per_us = self.chips_per_ultraserver
            out: F32 = np.repeat(row_nanmedian(values.reshape(-1, per_us)), per_us)
            nodes_per_us = per_us // cpn
            count = np.repeat(reporting.reshape(-1, nodes_per_us).sum(axis=1), nodes_per_us)
        else:
            node = row_nanmedian(values.reshape(-1, cpn))
            group = group_nanmedian(node, self.node_group, self.n_groups)
            member = self.node_group >= 0
            per_node = np.where(member, group[np.maximum(self.node_group, 0)], np.nan)
            out = np.repeat(per_node.astype(np.float32), cpn)
            sizes = np.bincount(self.node_group[member & reporting], minlength=self.n_groups)
            count = np.where(member, sizes[np.maximum(self.node_group, 0)], 0)
        few = np.flatnonzero(reporting & (count < MIN_NODES))
        if few.size:
            own = row_nanmedian(values.reshape(-1, cpn)[few])
            out.reshape(-1, cpn)[few] = own[:, None]
        return out

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


def _any_per_row(mask: B, width: int) -> B:
    """Return whether each row of ``width`` entries of ``mask`` holds any True: eight at a time where the rows are
    whole words (0.08 ms against 0.4 for ``any(axis=1)`` over rainier's chips, a reduction along a short row paying
    per row)."""
    if width % 8 or not mask.flags.c_contiguous:
        return np.asarray(mask.reshape(-1, width).any(axis=1), dtype=bool)
    words = mask.reshape(-1, width).view(np.uint64)
    found: B = words[:, 0] != 0
    for k in range(1, words.shape[1]):
        found |= words[:, k] != 0
    return found
