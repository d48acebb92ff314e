"""Identities on the three-node NATS cluster (harness/cluster.py with
harness/nats_accounts.py): NATS cannot bind a client id to a user, but it
keeps MQTT sessions per account, so a node agent in the agents' account that
borrows the monitor's client id, on another node of the cluster, opens a
session of its own and the monitor's is untouched; and what a node agent
retains on its own topic is never replayed to a monitor."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import pytest

from harness.cluster import Cluster, cluster
from harness.nats_accounts import Identities
from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import TICK_S, within
from harness.waits import wait_until
from rainierd.wire.topics import status_topic
from tests.conftest import Daemon
from tests.integration.test_accounting import sim_totals
from tests.integration.test_identity import ATTACKS, COUNTERS, ready

PROTOCOL = ("--mqtt-protocol", "3.1.1")  # NATS speaks MQTT 3.1.1 only
V311 = aiomqtt.ProtocolVersion.V311
TICKS = 16
MONITOR = "rainierd-monitor"


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[Cluster]:
    """A three-node NATS cluster with the shipped users in their accounts, and node agent n3."""
    with cluster("nats", tmp_path / "nats", identities=Identities.generate(agents=("n3",))) as running:
        yield running


def credentials(nats: Cluster, user: str) -> dict[str, str]:
    """Return ``user``'s settings as scripts/cluster prints them: its client id is its name (NATS does not make
    it so, and only the status subject of that name is the user's to publish)."""
    assert nats.identities is not None
    return {"RAINIERD_MQTT_USERNAME": user, "RAINIERD_MQTT_CLIENT_ID": user,
            "RAINIERD_MQTT_PASSWORD": nats.identities.password(user)}


def agent(nats: Cluster, node: int, identifier: str) -> aiomqtt.Client:
    """Return a client logging in as node agent n3 to cluster node ``node``, with client id ``identifier``."""
    assert nats.identities is not None
    return aiomqtt.Client("127.0.0.1", nats.nodes[node].mqtt_port, identifier=identifier, username="n3",
                          password=nats.identities.password("n3"), protocol=V311, timeout=within(10))


async def read_retained(nats: Cluster, node: int, topic_filter: str, user: str) -> dict[str, bytes]:
    """Return the retained messages under ``topic_filter`` that ``user`` is sent on subscribing."""
    assert nats.identities is not None
    got: dict[str, bytes] = {}
    async with aiomqtt.Client("127.0.0.1", nats.nodes[node].mqtt_port, identifier=f"{user}-reader", username=user,
                              password=nats.identities.password(user), protocol=V311, timeout=within(10)) as reader:
        await reader.subscribe(topic_filter, qos=1)
        with contextlib.suppress(TimeoutError):  # retained messages come at once; then, quiet
            async with asyncio.timeout(within(2)):
                async for message in reader.messages:
                    got[message.topic.value] = bytes(message.payload)  # type: ignore[arg-type]
    return got


async def test_a_node_agent_cannot_take_the_monitors_session_over_on_another_node(
    nats: Cluster, start_rainierd: object,
) -> None:
    """The monitor on node 1, the simulator on node 2; node agent n3 connects ATTACKS times to node 3 with the
    monitor's client id: the monitor never reconnects, /readyz answers 200 at every poll, it applies every frame
    and loses none, and its retained status reads online."""
    port = free_port()
    monitor: Daemon = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", nats.urls(0), *PROTOCOL, "--metrics-addr", f"127.0.0.1:{port}",
        "--tick", str(TICK_S), "--stale-after-ticks", "1000", "--reconnect-grace", "0",
        env=credentials(nats, MONITOR), name="monitor")
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 30, "the monitor to connect")
    sim: Daemon = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", nats.urls(1), *PROTOCOL, "--tick", str(TICK_S), "--ticks", str(TICKS),
        "--seed", "4", env=credentials(nats, "rainierd-sim"), name="simulate")
    await wait_until(lambda: current_values(port).get("rainier_ingest_frames_applied_total", 0) > 0, 30,
                     "the monitor to apply frames")

    polls = []
    for _ in range(ATTACKS):
        with contextlib.suppress(aiomqtt.MqttError):
            async with agent(nats, 2, MONITOR):
                for _ in range(4):
                    await asyncio.sleep(TICK_S / 4)
                    polls.append(await asyncio.to_thread(ready, port))
    assert await asyncio.to_thread(sim.proc.wait, within(TICKS * TICK_S + 30)) == 0, sim.log()
    published = sim_totals(sim)["frames_published"]
    with contextlib.suppress(AssertionError):  # the assert below says what is missing
        await wait_until(lambda: current_values(port).get("rainier_ingest_frames_applied_total") == published, 10,
                         "every frame to be applied")

    values = current_values(port)
    assert ({k: values.get(k) for k in COUNTERS}, values.get("rainier_ingest_frames_applied_total"),
            values.get("rainier_mqtt_connected")) == (dict.fromkeys(COUNTERS, 0), published, 1), monitor.log()[-3000:]
    assert polls == [200] * len(polls)
    status = status_topic(MONITOR)
    assert await read_retained(nats, 0, status, MONITOR) == {status: b"online"}


async def test_a_node_agents_retained_telemetry_never_reaches_a_monitor(nats: Cluster) -> None:
    """n3 publishes a retained frame on its own telemetry topic: a monitor subscribed at the time is sent it
    live (the control: the path is open), a monitor that subscribes afterwards is not sent it (retained messages
    stay in the agents' account; an import carries live messages only)."""
    assert nats.identities is not None
    topic = "rainier/v1/telemetry/s0/b0/n3"
    async with aiomqtt.Client("127.0.0.1", nats.nodes[0].mqtt_port, identifier=MONITOR, username=MONITOR,
                              password=nats.identities.password(MONITOR), protocol=V311,
                              timeout=within(10)) as monitor:
        await monitor.subscribe("rainier/v1/telemetry/#", qos=0)
        async with agent(nats, 0, "n3") as n3:
            await n3.publish(topic, b"retained by n3", qos=1, retain=True)
        async with asyncio.timeout(within(5)):
            live = await anext(aiter(monitor.messages))
    assert (live.topic.value, live.payload) == (topic, b"retained by n3")
    assert await read_retained(nats, 0, "rainier/v1/telemetry/#", "rainierd-monitor-0") == {}
