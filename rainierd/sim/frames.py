"""Cutting one tick of the simulated fleet into frames: one per node and site,
or batch frames that carry many nodes of a site and topic bucket at once.

Because a node's chips, links and ports have contiguous ids, each frame's
records are slices (views) of the tick's fleet-wide arrays; a batch's
columns are gathered from the fleet-wide record fields (a bucket's
UltraServers are every 256th of a site, not one run).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd.fleet import Topology
from rainierd.sim.sample import TickSample
from rainierd.wire import (
    BUCKETS,
    RECORD_KINDS,
    FacilityFrame,
    NodeBatch,
    NodeFrame,
    batch_topic,
    bucket_of,
    column_dtypes,
    facility_topic,
    node_topic,
)


def tick_frames(
    topology: Topology,
    sample: TickSample,
    *,
    publisher: str,
    nodes: Iterable[int] | None = None,
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
    yield from facility_frames(topo, sample, publisher, sites)


def facility_frames(
    topo: Topology, sample: TickSample, publisher: str, sites: range | None = None,
) -> Iterator[tuple[str, FacilityFrame]]:
    """Yield (topic, frame) for each site's facility record of one tick (``sites``: all by default)."""
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

    A bucket's UltraServers are every 256th of a site, not one run, so each
    site's records are first put in batch order, a row of records per
    UltraServer; each batch's columns are then slices of those (views, which
    the encoder copies once), and only a batch holding a silent node or chip
    filters its own.  The simulator encodes its binary batches with
    ``packed.BatchPacker`` instead (the same bytes, every batch of a shape at
    once): this is the frames themselves, for JSON and for the batches the
    packer cannot take whole.
    """
    yield from plan_batches(topology, sample, batch_plan(topology, nodes_per_batch, sites), publisher=publisher)
    yield from facility_frames(topology, sample, publisher, sites)


def plan_batches(
    topology: Topology, sample: TickSample, plan: BatchPlan, *, publisher: str, only: Iterable[int] | None = None,
) -> Iterator[tuple[str, NodeBatch]]:
    """Yield (topic, batch) for ``plan``'s batches of one tick (``only``: those of these indices, ascending), as
    ``tick_batches`` does."""
    topo = topology
    order = plan.order
    node_ok = ~(sample.node_silent[order] | ~topo.node_present[order])
    node_seq, node_t_s = sample.node_seq[order], sample.node_t_s[order]
    per_kind = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node,
                "cooling": 1}
    records = {"chips": sample.chips, "links": sample.links, "efa": sample.efa, "cooling": sample.cooling}
    per_us = topo.nodes_per_ultraserver
    silent = sample.chip_silent.reshape(topo.n_ultraservers, -1)
    chosen = plan.batches if only is None else [plan.batches[at] for at in only]
    for _, site_batches in groupby(chosen, key=lambda batch: batch[1]):
        yield from _site_batches(list(site_batches), plan=plan, sample=sample, records=records, node_ok=node_ok,
                                 node_seq=node_seq, node_t_s=node_t_s, silent=silent, per_kind=per_kind,
                                 per_us=per_us, publisher=publisher)


def _site_batches(
    batches: list[tuple[str, int, int, int]],
    *,
    plan: BatchPlan,
    sample: TickSample,
    records: dict[str, npt.NDArray[Any]],
    node_ok: npt.NDArray[np.bool_],
    node_seq: npt.NDArray[Any],
    node_t_s: npt.NDArray[Any],
    silent: npt.NDArray[np.bool_],
    per_kind: dict[str, int],
    per_us: int,
    publisher: str,
) -> Iterator[tuple[str, NodeBatch]]:
    """Yield one site's batches (``batches``, consecutive in ``plan.order``) of ``tick_batches``.

    Whole UltraServers move together (a bucket is made of them), so each
    kind's records are put in batch order by one gather of rows of an
    UltraServer's records each: a memcpy per row, not one per field.  One
    site's at a time: the gathered copy is the site's records, not the
    fleet's (at rainier-1m, 44 of the simulator's 220 MiB a tick).
    """
    # Whole UltraServers from the one holding the first batch's first node (``plan_batches``' ``only`` may start
    # mid-UltraServer) to the one holding the last batch's last.
    first_us, stop_us = batches[0][2] // per_us, -(-batches[-1][3] // per_us)
    rows = plan.ultraservers[first_us:stop_us]
    lo = first_us * per_us
    order = plan.order
    columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
    for kind in RECORD_KINDS:
        in_order = records[kind].reshape(silent.shape[0], -1)[rows].reshape(-1)
        columns[kind] = {name: in_order[name] for name in column_dtypes(records[kind].dtype)}
    chip_ok = ~silent[rows].reshape(-1)
    for topic, site, first, stop in batches:
        ok = node_ok[first:stop]
        if not ok.any():
            continue
        whole = bool(ok.all())
        sent = order[first:stop] if whole else order[first:stop][ok]
        counts: dict[str, npt.NDArray[np.uint16]] = {}
        batch_columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
        for kind in RECORD_KINDS:
            k = per_kind[kind]
            keep = None if whole else np.repeat(ok, k)
            if kind == "chips":
                chips_ok = chip_ok[(first - lo) * k:(stop - lo) * k]
                if not whole:
                    chips_ok = chips_ok[keep]
                counts[kind] = chips_ok.reshape(-1, k).sum(axis=1).astype(np.uint16)
                if not chips_ok.all():
                    keep = chips_ok if keep is None else _and_where(keep, chips_ok)
            else:
                counts[kind] = np.full(sent.size, k, np.uint16)
            part = slice((first - lo) * k, (stop - lo) * k)
            batch_columns[kind] = {name: values[part] if keep is None else values[part][keep]
                                   for name, values in columns[kind].items()}
        yield topic, NodeBatch(
            publisher, sample.tick, sample.tick, sample.t_s, site, sent.astype(np.uint32),
            node_seq[first:stop] if whole else node_seq[first:stop][ok], np.full(sent.size, sample.tick, np.uint64),
            node_t_s[first:stop] if whole else node_t_s[first:stop][ok], counts, batch_columns,
        )


def _and_where(keep: npt.NDArray[np.bool_], sub: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Return ``keep`` with its True places narrowed by ``sub`` (one flag per True place of ``keep``)."""
    out = keep.copy()
    out[keep] = sub
    return out


