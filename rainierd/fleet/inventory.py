"""A real fleet's inventory, from a TOML file: its sites, their UltraServers
and the nodes in each, with the names an SRE joins on (hostname, instance id,
availability zone).  ``--topology FILE.toml`` reads one; presets and
``sites=S,ultraservers=U`` stay for simulations.

Ids derive from the file's order, so the same file always gives the same
ids: sites are numbered as they appear, UltraServers site by site as they
appear, and node ``index`` (0 to 3, its position in the UltraServer's NeuronLink
ring) of UltraServer ``u`` is node ``4u + index``.  An UltraServer may list
fewer than 4 nodes; the others are absent.  docs/publishing.md shows a file.

::

    name = "us-east-2-training"          # optional; every name: letters, digits, . _ : - (no spaces)
    efa_ports_per_node = 16               # optional (16)

    [[site]]
    name = "use2-dc1"
    availability_zone = "us-east-2a"      # default for its nodes

    [[site.ultraserver]]
    name = "u0017"

    [[site.ultraserver.node]]
    index = 0
    hostname = "ip-10-0-17-8"
    instance_id = "i-0a1b2c3d4e5f60718"   # optional: the bridge refuses reports of another instance
    detail = true                         # optional: export its chips one by one
    efa_devices = ["rdmap16s0", "rdmap32s0"]  # optional: its EFA devices in port order (the bridge's map;
                                          # unset: the natural order of the names it sees at start)
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Annotated, Final

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rainierd.errors import ConfigError
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import MAX_CHIPS, Names, Topology, build_sites, build_topology

# Names become label values and log fields: plain characters only, nothing to escape.
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
# A sysfs device name (/sys/class/infiniband/<name>): a path component, nothing that could leave the directory.
DeviceName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
MAX_NODES: Final = MAX_CHIPS // TRN2.chips_per_node
# Above any inventory a monitor can hold: MAX_NODES entries of 512 bytes (a node with every name at its
# longest takes some 450; the usual, with a hostname and an instance id, about 110).
MAX_INVENTORY_BYTES: Final = MAX_NODES * 512


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NodeEntry(_Strict):
    """One trn2 node: its place in its UltraServer and what it is called."""

    index: Annotated[int, Field(ge=0, lt=TRN2.nodes_per_ultraserver)]
    hostname: Name | None = None
    instance_id: Name | None = None
    availability_zone: Name | None = None
    detail: bool = False  # export this node's chips one by one (docs/metrics.md: detail nodes)
    efa_devices: Annotated[list[DeviceName], Field(min_length=1)] | None = None  # EFA device names, port order

    @model_validator(mode="after")
    def _distinct_devices(self) -> NodeEntry:
        if self.efa_devices is not None and len(set(self.efa_devices)) != len(self.efa_devices):
            raise ValueError(f"node {self.index} lists an EFA device twice: {self.efa_devices}")
        return self


class UltraServerEntry(_Strict):
    """One UltraServer and the nodes of it in the fleet (1 to 4)."""

    name: Name
    node: Annotated[list[NodeEntry], Field(min_length=1, max_length=TRN2.nodes_per_ultraserver)]

    @model_validator(mode="after")
    def _distinct_indices(self) -> UltraServerEntry:
        indices = [n.index for n in self.node]
        if len(set(indices)) != len(indices):
            raise ValueError(f"UltraServer {self.name!r} lists a node index twice: {sorted(indices)}")
        return self


class SiteEntry(_Strict):
    """One site (data centre) and its UltraServers."""

    name: Name
    availability_zone: Name | None = None
    ultraserver: Annotated[list[UltraServerEntry], Field(min_length=1)]


class InventoryModel(_Strict):
    """The whole file."""

    name: Name = "inventory"
    efa_ports_per_node: Annotated[int, Field(ge=1, le=64)] | None = None
    site: Annotated[list[SiteEntry], Field(min_length=1)]

    @model_validator(mode="after")
    def _distinct_names(self) -> InventoryModel:
        def once(kind: str, values: list[str]) -> None:
            seen: set[str] = set()
            for value in values:
                if value in seen:
                    raise ValueError(f"{kind} {value!r} appears twice")
                seen.add(value)

        once("site name", [s.name for s in self.site])
        once("UltraServer name", [u.name for s in self.site for u in s.ultraserver])
        nodes = [n for s in self.site for u in s.ultraserver for n in u.node]
        once("hostname", [n.hostname for n in nodes if n.hostname is not None])
        once("instance_id", [n.instance_id for n in nodes if n.instance_id is not None])
        ports = self.efa_ports_per_node or TRN2.efa_ports_per_node
        for node in nodes:
            if node.efa_devices is not None and len(node.efa_devices) > ports:
                raise ValueError(f"node {node.hostname or node.index} lists {len(node.efa_devices)} EFA devices, "
                                 f"more than its {ports} ports")
        return self


def _read(path: Path) -> str:
    """Return the text of the inventory at ``path``, refusing what cannot be one before reading or parsing it.

    A FIFO or a device would block the start (or never end); a file larger
    than any fleet's inventory, or naming more nodes than a monitor holds,
    would take tens of seconds and a gigabyte to parse only to be refused
    (a million-node file: 38 s and 1.4 GB).  Every node entry has exactly one
    ``index`` key, so the word's count bounds the nodes before parsing.
    Raises ConfigError.
    """
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"inventory {path}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_INVENTORY_BYTES:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"inventory {path}: not a regular file")
        raise ConfigError(f"inventory {path}: {info.st_size:,} bytes, more than any inventory "
                          f"({MAX_INVENTORY_BYTES:,})")
    with os.fdopen(fd, "rb") as file:
        try:
            raw = file.read(MAX_INVENTORY_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"inventory {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_INVENTORY_BYTES:  # it grew while read
        raise ConfigError(f"inventory {path}: more than {MAX_INVENTORY_BYTES:,} bytes")
    if (mentions := raw.count(b"index")) > MAX_NODES:
        raise ConfigError(f"inventory {path}: {mentions:,} node entries or more, more than {MAX_NODES:,} "
                          f"({MAX_CHIPS:,} chips)")
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"inventory {path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def parse_inventory(text: str, *, source: str) -> InventoryModel:
    """Return the inventory the TOML ``text`` holds, checked against the format (``source`` names it in errors).

    Raises ConfigError naming ``source``, the key and what is wrong with it.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"inventory {source}: {exc}") from None
    try:
        return InventoryModel.model_validate(document)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "file"
        raise ConfigError(f"inventory {source}: {where}: {first['msg'].removeprefix('Value error, ')}") from None


