"""Numbering of a Trainium2 fleet: every site, UltraServer, node, chip, NeuronLink
and EFA port gets a stable integer id, and the relations between them are numpy
index arrays.

Ids are dense and hierarchical, so a node's chips, links and ports are
contiguous ranges: node ``i`` of UltraServer ``u`` is ``u * 4 + i``; chip ``c``
of node ``n`` is ``n * 16 + c``; the 48 NeuronLinks a node reports (32 torus
links inside it and the 16 ring links to the next node of its UltraServer)
are ``n * 48 .. n * 48 + 47``; its EFA ports are ``n * P .. n * P + P - 1``.
UltraServers are numbered site by site, so a site's are one range.  The same
preset, size or inventory always yields the same ids.

A fleet from an inventory (``rainierd/fleet/inventory.py``) may have sites of
different sizes and UltraServers with fewer than 4 nodes: an id whose node
is not in the inventory is **absent** (``node_present`` false) and counts
nowhere, and the inventory's names travel with the ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from rainierd.errors import ConfigError
from rainierd.fleet.hardware import TRN2

IntArray = npt.NDArray[np.int64]

PresetName = Literal["demo", "ultraserver", "rainier", "rainier-1m"]

# (sites, UltraServers per site).  rainier: 3 x 2,600 = 7,800 UltraServers =
# 499,200 chips ("nearly 500,000"); rainier-1m: 5 x 3,125 = 1,000,000 chips.
PRESETS: Final[dict[str, tuple[int, int]]] = {
    "demo": (1, 2),
    "ultraserver": (1, 1),
    "rainier": (3, 2_600),
    "rainier-1m": (5, 3_125),
}

LINK_KIND_TORUS: Final = 0
LINK_KIND_RING: Final = 1
LINK_KIND_NAMES: Final = ("torus", "ring")


def _node_link_template() -> tuple[IntArray, IntArray, IntArray]:
    """Return (a, b, kind) of the links one node owns, as local chip numbers.

    ``b`` of a ring link is a chip number in the *next* node of the ring.
    """
    nx, ny = TRN2.node_torus_x, TRN2.node_torus_y
    x, y = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    local = (x * ny + y).ravel()
    along_x = (((x + 1) % nx) * ny + y).ravel()
    along_y = (x * ny + (y + 1) % ny).ravel()
    a = np.concatenate([local, local, local]).astype(np.int64)
    b = np.concatenate([along_x, along_y, local]).astype(np.int64)
    kind = np.repeat(
        np.array([LINK_KIND_TORUS, LINK_KIND_TORUS, LINK_KIND_RING], dtype=np.int64),
        local.size,
    )
    return a, b, kind


@dataclass(frozen=True, slots=True)
class Names:
    """What an inventory calls the fleet's parts (None where it does not say), by id."""

    sites: tuple[str, ...] = ()
    ultraservers: tuple[str, ...] = ()
    hostnames: tuple[str | None, ...] = ()
    instance_ids: tuple[str | None, ...] = ()
    availability_zones: tuple[str | None, ...] = ()
    detail: tuple[int, ...] = ()  # nodes whose chips are exported one by one
    # Per node, its EFA device names in port order (the bridge's name -> port map); None: not listed.
    efa_devices: tuple[tuple[str, ...] | None, ...] = ()

    def node_labels(self, node: int) -> str:
        """Return ``,hostname="…",instance_id="…",availability_zone="…"`` for what is known of ``node``."""
        out = []
        for label, values in (("hostname", self.hostnames), ("instance_id", self.instance_ids),
                              ("availability_zone", self.availability_zones)):
            if values and values[node] is not None:
                out.append(f',{label}="{values[node]}"')
        return "".join(out)

    def site_label(self, site: int) -> str:
        """Return ``,site_name="…"`` when the inventory names ``site``."""
        return f',site_name="{self.sites[site]}"' if self.sites else ""

    def ultraserver_label(self, ultraserver: int) -> str:
        """Return ``,ultraserver_name="…"`` when the inventory names ``ultraserver``."""
        return f',ultraserver_name="{self.ultraservers[ultraserver]}"' if self.ultraservers else ""


