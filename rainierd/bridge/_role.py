"""The role's configuration: what ``rainierd bridge neuron-monitor`` runs by,
as one frozen value built once from the settings
(``Settings.bridge_role_config``), so the role never reads the settings
whole and a test can hand it any.

``find_node`` is here because building it needs it: the node a bridge speaks
for is named on the command line against the inventory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rainierd.bridge._config import BridgeConfig
from rainierd.errors import ConfigError
from rainierd.fleet import Topology

if TYPE_CHECKING:
    from rainierd.http.config import HttpConfig
    from rainierd.mqtt import MqttConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeRoleConfig:
    """One node's bridge: the node, what it judges by, where it publishes and where it serves its metrics."""

    node: int
    node_name: str  # its inventory hostname, else n<id>
    topic: str  # the node's telemetry topic
    bridge: BridgeConfig
    mqtt: MqttConfig
    http: HttpConfig  # its /metrics, /healthz and /readyz, with every role's TLS, basic auth and connection limits


def find_node(topology: Topology, name: str) -> int:
    """Return the id of the node ``name`` (its inventory hostname, or ``n<id>``).

    Raises ConfigError when the fleet has no such node.
    """
    hostnames = topology.names.hostnames
    if name in hostnames:
        return hostnames.index(name)
    if name.startswith("n") and name[1:].isdigit() and int(name[1:]) < topology.n_nodes:
        node = int(name[1:])
        if topology.node_present[node]:
            return node
    raise ConfigError(f"node {name!r} is not in topology {topology.name} (give its inventory hostname or n<id>)")
