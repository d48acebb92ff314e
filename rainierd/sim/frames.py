"""Cutting one tick of the simulated fleet into frames: one per node and site,
or batch frames that carry many nodes of a site at once.

Because a node's chips, links and ports have contiguous ids, each frame's
records are slices (views) of the tick's fleet-wide arrays, and a batch's
columns are slices of the fleet-wide record fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd.sim.fleet import TickSample
from rainierd.topology import Topology
from rainierd.wire.records import RECORD_KINDS, FacilityFrame, NodeBatch, NodeFrame, column_dtypes
from rainierd.wire.topics import batch_topic, facility_topic, node_topic

__all__ = ["tick_batches", "tick_frames"]


def tick_frames(
    topology: Topology,
    sample: TickSample,
    *,
    publisher: str,
    nodes: range | None = None,
    sites: range | None = None,
) -> Iterator[tuple[str, NodeFrame | FacilityFrame]]:
    """Yield (topic, frame) for every node and site of one tick.

    A node frame's sequence number counts its agent's ticks since it (re)started
    (the tick itself unless the profile restarts agents): each topic gets one
    frame a tick, so consecutive frames differ by exactly one, and a restarted
    agent numbers from 0 again, as a real one does.  A node frame's
    time is when that node sampled (``sample.node_t_s``).  A lost node
    yields nothing; a failed chip is left out of its node's frame.
    """
    topo = topology
    for node in nodes if nodes is not None else range(topo.n_nodes):
        if sample.node_silent[node] or not topo.node_present[node]:
            continue  # a lost node publishes nothing, and an absent one does not exist
        chips, links, efa = topo.node_chips(node), topo.node_links(node), topo.node_efa(node)
        chip_records = sample.chips[chips.start:chips.stop]
        silent = sample.chip_silent[chips.start:chips.stop]
        yield node_topic(*topo.node_path(node)), NodeFrame(
            publisher, int(sample.node_seq[node]), sample.tick, float(sample.node_t_s[node]), node,
            chip_records[~silent] if silent.any() else chip_records,
            sample.links[links.start:links.stop],
            sample.efa[efa.start:efa.stop],
            sample.cooling[node:node + 1],
        )
    yield from _facility_frames(topo, sample, publisher, sites)


def _facility_frames(
    topo: Topology, sample: TickSample, publisher: str, sites: range | None,
) -> Iterator[tuple[str, FacilityFrame]]:
    for site in sites if sites is not None else range(topo.n_sites):
        yield facility_topic(site), FacilityFrame(
            publisher, sample.tick, sample.tick, sample.t_s, site, sample.facility[site:site + 1],
        )


def tick_batches(
    topology: Topology,
    sample: TickSample,
    *,
    publisher: str,
    nodes_per_batch: int,
    sites: range | None = None,
) -> Iterator[tuple[str, NodeBatch | FacilityFrame]]:
    """Yield (topic, frame) for one tick as an aggregation tier would: a batch
    frame per ``nodes_per_batch`` consecutive nodes of a site, then each
    site's facility frame.

    Each node entry's sequence number is its agent's, as in ``tick_frames``; a
    lost node is left out of its batch and a failed chip out of its node.
    """
    topo = topology
    per_kind = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node,
                "cooling": 1}
    records = {"chips": sample.chips, "links": sample.links, "efa": sample.efa, "cooling": sample.cooling}
    # Each batch's columns are strided views of the fleet-wide records; the
    # encoder copies each once, contiguous, into the message.
    columns = {kind: {name: records[kind][name] for name in column_dtypes(records[kind].dtype)}
               for kind in RECORD_KINDS}
    keep = {kind: None if kind != "chips" else ~sample.chip_silent for kind in RECORD_KINDS}
    for site in sites if sites is not None else range(topo.n_sites):
        span = topo.site_nodes(site)
        for first in range(span.start, span.stop, nodes_per_batch):
            last = min(first + nodes_per_batch, span.stop)
            batch = _batch(sample, topo, publisher=publisher, site=site, first=first, last=last, per_kind=per_kind,
                           columns=columns, keep=keep)
            if batch is not None:
                yield batch_topic(site, f"n{first}-{last - 1}"), batch
    yield from _facility_frames(topo, sample, publisher, sites)


def _batch(
    sample: TickSample,
    topo: Topology,
    *,
    publisher: str,
    site: int,
    first: int,
    last: int,
    per_kind: dict[str, int],
    columns: dict[str, dict[str, npt.NDArray[Any]]],
    keep: dict[str, npt.NDArray[np.bool_] | None],
) -> NodeBatch | None:
    silent = sample.node_silent[first:last] | ~topo.node_present[first:last]
    nodes = np.arange(first, last, dtype=np.uint32)
    chip_keep = keep["chips"]
    assert chip_keep is not None
    node_ok = ~silent
    if not node_ok.any():
        return None
    chip_ok = chip_keep[first * per_kind["chips"]:last * per_kind["chips"]]
    counts: dict[str, npt.NDArray[np.uint16]] = {}
    batch_columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
    for kind in RECORD_KINDS:
        k = per_kind[kind]
        window = slice(first * k, last * k)
        mask = np.repeat(node_ok, k)
        if kind == "chips":
            mask &= chip_ok
        if mask.all():
            batch_columns[kind] = {name: values[window] for name, values in columns[kind].items()}
            counts[kind] = np.full(last - first, k, np.uint16)
        else:
            batch_columns[kind] = {name: values[window][mask] for name, values in columns[kind].items()}
            counts[kind] = mask.reshape(-1, k).sum(axis=1).astype(np.uint16)[node_ok]
    n = int(node_ok.sum())
    return NodeBatch(
        publisher, sample.tick, sample.tick, sample.t_s, site, nodes[node_ok],
        sample.node_seq[first:last][node_ok], np.full(n, sample.tick, np.uint64), sample.node_t_s[first:last][node_ok],
        counts, batch_columns,
    )
