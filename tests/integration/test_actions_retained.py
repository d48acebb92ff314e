"""The advisories' retained documents (sinks/retained.py) on a real Mosquitto, published by the monitor's own
MQTT session: a document a node while its advisory stands, one for the brake, removed when the advisory clears;
the latest of each again after the broker lost them all; and a restarted monitor's stale documents removed,
another shard's left alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiomqtt

from harness.waits import wait_until
from rainierd.core.config import MonitorConfig
from rainierd.fleet.topology import build_topology
from rainierd.monitor import Monitor
from rainierd.mqtt.config import Broker as MqttBroker
from rainierd.mqtt.config import MqttConfig
from rainierd.mqtt.supervisor import supervise
from rainierd.wire.topics import ACTIONS_ROOT
from tests.actions_views import advisory, named, view
from tests.conftest import MosquittoProcess

T_S = 1_700_000_000.0


async def retained(port: int) -> dict[str, Any]:
    """Return every retained document under rainier/v1/actions/ on the broker, by topic."""
    found: dict[str, Any] = {}
    async with aiomqtt.Client("127.0.0.1", port, identifier="test-actions-reader") as client:
        await client.subscribe(f"{ACTIONS_ROOT}/#", qos=1)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):  # retained messages arrive with the SUBACK, at once
                async for message in client.messages:
                    if message.retain and message.payload:  # not a publication live while we listen
                        found[str(message.topic)] = json.loads(bytes(message.payload))  # type: ignore[arg-type]
    return found


async def settled(port: int, expected: dict[str, Any], what: str) -> None:
    """Wait until the broker's retained documents are ``expected`` (topics and their documents)."""
    last: list[dict[str, Any]] = [{}]

    async def poll() -> bool:
        last[0] = await retained(port)
        return last[0] == expected

    deadline = asyncio.get_running_loop().time() + 20
    while not await poll():
        assert asyncio.get_running_loop().time() < deadline, f"{what}: {sorted(last[0])} != {sorted(expected)}"
        await asyncio.sleep(0.2)


def document(v: Any, key: str, body: dict[str, Any], shard: str = "0/1") -> dict[str, Any]:
    return {"schema_version": 1, "t_s": v.t_s, "dry_run": v.dry_run, "shard": shard, key: body}


@contextlib.asynccontextmanager
async def monitor_session(port: int) -> AsyncIterator[Monitor]:
    """A monitor's MQTT session (the one that publishes its events) on the broker at ``port``."""
    monitor = Monitor(build_topology("demo"), MonitorConfig(), qos=1)
    config = MqttConfig(brokers=(MqttBroker("127.0.0.1", port),), client_id="test-actions-monitor",
                        protocol="3.1.1")
    task = asyncio.create_task(supervise(config, monitor.session.consume, state=monitor.connection))
    try:
        await wait_until(lambda: monitor.connection.connected, 10, "the monitor connected")
        yield monitor
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class TestRetainedDocuments:
    async def test_each_node_and_the_brake_then_a_clearing(self, mosquitto_process: MosquittoProcess) -> None:
        """Two advisories stand as two retained documents beside the brake's, each under its node's id
        (rainier/v1/actions/s0/u0/n1: docs/ids.md); a state change replaces its node's document; an advisory that
        clears leaves no document behind."""
        port = mosquitto_process.port
        first = view(named(1), named(2, state="pending"), t_s=T_S)
        second = view(named(2), t_s=T_S + 10)
        async with monitor_session(port) as monitor:
            monitor.actions_out.offer(first)
            await settled(port, {
                f"{ACTIONS_ROOT}/s0/u0/n1": document(first, "advisory", first.advisories[0].document()),
                f"{ACTIONS_ROOT}/s0/u0/n2": document(first, "advisory", first.advisories[1].document()),
                f"{ACTIONS_ROOT}/_brake": document(first, "brake", first.brake.document()),
            }, "the first view's documents")
            monitor.actions_out.offer(second)
            await settled(port, {
                f"{ACTIONS_ROOT}/s0/u0/n2": document(second, "advisory", second.advisories[0].document()),
                f"{ACTIONS_ROOT}/_brake": document(first, "brake", first.brake.document()),
            }, "the second view's documents")

    async def test_a_broker_that_lost_everything_gets_the_latest_back(
            self, mosquitto_process: MosquittoProcess) -> None:
        """While the broker is down the changes wait; once it is back (its retained store empty) the monitor
        publishes the latest document of each standing advisory, and none of the one that cleared meanwhile."""
        port = mosquitto_process.port
        before = view(advisory("n1", node_id=1), advisory("n2", node_id=2), t_s=T_S)
        during = view(advisory("n2", node_id=2, state="suppressed", suppressed_by="brake"), t_s=T_S + 5)
        async with monitor_session(port) as monitor:
            monitor.actions_out.offer(before)
            await settled(port, {f"{ACTIONS_ROOT}/{n}": document(before, "advisory", a.document())
                                 for n, a in (("n1", before.advisories[0]), ("n2", before.advisories[1]))}
                          | {f"{ACTIONS_ROOT}/_brake": document(before, "brake", before.brake.document())},
                          "the documents before the outage")
            await asyncio.to_thread(mosquitto_process.kill)
            await wait_until(lambda: not monitor.connection.connected, 10, "the monitor saw the broker go")
            monitor.actions_out.offer(during)  # the analysis goes on: it only queues
            await asyncio.to_thread(mosquitto_process.start)
            await settled(port, {
                f"{ACTIONS_ROOT}/n2": document(during, "advisory", during.advisories[0].document()),
                f"{ACTIONS_ROOT}/_brake": document(before, "brake", before.brake.document()),
            }, "the latest documents after the outage")

    async def test_a_restarted_monitor_removes_its_own_stale_documents_only(
            self, mosquitto_process: MosquittoProcess) -> None:
        """Documents this shard left from a previous run for nodes without an advisory now are removed once the
        first view is known (one under a flat name, as before nodes were named by id, too); another shard's stay;
        a standing node's is replaced by the current one."""
        port = mosquitto_process.port
        old = view(named(1), advisory("gone", node_id=9), t_s=T_S - 100)
        other = document(old, "advisory", old.advisories[1].document(), shard="1/2")
        async with aiomqtt.Client("127.0.0.1", port, identifier="test-previous-run") as client:
            stored = {f"{ACTIONS_ROOT}/gone": document(old, "advisory", old.advisories[1].document()),
                      f"{ACTIONS_ROOT}/s0/u0/n1": document(old, "advisory", old.advisories[0].document()),
                      f"{ACTIONS_ROOT}/other-shards": other}
            for topic, payload in stored.items():
                await client.publish(topic, json.dumps(payload).encode(), qos=1, retain=True)
        now = view(named(1, state="expired"), t_s=T_S)
        async with monitor_session(port) as monitor:
            # Heard before the first view: judged once it comes, so s0/u0/n1 is never removed and republished.
            await wait_until(lambda: monitor.actions_out.heard == 3, 10, "the previous run's documents heard")
            monitor.actions_out.offer(now)
            await settled(port, {
                f"{ACTIONS_ROOT}/s0/u0/n1": document(now, "advisory", now.advisories[0].document()),
                f"{ACTIONS_ROOT}/other-shards": other,
                f"{ACTIONS_ROOT}/_brake": document(now, "brake", now.brake.document()),
            }, "the stale document removed, the other shard's kept")
            assert monitor.actions_out.removed_stale == 1

