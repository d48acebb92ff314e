"""One name for every entity, on every surface: the canonical id an SRE reads and
types, the same in events, logs, metrics labels, the read API, advisories,
``node-check`` and ``top`` (docs/ids.md).

An id is the entity's path in the fleet, numbers as ``topology`` gives them:
``s0`` (site), ``s0/u1`` (UltraServer), ``s0/u1/n4`` (node), ``s0/u1/n4/chip5``
(chip), ``s0/u1/n4/chip5/link0`` (a NeuronLink: the chip's ``link0`` and
``link1`` are its torus links along x and y, ``link2`` its ring link to the next
node), ``s0/u1/n4/efa6`` (an EFA port) and ``feed`` (the monitor's feed).  Site,
UltraServer and node numbers are the fleet-wide ids, so the node's number alone
names it; chip, link and port numbers are local to their node or chip, as the
hardware and neuron-monitor count them.  The path repeats its parents so a line
read alone says where the part sits; ``parse`` checks they agree.  A hostname is
never part of an id (hosts are renamed; ids are not): where an inventory names a
node, the hostname travels beside the id as a field of its own.

Why strings built here and nowhere else: before this module, one link was
``neuronlink 5`` in events, ``n0/chip5/link0`` in advisories and ``5-9`` in
``top``; one function per kind, and a test that every surface prints it, keep
them one.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from rainierd.fleet.topology import Topology

EntityKind = Literal["site", "ultraserver", "node", "chip", "neuronlink", "efa", "feed"]
KINDS: Final[tuple[EntityKind, ...]] = ("site", "ultraserver", "node", "chip", "neuronlink", "efa", "feed")
FEED_ID: Final = "feed"

_ID: Final = re.compile(
    r"^s(?P<s>\d{1,6})(?:/u(?P<u>\d{1,7})(?:/n(?P<n>\d{1,8})"
    r"(?:/(?:chip(?P<c>\d{1,3})(?:/link(?P<l>\d))?|efa(?P<e>\d{1,3})))?)?)?$"
)


def site_id(site: int) -> str:
    """Return the id of ``site``: ``s0``."""
    return f"s{site}"


def ultraserver_id(topology: Topology, ultraserver: int) -> str:
    """Return the id of ``ultraserver``: ``s0/u1``."""
    return f"s{int(topology.ultraserver_site[ultraserver])}/u{ultraserver}"


def node_id(topology: Topology, node: int) -> str:
    """Return the id of ``node``: ``s0/u1/n4``."""
    us = int(topology.node_ultraserver[node])
    return f"s{int(topology.ultraserver_site[us])}/u{us}/n{node}"


def chip_id(topology: Topology, chip: int) -> str:
    """Return the id of ``chip`` (a global chip id): ``s0/u1/n4/chip5``."""
    node = chip // topology.chips_per_node
    return f"{node_id(topology, node)}/chip{chip - node * topology.chips_per_node}"


def link_id(topology: Topology, link: int) -> str:
    """Return the id of NeuronLink ``link`` (a global link id): ``s0/u1/n4/chip5/link0``."""
    node = link // topology.links_per_node
    local = link - node * topology.links_per_node
    chip = local % topology.chips_per_node
    return f"{node_id(topology, node)}/chip{chip}/link{local // topology.chips_per_node}"


def efa_id(topology: Topology, port: int) -> str:
    """Return the id of EFA port ``port`` (a global port id): ``s0/u1/n4/efa6``."""
    node = port // topology.efa_ports_per_node
    return f"{node_id(topology, node)}/efa{port - node * topology.efa_ports_per_node}"


def entity_id(topology: Topology, kind: str, index: int) -> str:
    """Return the id of entity ``index`` of ``kind`` (one of ``KINDS``); ValueError for another kind."""
    if kind == "chip":
        return chip_id(topology, index)
    if kind == "neuronlink":
        return link_id(topology, index)
    if kind == "efa":
        return efa_id(topology, index)
    if kind == "node":
        return node_id(topology, index)
    if kind == "ultraserver":
        return ultraserver_id(topology, index)
    if kind == "site":
        return site_id(index)
    if kind == "feed":
        return FEED_ID
    raise ValueError(f"no entity kind {kind!r} (one of {', '.join(KINDS)})")


def entity_node(topology: Topology, kind: str, index: int) -> int | None:
    """Return the node ``index`` of ``kind`` belongs to (itself for a node); None above the node."""
    per = {"chip": topology.chips_per_node, "neuronlink": topology.links_per_node,
           "efa": topology.efa_ports_per_node, "node": 1}.get(kind)
    return None if per is None else index // per


def entity_fields(topology: Topology, kind: str, index: int) -> dict[str, str | int]:
    """Return how every surface names entity ``index`` of ``kind`` as data: ``entity`` (the kind), ``id`` (the
    canonical string), ``index`` (the fleet-wide integer), then ``ultraserver`` and ``node`` (their ids) where
    the entity is at or below them, and ``hostname`` where the inventory names its node."""
    out: dict[str, str | int] = {"entity": kind, "id": entity_id(topology, kind, index), "index": index}
    node = entity_node(topology, kind, index)
    if node is not None:
        out["ultraserver"] = ultraserver_id(topology, int(topology.node_ultraserver[node]))
        out["node"] = node_id(topology, node)
        hostname = hostname_of(topology, node)
        if hostname is not None:
            out["hostname"] = hostname
    elif kind == "ultraserver":
        out["ultraserver"] = out["id"]
    return out


def hostname_of(topology: Topology, node: int) -> str | None:
    """Return the inventory's hostname of ``node``, or None where it names none."""
    hostnames = topology.names.hostnames
    return hostnames[node] if hostnames else None


