"""A fleet's inventory (the TOML of ``rainierd/fleet/inventory.py``) built from what
its nodes say of themselves, so an SRE never types 31,000 hostnames:
``rainierd inventory from-neuron-ls`` reads each node's ``neuron-ls
--json-output`` (one file a node, collected by a loop over ssh or an SSM
command) and, for the UltraServers, the server and node ids that AWS's own
tools read on each node (one line a node).  docs/real-nodes.md says how to
collect both.

What AWS documents, and where (aws-neuron/aws-neuron-sdk; a file, the commit
that last changed it, its lines):

- ``neuron-ls -j`` is a JSON array with one object per Neuron device, whose
  ``neuron_device`` is the device's logical id
  (tools/neuron-sys-tools/neuron-ls.rst: at 2ae3525e, Neuron 2.22, where the
  option appears, lines 26 and 208-251, field definitions 252-265; at
  539a73c5, Neuron 2.29, the same with ``cpu_affinity``, ``numa_node`` and
  ``neuroncore_ids`` added in 2.25 (56af36ca), lines 29-30 and 213-272,
  definitions 277-293).  rainierd reads ``neuron_device`` and nothing else:
  it checks that a node has exactly the trn2 node's 16 devices, 0 to 15.
- A trn2u node's UltraServer is named by the files
  ``/sys/class/neuron_device/server_id_4`` and ``node_id_4`` (and ``_2``
  for the half-UltraServer configuration); a node in no UltraServer reads
  ``0000000000000000`` and ``-1``.  AWS's init script reads them on every
  node and prints ``<server id>:<node id>:<fqdn>`` a line
  (src/k8/k8s-ultraserver-init-script.sh at 3afa0fdf, lines 17-18, 33-61),
  and, sorted, prefixes a topology id (lines 64-69); EKS labels the same ids
  on each node as ``neuron.amazonaws.com/ultraserver-server-id-4`` and
  ``ultraserver-node-id-4`` (deploy/eks/ultraserver.rst at 3afa0fdf, lines
  336-363: four nodes of server ``bog79p1y8tetj5uu``, node ids 0 to 3).
  ``--ultraservers FILE`` takes those lines, with or without the topology id.
- An EC2 instance id is ``i-`` and 8 or 17 lowercase letters and digits
  (Amazon EC2 User Guide, "Resource IDs").

What the documentation does not say, and what this module does about it:

- ``neuron-ls -j`` carries neither the instance id nor the hostname (the
  text output's header has the instance id; the JSON does not): each file's
  name, or the command line, gives them (``HOST[@INSTANCE_ID]``).
- No ``neuron-ls -j`` up to Neuron 2.33 has an UltraServer field.  Neuron
  2.34 replaces ``-j`` with ``--output-format json``, which "adds top-level
  fields for information that applies to more than one device, such as
  instance and UltraServer details" (the announcement
  announce-intent-eos-neuron-ls-json, 2026-10-16, on
  awsdocs-neuron.readthedocs-hosted.com); none of those fields' names or
  shapes is published anywhere we can cite.  So a 2.34 file (a JSON object)
  is read for its devices only: its one top-level member that is a list of
  objects carrying ``neuron_device``, else it is refused.  Its UltraServer
  fields are not read; the UltraServer comes from ``--ultraservers``.
- Whether ``node_id_4`` is the node's place in the UltraServer's NeuronLink
  ring: it is taken as the inventory's ``index``.
- Where a node has no UltraServer identity (no ``--ultraservers`` line, or
  the defaults above), it is its own UltraServer (index 0), with a warning.

Refused, one line each (ConfigError; the CLI exits 2): a file that is not
such a listing; a node with another device count or a device listed twice;
two nodes claiming one UltraServer slot; a node id outside 0-3; a host given
two identities; a hostname or instance id given twice.

The output is deterministic whatever the order of its inputs: UltraServers
by server id, then the nodes of no UltraServer by hostname.  Ids derive from
that order (docs/publishing.md), so the monitor and every bridge must read
the same file.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from rainierd.errors import ConfigError
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.inventory import NAME_PATTERN, parse_inventory
from rainierd.fleet.topology import MAX_CHIPS

# A 16-device listing is about 10 KB; anything this long is not one.
MAX_LISTING_BYTES: Final = 4 * 2**20
NO_SERVER: Final = "0000000000000000"  # the init script's default: not in an UltraServer
NO_NODE: Final = -1
_INSTANCE_ID: Final = re.compile(r"^i-(?:[0-9a-z]{8}|[0-9a-z]{17})$")
_NAME: Final = re.compile(NAME_PATTERN)

Format = Literal["json-output", "output-format"]


@dataclass(frozen=True, slots=True)
class NodeListing:
    """One node's neuron-ls output: who it is and the Neuron devices it lists."""

    hostname: str
    instance_id: str | None
    devices: tuple[int, ...]  # the listing's neuron_device values, in its order
    format: Format  # "json-output": neuron-ls -j (to 2.33); "output-format": the 2.34 object
    source: str  # the file, for messages


