"""Cutting one tick of the simulated fleet into frames: one per node and site,
or batch frames that carry many nodes of a site and topic bucket at once.

Because a node's chips, links and ports have contiguous ids, each frame's
records are slices (views) of the tick's fleet-wide arrays; a batch's
columns are gathered from the fleet-wide record fields (a bucket's
UltraServers are every 256th of a site, not one run).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd.sim.sample import TickSample
from rainierd.topology import Topology
from rainierd.wire.records import RECORD_KINDS, FacilityFrame, NodeBatch, NodeFrame, column_dtypes
from rainierd.wire.topics import BUCKETS, batch_topic, bucket_of, facility_topic, node_topic

__all__ = ["batches_per_tick", "tick_batches", "tick_frames"]


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
    """Yield (topic, frame) for one tick as an aggregation tier would: for each
    site and topic bucket (``rainierd.wire.topics``), that bucket's nodes of
    the site in batch frames of at most ``nodes_per_batch``, then each site's
    facility frame.

    A batch holds one bucket's nodes so that it reaches exactly the one
    monitor shard that owns them.  Each node entry's sequence number is its
    agent's, as in ``tick_frames``; a lost node is left out of its batch and a
    failed chip out of its node.
    """
    topo = topology
    per_kind = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node,
                "cooling": 1}
    records = {"chips": sample.chips, "links": sample.links, "efa": sample.efa, "cooling": sample.cooling}
    columns = {kind: {name: records[kind][name] for name in column_dtypes(records[kind].dtype)}
               for kind in RECORD_KINDS}
    per_us = topo.nodes_per_ultraserver
    for site in sites if sites is not None else range(topo.n_sites):
        span = topo.site_ultraservers(site)
        for first_us in range(span.start, min(span.start + BUCKETS, span.stop)):  # one bucket each
            ultraservers = np.arange(first_us, span.stop, BUCKETS, dtype=np.int64)
            nodes = (ultraservers[:, None] * per_us + np.arange(per_us)).ravel()
            for first in range(0, nodes.size, nodes_per_batch):
                chunk = nodes[first:first + nodes_per_batch]
                batch = _batch(sample, topo, publisher=publisher, site=site, nodes=chunk, per_kind=per_kind,
                               columns=columns)
                if batch is not None:
                    yield batch_topic(site, bucket_of(first_us), f"n{chunk[0]}-{chunk[-1]}"), batch
    yield from _facility_frames(topo, sample, publisher, sites)


def batches_per_tick(topology: Topology, nodes_per_batch: int) -> int:
    """Return how many batch frames ``tick_batches`` yields a tick at most (every node present and heard)."""
    total = 0
    for site in range(topology.n_sites):
        span = topology.site_ultraservers(site)
        for first_us in range(span.start, min(span.start + BUCKETS, span.stop)):
            nodes = len(range(first_us, span.stop, BUCKETS)) * topology.nodes_per_ultraserver
            total += -(-nodes // nodes_per_batch)
    return total


def _batch(
    sample: TickSample,
    topo: Topology,
    *,
    publisher: str,
    site: int,
    nodes: npt.NDArray[np.int64],
    per_kind: dict[str, int],
    columns: dict[str, dict[str, npt.NDArray[Any]]],
) -> NodeBatch | None:
    """Return the batch frame of ``nodes`` (ascending ids of one site), or None if none of them publishes."""
    node_ok = ~(sample.node_silent[nodes] | ~topo.node_present[nodes])
    if not node_ok.any():
        return None
    sent = nodes[node_ok]
    counts: dict[str, npt.NDArray[np.uint16]] = {}
    batch_columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
    for kind in RECORD_KINDS:
        k = per_kind[kind]
        # The records of the sending nodes, in node order: one gather per column (the encoder copies anyway).
        take = (sent[:, None] * k + np.arange(k)).ravel()
        if kind == "chips":
            ok = ~sample.chip_silent[take]
            if not ok.all():
                take = take[ok]
            counts[kind] = ok.reshape(-1, k).sum(axis=1).astype(np.uint16)
        else:
            counts[kind] = np.full(sent.size, k, np.uint16)
        batch_columns[kind] = {name: values[take] for name, values in columns[kind].items()}
    return NodeBatch(
        publisher, sample.tick, sample.tick, sample.t_s, site, sent.astype(np.uint32),
        sample.node_seq[sent], np.full(sent.size, sample.tick, np.uint64), sample.node_t_s[sent],
        counts, batch_columns,
    )