def parse(topology: Topology, text: str) -> tuple[EntityKind, int]:
    """Return (kind, index) of an id; ValueError with one line saying why when it names nothing in ``topology``
    (malformed, out of range, or parents that do not hold the part)."""
    if text == FEED_ID:
        return "feed", 0
    m = _ID.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not an entity id (s0, s0/u1, s0/u1/n4, s0/u1/n4/chip5, "
                         "s0/u1/n4/chip5/link0, s0/u1/n4/efa6 or feed)")
    site = int(m["s"])
    if site >= topology.n_sites:
        raise ValueError(f"{text!r}: no site {site} (the fleet has {topology.n_sites})")
    if m["u"] is None:
        return "site", site
    us = int(m["u"])
    if us >= topology.n_ultraservers or int(topology.ultraserver_site[us]) != site:
        raise ValueError(f"{text!r}: UltraServer {us} is not in site {site}")
    if m["n"] is None:
        return "ultraserver", us
    node = int(m["n"])
    if node >= topology.n_nodes or int(topology.node_ultraserver[node]) != us:
        raise ValueError(f"{text!r}: node {node} is not in UltraServer {us}")
    if not topology.node_present[node]:
        raise ValueError(f"{text!r}: node {node} is not in the fleet's inventory")
    return _part(topology, text, node, chip=m["c"], link=m["l"], port=m["e"])


def _part(topology: Topology, text: str, node: int, *, chip: str | None, link: str | None,
          port: str | None) -> tuple[EntityKind, int]:
    """Return (kind, index) of the part of ``node`` an id's last steps name (the node itself when none)."""
    if chip is not None:
        c = int(chip)
        if c >= topology.chips_per_node:
            raise ValueError(f"{text!r}: a node has chips 0-{topology.chips_per_node - 1}")
        if link is None:
            return "chip", node * topology.chips_per_node + c
        per_chip = topology.links_per_node // topology.chips_per_node
        if int(link) >= per_chip:
            raise ValueError(f"{text!r}: a chip reports links 0-{per_chip - 1}")
        return "neuronlink", node * topology.links_per_node + int(link) * topology.chips_per_node + c
    if port is not None:
        if int(port) >= topology.efa_ports_per_node:
            raise ValueError(f"{text!r}: a node has EFA ports 0-{topology.efa_ports_per_node - 1}")
        return "efa", node * topology.efa_ports_per_node + int(port)
    return "node", node