@dataclass(frozen=True, slots=True)
class Slot:
    """A node's place in an UltraServer: its server id and node id (``server_id_4``, ``node_id_4``)."""

    server_id: str
    node_id: int


@dataclass(frozen=True, slots=True)
class Conversion:
    """The inventory made, and what the SRE should know about it (one line each)."""

    toml: str
    warnings: tuple[str, ...]


def _name(value: str, *, what: str, source: str) -> str:
    if not _NAME.match(value):
        raise ConfigError(f"{source}: {what} {value!r} is not a name rainierd takes (1-128 of letters, digits, "
                          ". _ : -, starting with a letter or digit)")
    return value


def parse_node_argument(argument: str) -> tuple[str, str | None, Path]:
    """Return (hostname, instance id or None, path) of a ``[HOST[@INSTANCE_ID]=]FILE`` argument.

    Without ``HOST=``, the file's name says it: ``HOST.json`` or ``HOST@INSTANCE_ID.json``.
    Raises ConfigError when neither says who the node is.
    """
    identity, equals, path = argument.partition("=")
    if not equals:
        path, name = argument, Path(argument).name
        if not name.endswith(".json"):
            raise ConfigError(f"{argument}: cannot tell whose listing it is: name it HOST.json or "
                              "HOST@INSTANCE_ID.json, or give HOST[@INSTANCE_ID]=FILE")
        identity = name.removesuffix(".json")
    hostname, at, instance_id = identity.partition("@")
    _name(hostname, what="hostname", source=argument)
    if at and not _INSTANCE_ID.match(instance_id):
        raise ConfigError(f"{argument}: {instance_id!r} is not an EC2 instance id (i- and 8 or 17 letters and "
                          "digits)")
    return hostname, instance_id if at else None, Path(path)


def _device_ids(entries: list[object], *, source: str) -> tuple[int, ...]:
    ids = []
    for entry in entries:
        device = entry.get("neuron_device") if isinstance(entry, dict) else None
        if not isinstance(device, int) or isinstance(device, bool) or device < 0:
            raise ConfigError(f"{source}: a device entry without a neuron_device id: not neuron-ls's listing")
        ids.append(device)
    return tuple(ids)


def parse_devices(text: str, *, source: str) -> tuple[tuple[int, ...], Format]:
    """Return the Neuron device ids a neuron-ls JSON listing names, and which format it is in.

    Raises ConfigError when ``text`` is neither ``-j``'s array nor a 2.34 object holding one device list.
    """
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source}: not JSON ({exc})") from None
    if isinstance(document, list):
        return _device_ids(document, source=source), "json-output"
    if isinstance(document, dict):
        lists = [value for value in document.values()
                 if isinstance(value, list) and value
                 and all(isinstance(item, dict) and "neuron_device" in item for item in value)]
        if len(lists) == 1:
            return _device_ids(lists[0], source=source), "output-format"
        raise ConfigError(f"{source}: a JSON object with {len(lists)} lists of devices (neuron_device): neuron-ls "
                          "2.34's --output-format json is read for its one device list only, its other fields "
                          "being undocumented (docs/real-nodes.md)")
    raise ConfigError(f"{source}: neither neuron-ls -j's array of devices nor an object holding one")


def read_node_listing(argument: str) -> NodeListing:
    """Return the listing a ``[HOST[@INSTANCE_ID]=]FILE`` argument names, read from its file.

    Raises ConfigError when the file cannot be read or is not a listing.
    """
    hostname, instance_id, path = parse_node_argument(argument)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_LISTING_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_LISTING_BYTES:
        raise ConfigError(f"{path}: more than {MAX_LISTING_BYTES:,} bytes: not one node's neuron-ls listing")
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    devices, form = parse_devices(text, source=str(path))
    return NodeListing(hostname=hostname, instance_id=instance_id, devices=devices, format=form, source=str(path))