def load_inventory(path: Path, *, efa_ports_per_node: int = TRN2.efa_ports_per_node) -> Topology:
    """Return the topology a TOML inventory describes (the file's EFA port count wins over the argument).

    Raises ConfigError naming the file and what is wrong with it.
    """
    model = parse_inventory(_read(path), source=str(path))
    sizes = [len(site.ultraserver) for site in model.site]
    per_us = TRN2.nodes_per_ultraserver
    n_nodes = sum(sizes) * per_us
    if n_nodes * TRN2.chips_per_node > MAX_CHIPS:
        raise ConfigError(f"inventory {path}: {n_nodes * TRN2.chips_per_node:,} chips, more than {MAX_CHIPS:,}")
    present = np.zeros(n_nodes, dtype=bool)
    hostnames: list[str | None] = [None] * n_nodes
    instance_ids: list[str | None] = [None] * n_nodes
    zones: list[str | None] = [None] * n_nodes
    efa_devices: list[tuple[str, ...] | None] = [None] * n_nodes
    detail: list[int] = []
    us = 0
    for site in model.site:
        for ultraserver in site.ultraserver:
            for entry in ultraserver.node:
                node = us * per_us + entry.index
                present[node] = True
                hostnames[node], instance_ids[node] = entry.hostname, entry.instance_id
                zones[node] = entry.availability_zone or site.availability_zone
                efa_devices[node] = tuple(entry.efa_devices) if entry.efa_devices is not None else None
                if entry.detail:
                    detail.append(node)
            us += 1
    names = Names(
        sites=tuple(s.name for s in model.site),
        ultraservers=tuple(u.name for s in model.site for u in s.ultraserver),
        hostnames=tuple(hostnames), instance_ids=tuple(instance_ids), availability_zones=tuple(zones),
        detail=tuple(detail), efa_devices=tuple(efa_devices),
    )
    return build_sites(sizes, name=model.name, efa_ports_per_node=model.efa_ports_per_node or efa_ports_per_node,
                       node_present=present, names=names)


def load_topology(spec: str, *, efa_ports_per_node: int = TRN2.efa_ports_per_node) -> Topology:
    """Return the topology ``--topology`` names: an inventory file (``*.toml``), a preset or a size.

    Raises ConfigError when it is none of them, or is a bad one.
    """
    if spec.endswith(".toml"):
        return load_inventory(Path(spec), efa_ports_per_node=efa_ports_per_node)
    return build_topology(spec, efa_ports_per_node=efa_ports_per_node)
