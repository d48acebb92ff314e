"""Cutting one tick of the simulated fleet into per-node and per-site frames.

Because a node's chips, links and ports have contiguous ids, each frame's
records are slices (views) of the tick's fleet-wide arrays.
"""

from __future__ import annotations

from collections.abc import Iterator

from rainierd.sim.fleet import TickSample
from rainierd.topology import Topology
from rainierd.wire.records import FacilityFrame, NodeFrame
from rainierd.wire.topics import facility_topic, node_topic

__all__ = ["tick_frames"]


def tick_frames(
    topology: Topology,
    sample: TickSample,
    *,
    publisher: str,
    nodes: range | None = None,
    sites: range | None = None,
) -> Iterator[tuple[str, NodeFrame | FacilityFrame]]:
    """Yield (topic, frame) for every node and site of one tick.

    A frame's sequence number is its tick: each topic gets one frame a tick,
    so consecutive frames on a topic differ by exactly one.  A lost node
    yields nothing; a failed chip is left out of its node's frame.
    """
    topo = topology
    for node in nodes if nodes is not None else range(topo.n_nodes):
        if sample.node_silent[node]:
            continue  # a lost node publishes nothing
        chips, links, efa = topo.node_chips(node), topo.node_links(node), topo.node_efa(node)
        chip_records = sample.chips[chips.start:chips.stop]
        silent = sample.chip_silent[chips.start:chips.stop]
        yield node_topic(*topo.node_path(node)), NodeFrame(
            publisher, sample.tick, sample.tick, sample.t_s, node,
            chip_records[~silent] if silent.any() else chip_records,
            sample.links[links.start:links.stop],
            sample.efa[efa.start:efa.stop],
            sample.cooling[node:node + 1],
        )
    for site in sites if sites is not None else range(topo.n_sites):
        yield facility_topic(site), FacilityFrame(
            publisher, sample.tick, sample.tick, sample.t_s, site, sample.facility[site:site + 1],
        )