def parse_ultraservers(
    text: str, *, source: str, nodes_per_ultraserver: int = TRN2.nodes_per_ultraserver,
) -> dict[str, Slot | None]:
    """Return each host's UltraServer slot (None: in none) from ``<server id>:<node id>:<host>`` lines.

    A line may carry the init script's topology id first; blank lines and ``#`` comments are skipped.
    Raises ConfigError on a malformed line, a node id outside the UltraServer, or a host given twice
    with different ids.
    """
    slots: dict[str, Slot | None] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()  # noqa: PLW2901 - the stripped line is the line
        if not line or line.startswith("#"):
            continue
        fields = line.split(":")
        if len(fields) == 4 and fields[0].isdigit():
            fields = fields[1:]  # the sorted form: <topology id>:<server id>:<node id>:<host>
        where = f"{source}:{number}"
        if len(fields) != 3:
            raise ConfigError(f"{where}: {line!r} is not <server id>:<node id>:<host>")
        server, node_text, host = fields
        try:
            node = int(node_text)
        except ValueError:
            raise ConfigError(f"{where}: node id {node_text!r} is not an integer") from None
        _name(host, what="host", source=where)
        slot: Slot | None
        if server == NO_SERVER or node == NO_NODE:
            slot = None
        else:
            _name(server, what="server id", source=where)
            if not 0 <= node < nodes_per_ultraserver:
                raise ConfigError(f"{where}: node id {node} of UltraServer {server}: an UltraServer's nodes are 0 to "
                                  f"{nodes_per_ultraserver - 1}")
            slot = Slot(server, node)
        if host in slots and slots[host] != slot:
            raise ConfigError(f"{where}: host {host} is given two UltraServer slots ({slots[host]} and {slot})")
        slots[host] = slot
    return slots


def _label(host: str) -> str:
    return host.partition(".")[0]


def _slot_of(node: NodeListing, slots: dict[str, Slot | None], by_label: dict[str, list[str]]) -> tuple[
        bool, Slot | None]:
    """Return (whether a line names the node, its slot): its hostname exactly, else its first DNS label
    (``hostname`` against ``hostname --fqdn``) when that names one host only."""
    if node.hostname in slots:
        return True, slots[node.hostname]
    hosts = by_label.get(_label(node.hostname), [])
    if len(hosts) > 1:
        raise ConfigError(f"{node.source}: host {node.hostname} matches {len(hosts)} UltraServer lines "
                          f"({', '.join(sorted(hosts))}): give full hostnames")
    return (True, slots[hosts[0]]) if hosts else (False, None)


def _check_node(node: NodeListing, devices_per_node: int) -> None:
    if len(set(node.devices)) != len(node.devices):
        twice = sorted({d for d in node.devices if node.devices.count(d) > 1})
        raise ConfigError(f"{node.source}: node {node.hostname} lists Neuron device {twice[0]} twice")
    if sorted(node.devices) != list(range(devices_per_node)):
        raise ConfigError(f"{node.source}: node {node.hostname} lists {len(node.devices)} Neuron devices "
                          f"({', '.join(map(str, sorted(node.devices)))}), a trn2 node has {devices_per_node} "
                          f"(0 to {devices_per_node - 1}): a device is missing, or it is not a trn2 node")


def _check_unique(nodes: list[NodeListing]) -> None:
    seen: dict[str, str] = {}
    for node in nodes:
        for key in (f"hostname {node.hostname}",
                    *([f"instance id {node.instance_id}"] if node.instance_id is not None else [])):
            if key in seen:
                raise ConfigError(f"{node.source}: {key} is also {seen[key]}'s")
            seen[key] = node.source


def _render(ultraservers: list[tuple[str, list[tuple[int, NodeListing]]]], *, name: str, site: str,
            availability_zone: str | None) -> str:
    lines = [f"# Made by rainierd inventory from-neuron-ls from {sum(len(n) for _, n in ultraservers)} nodes' "
             "neuron-ls listings (docs/real-nodes.md).",
             "# Node ids derive from this file's order: give the monitor and every bridge this same file.",
             f'name = "{name}"', "", "[[site]]", f'name = "{site}"']
    if availability_zone is not None:
        lines.append(f'availability_zone = "{availability_zone}"')
    for us_name, members in ultraservers:
        lines += ["", "  [[site.ultraserver]]", f'  name = "{us_name}"']
        for index, node in members:
            lines += ["    [[site.ultraserver.node]]", f"    index = {index}", f'    hostname = "{node.hostname}"']
            if node.instance_id is not None:
                lines.append(f'    instance_id = "{node.instance_id}"')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class _Grouping:
    """The nodes sorted into UltraServers: by server id and node id, and those in none."""

    servers: dict[str, dict[int, NodeListing]]
    alone: list[NodeListing]
    unlisted: list[str]  # hostnames no --ultraservers line names
    unused: list[str]  # --ultraservers hosts that are no node's