@dataclass(frozen=True, eq=False)
class Topology:
    """A fleet's numbering; arrays are read-only and indexed by global id."""

    name: str
    n_sites: int
    efa_ports_per_node: int
    ultraserver_site: IntArray = field(repr=False)
    node_ultraserver: IntArray = field(repr=False)
    chip_node: IntArray = field(repr=False)
    link_a: IntArray = field(repr=False)
    link_b: IntArray = field(repr=False)
    link_kind: IntArray = field(repr=False)
    link_node: IntArray = field(repr=False)
    efa_chip: IntArray = field(repr=False)
    efa_node: IntArray = field(repr=False)
    node_present: npt.NDArray[np.bool_] = field(repr=False)
    names: Names = field(default_factory=Names, repr=False)

    chips_per_node: int = TRN2.chips_per_node
    nodes_per_ultraserver: int = TRN2.nodes_per_ultraserver
    links_per_node: int = 3 * TRN2.chips_per_node

    @property
    def chip_present(self) -> npt.NDArray[np.bool_]:
        """Return which chips exist (their node is in the fleet)."""
        return self.node_present[self.chip_node]

    @property
    def n_present_nodes(self) -> int:
        """Return how many nodes exist (an inventory's partial UltraServers leave ids empty)."""
        return int(self.node_present.sum())

    @property
    def n_present_chips(self) -> int:
        """Return how many chips exist."""
        return self.n_present_nodes * self.chips_per_node

    @property
    def n_present_efa(self) -> int:
        """Return how many EFA ports exist."""
        return self.n_present_nodes * self.efa_ports_per_node

    def sizes(self) -> dict[str, int]:
        """Return what the fleet holds, as the start log says it: present nodes, chips and EFA ports, never the
        empty ids of partial UltraServers (an inventory of 384 chips said ``chips=448``)."""
        return {"nodes": self.n_present_nodes, "chips": self.n_present_chips, "efa_ports": self.n_present_efa}

    def site_ultraservers(self, site: int) -> range:
        """Return the UltraServer ids of ``site`` (one range: they are numbered site by site)."""
        ids = np.flatnonzero(self.ultraserver_site == site)
        return range(int(ids[0]), int(ids[-1]) + 1) if ids.size else range(0)

    def site_nodes(self, site: int) -> range:
        """Return the node ids of ``site`` (present or not)."""
        us = self.site_ultraservers(site)
        return range(us.start * self.nodes_per_ultraserver, us.stop * self.nodes_per_ultraserver)

    def node_name(self, node: int) -> str:
        """Return what to call ``node`` in logs: its hostname, or ``n<id>``."""
        hostnames = self.names.hostnames
        return hostnames[node] or f"n{node}" if hostnames else f"n{node}"

    @property
    def n_ultraservers(self) -> int:
        """Return the number of UltraServers."""
        return int(self.ultraserver_site.size)

    @property
    def n_nodes(self) -> int:
        """Return the number of trn2.48xlarge nodes."""
        return int(self.node_ultraserver.size)

    @property
    def n_chips(self) -> int:
        """Return the number of Trainium2 chips."""
        return int(self.chip_node.size)

    @property
    def n_links(self) -> int:
        """Return the number of NeuronLinks (3 a chip)."""
        return int(self.link_a.size)

    @property
    def n_efa(self) -> int:
        """Return the number of EFA ports."""
        return int(self.efa_chip.size)

    @property
    def chip_ultraserver(self) -> IntArray:
        """Return the UltraServer of every chip."""
        return self.node_ultraserver[self.chip_node]

    @property
    def chip_site(self) -> IntArray:
        """Return the site of every chip."""
        return self.ultraserver_site[self.chip_ultraserver]

    @property
    def node_site(self) -> IntArray:
        """Return the site of every node."""
        return self.ultraserver_site[self.node_ultraserver]

    def node_chips(self, node: int) -> range:
        """Return the chip ids of ``node``."""
        base = node * self.chips_per_node
        return range(base, base + self.chips_per_node)

    def node_links(self, node: int) -> range:
        """Return the ids of the NeuronLinks ``node`` reports."""
        base = node * self.links_per_node
        return range(base, base + self.links_per_node)

    def node_efa(self, node: int) -> range:
        """Return the EFA port ids of ``node``."""
        base = node * self.efa_ports_per_node
        return range(base, base + self.efa_ports_per_node)

    def node_path(self, node: int) -> tuple[int, int, int]:
        """Return (site, UltraServer, node) of ``node``: the ids its telemetry topic names."""
        us = int(self.node_ultraserver[node])
        return int(self.ultraserver_site[us]), us, node


_SIZE_RE: Final = re.compile(r"^sites=(\d{1,4}),ultraservers=(\d{1,6})$")
MAX_CHIPS: Final = 4_000_000  # what a monitor's arrays are sized for at most (about 5 GiB of state)


