"""``rainierd bridge neuron-monitor``: reads neuron-monitor's reports from
stdin, adds the EFA driver's counters, and publishes the node's frames.

    neuron-monitor | rainierd bridge neuron-monitor --topology fleet.toml --node ip-10-0-17-8 \\
        --mqtt-url mqtts://broker:8883

One task reads stdin and turns each report into a frame, one keeps the MQTT
session (the same supervisor as every role: reconnect with backoff) and
publishes them.  A line that is not a report is logged and skipped; the end
of stdin drains what is queued (for up to ``_DRAIN_S``) and stops the bridge
with exit 0, as SIGINT or SIGTERM do at once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Final

import aiomqtt
import structlog

from rainierd.bridge.efa_sysfs import read_efa_counters
from rainierd.bridge.neuron_monitor import NeuronMonitorNode
from rainierd.connection import ConnectionState
from rainierd.dropqueue import DropOldestQueue
from rainierd.errors import ConfigError
from rainierd.inventory import load_topology
from rainierd.lifecycle import run_until_stopped
from rainierd.mqtt import mqtt_config, supervise
from rainierd.settings import Settings
from rainierd.topology import Topology
from rainierd.wire.topics import node_topic

__all__ = ["find_node", "run_bridge"]

log = structlog.get_logger("rainierd.bridge")

_OUTBOX: Final = 64  # frames queued while the broker is away; the oldest go first
_MAX_LINE: Final = 16 * 2**20  # a report is ~100 KB; anything this long is not one
_DRAIN_S: Final = 5.0  # after stdin ends, how long queued frames may wait for the broker


def _report(line: bytes) -> dict[str, object]:
    """Return one line of neuron-monitor's output as a report; raise ValueError or TypeError if it is not one."""
    report = json.loads(line)
    if not isinstance(report, dict):
        raise TypeError("a report is a JSON object")
    return report


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


async def run_bridge(settings: Settings, *, node_name: str, efa_root: Path) -> None:
    """Bridge stdin to MQTT until stdin ends (exit 0) or the task is cancelled.

    Raises ConfigError when ``node_name`` is not a node of the topology.
    """
    await _run_bridge(settings, node_name=node_name, efa_root=efa_root, stop=asyncio.Event())


async def _run_bridge(settings: Settings, *, node_name: str, efa_root: Path, stop: asyncio.Event) -> None:
    topology = load_topology(settings.topology, efa_ports_per_node=settings.efa_ports_per_node)
    node = find_node(topology, node_name)
    # n<id>: the same as the topic's node level, and the username the shipped ACL gives a node agent, whose
    # status topic is its username (docs/security.md); unique in the fleet, so no two bridges share a session.
    config = mqtt_config(settings, client_id=f"n{node}")
    bridge = NeuronMonitorNode(topology, node, publisher=config.client_id)
    topic = node_topic(*topology.node_path(node))
    outbox: DropOldestQueue[bytes] = DropOldestQueue(_OUTBOX)
    log.info("bridging neuron-monitor", node=topology.node_name(node), topic=topic, efa_sysfs=str(efa_root))

    async def read() -> None:
        reader = asyncio.StreamReader(limit=_MAX_LINE)
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
        bad = 0
        while line := await reader.readline():
            try:
                report = _report(line)
                efa = await asyncio.to_thread(read_efa_counters, efa_root)
                payload = json.dumps(bridge.frame(report, efa, t_s=time.time())).encode()
            except (ValueError, TypeError, KeyError) as exc:
                bad += 1
                log.warning("neuron-monitor line skipped", error=str(exc)[:200], skipped=bad)
                continue
            if outbox.offer(payload) is not None:
                log.warning("bridge outbox full; dropped the oldest frame", dropped=outbox.dropped)
        log.info("neuron-monitor input ended", frames=bridge.seq)
        try:
            async with asyncio.timeout(_DRAIN_S):
                await outbox.join()
        except TimeoutError:
            log.warning("bridge stopped with frames unpublished", pending=outbox.qsize())
        stop.set()

    async def publish(client: aiomqtt.Client) -> None:
        while True:
            payload = await outbox.get()
            try:
                await client.publish(topic, payload, qos=settings.mqtt_qos)
            finally:
                outbox.task_done()

    await run_until_stopped("bridge", stop, {
        "bridge-read-stdin": read(),
        "bridge-mqtt-publish": supervise(config, publish, state=ConnectionState()),
    }, node=topology.node_name(node), broker=config.url)