@dataclass(frozen=True)
class BatchPlan:
    """A tick's batch layout: every node in batch order, and each batch's topic, site and slice of it."""

    order: npt.NDArray[np.int64]
    ultraservers: npt.NDArray[np.int64]  # the UltraServers of ``order``, each once, in its order
    batches: tuple[tuple[str, int, int, int], ...]


def batch_plan(topo: Topology, nodes_per_batch: int, sites: range | None = None) -> BatchPlan:
    """Return the batch layout of ``sites`` (all by default), the same every tick."""
    per_us = topo.nodes_per_ultraserver
    parts: list[npt.NDArray[np.int64]] = []
    us_parts: list[npt.NDArray[np.int64]] = []
    batches: list[tuple[str, int, int, int]] = []
    at = 0
    for site in sites if sites is not None else range(topo.n_sites):
        span = topo.site_ultraservers(site)
        for first_us in range(span.start, min(span.start + BUCKETS, span.stop)):  # one bucket each
            ultraservers = np.arange(first_us, span.stop, BUCKETS, dtype=np.int64)
            nodes = (ultraservers[:, None] * per_us + np.arange(per_us)).ravel()
            parts.append(nodes)
            us_parts.append(ultraservers)
            for first in range(0, nodes.size, nodes_per_batch):
                chunk = nodes[first:first + nodes_per_batch]
                batches.append((batch_topic(site, bucket_of(first_us), f"n{chunk[0]}-{chunk[-1]}"), site,
                                at + first, at + first + chunk.size))
            at += nodes.size
    def joined(arrays: list[npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    return BatchPlan(joined(parts), joined(us_parts), tuple(batches))


def batches_per_tick(topology: Topology, nodes_per_batch: int) -> int:
    """Return how many batch frames ``tick_batches`` yields a tick at most (every node present and heard)."""
    total = 0
    for site in range(topology.n_sites):
        span = topology.site_ultraservers(site)
        for first_us in range(span.start, min(span.start + BUCKETS, span.stop)):
            nodes = len(range(first_us, span.stop, BUCKETS)) * topology.nodes_per_ultraserver
            total += -(-nodes // nodes_per_batch)
    return total