def parse_topology(spec: str) -> tuple[int, int]:
    """Return (sites, UltraServers per site) of a preset name or ``sites=S,ultraservers=U``.

    Raises ConfigError naming what is wrong.
    """
    if spec in PRESETS:
        return PRESETS[spec]
    m = _SIZE_RE.match(spec.replace(" ", ""))
    if m is None:
        known = ", ".join(PRESETS)
        raise ConfigError(f"unknown topology {spec!r}: a preset ({known}) or sites=S,ultraservers=U")
    sites, per_site = int(m[1]), int(m[2])
    chips = sites * per_site * TRN2.chips_per_ultraserver
    if sites < 1 or per_site < 1 or chips > MAX_CHIPS:
        raise ConfigError(f"topology {spec!r}: 1 to {MAX_CHIPS:,} chips, at least 1 site and 1 UltraServer "
                          f"(this is {chips:,} chips)")
    return sites, per_site


def build_topology(
    spec: str,
    *,
    efa_ports_per_node: int = TRN2.efa_ports_per_node,
) -> Topology:
    """Return the topology of a preset or of ``sites=S,ultraservers=U``, built with vectorised numpy only.

    Raises ConfigError for an unknown preset, a bad size or a bad EFA port count.
    """
    n_sites, per_site = parse_topology(spec)
    return build_fleet(n_sites, per_site, name=spec, efa_ports_per_node=efa_ports_per_node)


def build_fleet(
    n_sites: int,
    ultraservers_per_site: int,
    *,
    name: str = "custom",
    efa_ports_per_node: int = TRN2.efa_ports_per_node,
) -> Topology:
    """Return a fleet of ``n_sites`` sites of ``ultraservers_per_site`` UltraServers each, every node present.

    Raises ConfigError for a non-positive size or a bad EFA port count.
    """
    if n_sites < 1 or ultraservers_per_site < 1:
        raise ConfigError(f"a fleet needs at least 1 site and 1 UltraServer, got {n_sites} x {ultraservers_per_site}")
    return build_sites([ultraservers_per_site] * n_sites, name=name, efa_ports_per_node=efa_ports_per_node)


def build_sites(
    ultraservers: list[int],
    *,
    name: str,
    efa_ports_per_node: int = TRN2.efa_ports_per_node,
    node_present: npt.NDArray[np.bool_] | None = None,
    names: Names | None = None,
) -> Topology:
    """Return a fleet whose site ``s`` has ``ultraservers[s]`` UltraServers (``node_present``: all by default).

    Raises ConfigError for an empty fleet or a bad EFA port count.
    """
    if not ultraservers or min(ultraservers) < 1:
        raise ConfigError(f"a fleet needs at least 1 site and 1 UltraServer a site, got {ultraservers}")
    if not 1 <= efa_ports_per_node <= 64:
        raise ConfigError(f"efa_ports_per_node must be 1..64, got {efa_ports_per_node}")
    n_sites = len(ultraservers)
    cpn, npu = TRN2.chips_per_node, TRN2.nodes_per_ultraserver

    n_us = sum(ultraservers)
    ultraserver_site = np.repeat(np.arange(n_sites, dtype=np.int64), ultraservers)
    n_nodes = n_us * npu
    node_ultraserver = np.repeat(np.arange(n_us, dtype=np.int64), npu)
    chip_node = np.repeat(np.arange(n_nodes, dtype=np.int64), cpn)

    ta, tb, tkind = _node_link_template()
    nodes = np.arange(n_nodes, dtype=np.int64)[:, None]
    ring_next = node_ultraserver[:, None] * npu + (nodes % npu + 1) % npu
    is_ring = (tkind == LINK_KIND_RING)[None, :]
    link_a = (nodes * cpn + ta[None, :]).ravel()
    link_b = np.where(is_ring, ring_next * cpn + tb[None, :], nodes * cpn + tb[None, :]).ravel()
    link_kind = np.broadcast_to(tkind, (n_nodes, tkind.size)).ravel().copy()
    link_node = np.repeat(nodes.ravel(), tkind.size)

    port_local = (np.arange(efa_ports_per_node, dtype=np.int64) * cpn) // efa_ports_per_node
    efa_node = np.repeat(nodes.ravel(), efa_ports_per_node)
    efa_chip = (nodes * cpn + port_local[None, :]).ravel()

    present = np.ones(n_nodes, dtype=bool) if node_present is None else np.asarray(node_present, dtype=bool).copy()
    if present.shape != (n_nodes,):
        raise ConfigError(f"node_present has {present.size} entries for {n_nodes} nodes")
    arrays = (
        ultraserver_site, node_ultraserver, chip_node, link_a, link_b,
        link_kind, link_node, efa_chip, efa_node, present,
    )
    for array in arrays:
        array.setflags(write=False)
    return Topology(name, n_sites, efa_ports_per_node, *arrays, names=names or Names())