def _group(nodes: list[NodeListing], slots: dict[str, Slot | None]) -> _Grouping:
    by_label: dict[str, list[str]] = defaultdict(list)
    for host in slots:
        by_label[_label(host)].append(host)
    servers: dict[str, dict[int, NodeListing]] = defaultdict(dict)
    alone: list[NodeListing] = []
    unlisted: list[str] = []
    used: set[str] = set()
    for node in nodes:
        listed, slot = _slot_of(node, slots, by_label)
        if listed:
            used.add(node.hostname if node.hostname in slots else by_label[_label(node.hostname)][0])
        else:
            unlisted.append(node.hostname)
        if slot is None:
            alone.append(node)
            continue
        members = servers[slot.server_id]
        if slot.node_id in members:
            raise ConfigError(f"{node.source}: nodes {members[slot.node_id].hostname} and {node.hostname} both claim "
                              f"node {slot.node_id} of UltraServer {slot.server_id}")
        members[slot.node_id] = node
    return _Grouping(dict(servers), alone, unlisted, sorted(set(slots) - used))


def _some(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _warnings(grouping: _Grouping, nodes: list[NodeListing], *, slots_given: bool,
              nodes_per_ultraserver: int) -> tuple[str, ...]:
    warnings = []
    if alone := grouping.alone:
        unlisted = len(grouping.unlisted)
        why = ("no --ultraservers given" if not slots_given else
               ", ".join([*([f"{unlisted} not in --ultraservers"] if unlisted else []),
                          *([f"{len(alone) - unlisted} in none there"] if len(alone) > unlisted else [])]))
        warnings.append(f"{len(alone)} node(s) have no UltraServer identity ({why}): each is its own UltraServer, "
                        f"its NeuronLink ring links unjudged: {_some(sorted(n.hostname for n in alone))}")
    for server, members in sorted(grouping.servers.items()):
        if len(members) < nodes_per_ultraserver:
            warnings.append(f"UltraServer {server}: {len(members)} of its {nodes_per_ultraserver} nodes listed "
                            f"(node ids {', '.join(map(str, sorted(members)))})")
    if grouping.unused:
        warnings.append(f"{len(grouping.unused)} --ultraservers line(s) name no node listed: {_some(grouping.unused)}")
    if newer := [n.source for n in nodes if n.format == "output-format"]:
        warnings.append(f"{len(newer)} listing(s) in neuron-ls 2.34's --output-format json, whose fields are not "
                        "documented yet: only their device lists were read")
    return tuple(warnings)


def build_inventory(
    nodes: list[NodeListing], slots: dict[str, Slot | None] | None = None, *, name: str = "inventory",
    site: str = "site0", availability_zone: str | None = None, devices_per_node: int = TRN2.chips_per_node,
    nodes_per_ultraserver: int = TRN2.nodes_per_ultraserver,
) -> Conversion:
    """Return the inventory of ``nodes`` (one site), grouped into UltraServers by ``slots`` (host → slot).

    Raises ConfigError on conflicting input (module docstring); everything else the SRE should know (nodes
    in no UltraServer, UltraServers partly listed, lines naming no node, 2.34 listings) is a warning.
    """
    for value, what in ((name, "inventory name"), (site, "site name"),
                        *([(availability_zone, "availability zone")] if availability_zone is not None else [])):
        _name(value, what=what, source="command line")
    if not nodes:
        raise ConfigError("no node listings given")
    _check_unique(nodes)
    for node in nodes:
        _check_node(node, devices_per_node)
    grouping = _group(nodes, slots or {})
    ultraservers = [(server, sorted(members.items())) for server, members in sorted(grouping.servers.items())]
    ultraservers += [(node.hostname, [(0, node)]) for node in sorted(grouping.alone, key=lambda n: n.hostname)]
    if len(ultraservers) * nodes_per_ultraserver * devices_per_node > MAX_CHIPS:
        raise ConfigError(f"{len(ultraservers):,} UltraServers: more chips than a monitor holds ({MAX_CHIPS:,})")
    text = _render(ultraservers, name=name, site=site, availability_zone=availability_zone)
    parse_inventory(text, source="made from the listings")  # what the monitor will read, checked the same way
    return Conversion(toml=text, warnings=_warnings(grouping, nodes, slots_given=slots is not None,
                                                    nodes_per_ultraserver=nodes_per_ultraserver))
