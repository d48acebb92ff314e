"""Identities bound to credentials, on a real Mosquitto running the shipped
config, ACL and make-credentials' users (deploy/mosquitto/): a node agent's
password cannot take over a monitor's or a shard's session by borrowing its
client id, and the shipped sharded identities (deploy/compose.sharded.yaml)
run two shards side by side, each with its own session and status topic.

An MQTT broker keeps one session per client id and, when a second connection
brings the same id, closes the first (MQTT 5, 3.1.4-3): on a broker that
lets any user pick any id, one agent's credentials can keep a monitor
reconnecting for ever.  The shipped broker replaces every client's id with
its username (``use_username_as_clientid``), so an id is as hard to borrow as
a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import aiomqtt
import pytest
import yaml

from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import TICK_S, within
from harness.waits import wait_until
from rainierd.fleet.shards import shard_view
from rainierd.fleet.topology import build_topology
from rainierd.wire.topics import parse_shard, status_topic
from tests.conftest import Daemon
from tests.helpers import compose_shard_users, statefulset_shard_configs
from tests.integration.test_accounting import sim_totals
from tests.integration.test_authorisation import ShippedBroker, retained, shipped_broker  # noqa: F401 (a fixture)

pytestmark = pytest.mark.mosquitto

STATEFULSET = Path(__file__).parents[2] / "deploy" / "kubernetes" / "sharded" / "monitor-statefulset.yaml"

TICKS = 16
ATTACKS = 7  # the run: 7 takeovers in 20 s
COUNTERS = ("rainier_mqtt_connection_failures_total", "rainier_mqtt_status_overwritten_total",
            "rainier_ingest_frames_lost_total")


def ready(port: int) -> int:
    """Return the HTTP status of the monitor's /readyz."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=within(5)) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def shipped_shards(broker: ShippedBroker, deployment: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Return each shard of ``deployment`` (compose or kubernetes, as shipped) with its client id and the
    environment that gives it its credentials, from make-credentials' files as the deployment reads them."""
    if deployment == "compose":
        return {shard: (broker.credentials[user]["RAINIERD_MQTT_CLIENT_ID"], broker.credentials[user])
                for shard, user in compose_shard_users().items()}
    statefulset = yaml.safe_load(STATEFULSET.read_text())
    shards = {}
    for shard, (_, key) in statefulset_shard_configs(statefulset).items():
        path = broker.secrets / key  # the Secret is made from these files (docs/deploy.md)
        shards[shard] = (tomllib.loads(path.read_text())["mqtt_client_id"], {"RAINIERD_CONFIG": str(path)})
    return shards


def start_monitor(start_rainierd: object, broker: ShippedBroker, env: dict[str, str], shard: str,
                  port: int) -> Daemon:
    return start_rainierd(  # type: ignore[operator,no-any-return]
        "monitor", "--mqtt-url", broker.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S),
        "--shard", shard, "--stale-after-ticks", "1000", "--reconnect-grace", "0",
        env=env, name=f"monitor-{shard.replace('/', 'of')}")


def start_simulator(start_rainierd: object, broker: ShippedBroker) -> Daemon:
    return start_rainierd(  # type: ignore[operator,no-any-return]
        "simulate", "--mqtt-url", broker.url, "--tick", str(TICK_S), "--ticks", str(TICKS), "--seed", "4",
        env=broker.credentials["rainierd-sim"], name="simulate")


async def connected(port: int) -> None:
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 20, "the monitor to connect")


async def all_applied(sim: Daemon, ports: dict[str, int]) -> dict[str, dict[str, float]]:
    """Wait for the simulator to finish and each monitor (by its shard) to apply its share; return their
    scrapes."""
    assert await asyncio.to_thread(sim.proc.wait, within(TICKS * TICK_S + 20)) == 0, sim.log()

    def settled() -> bool:
        return all(current_values(port).get("rainier_ingest_frames_applied_total", 0) == share(shard, sim)
                   for shard, port in ports.items())

    with contextlib.suppress(AssertionError):  # the asserts below say what is missing
        await wait_until(settled, 10, "each monitor to apply its share of the published frames")
    return {shard: current_values(port) for shard, port in ports.items()}


def share(shard: str, sim: Daemon) -> int:
    """Return the frames the simulator published that are ``shard``'s: each tick, one per node of its
    UltraServers and one per site whose facility frames it takes."""
    topology, owner = build_topology("demo"), parse_shard(shard)
    nodes = int(shard_view(topology, owner).node_present.sum())
    sites = sum(owner.owns_site_facility(site) for site in range(topology.n_sites))
    totals = sim_totals(sim)
    assert totals["frames_published"] == totals["ticks"] * (int(topology.node_present.sum()) + topology.n_sites)
    return totals["ticks"] * (nodes + sites)


@pytest.mark.parametrize("target", ["0/1", "0/2"], ids=["monitor", "shard"])
async def test_a_node_agent_cannot_take_a_monitors_session_over(
    shipped_broker: ShippedBroker, start_rainierd: object, target: str,  # noqa: F811 (the imported fixture)
) -> None:
    """The node agent n3 connects ATTACKS times with the client id of the monitor (or of shard 0 as
    compose.sharded.yaml runs it): the monitor never reconnects, /readyz answers 200 at every poll, no frame is
    lost and its retained status still reads online."""
    broker = shipped_broker
    user = "rainierd-monitor" if target == "0/1" else compose_shard_users()[target]
    victim_id = broker.credentials[user]["RAINIERD_MQTT_CLIENT_ID"]
    port = free_port()
    monitor = start_monitor(start_rainierd, broker, broker.credentials[user], target, port)
    await connected(port)
    sim = start_simulator(start_rainierd, broker)
    await wait_until(lambda: current_values(port).get("rainier_ingest_frames_applied_total", 0) > 0, 20,
                     "the monitor to apply frames")

    polls = []
    for _ in range(ATTACKS):
        # Each impostor connection holds a tick, then goes: the victim, if it lost its session, reconnects
        # within its backoff and would lose it again at the next attempt.
        with contextlib.suppress(aiomqtt.MqttError):
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier=victim_id, username="n3",
                                      password=broker.password("n3"), timeout=within(5)):
                for _ in range(4):
                    await asyncio.sleep(TICK_S / 4)
                    polls.append(await asyncio.to_thread(ready, port))
    values = (await all_applied(sim, {target: port}))[target]

    assert ({k: values.get(k) for k in COUNTERS}, values.get("rainier_ingest_frames_applied_total"),
            values.get("rainier_mqtt_connected")) == (dict.fromkeys(COUNTERS, 0), share(target, sim), 1), (
        monitor.log()[-3000:])
    assert polls == [200] * len(polls)
    assert await retained(broker, status_topic(victim_id)) == {status_topic(victim_id): b"online"}


@pytest.mark.parametrize("deployment", ["compose", "kubernetes"])
async def test_two_shards_with_the_shipped_identities_run_side_by_side(
    shipped_broker: ShippedBroker, start_rainierd: object, deployment: str,  # noqa: F811 (the imported fixture)
) -> None:
    """The two shards of compose.sharded.yaml (or of the StatefulSet, each pod ordinal reading its Secret's
    settings file), each with the credentials the deployment gives it, serve together: distinct client ids,
    no reconnect, each applies all of its share of the simulator's frames, and each one's retained status
    reads online while it serves and offline once it stops (shard 0 by SIGINT, which says offline itself;
    shard 1 killed, so the broker publishes its will)."""
    broker = shipped_broker
    shards = shipped_shards(broker, deployment)
    assert sorted(shards) == ["0/2", "1/2"]
    ids = {shard: client_id for shard, (client_id, _) in shards.items()}
    ports = {shard: free_port() for shard in shards}
    monitors = {shard: start_monitor(start_rainierd, broker, env, shard, ports[shard])
                for shard, (_, env) in shards.items()}
    for port in ports.values():
        await connected(port)
    sim = start_simulator(start_rainierd, broker)
    statuses = {topic: payload for shard_id in set(ids.values())
                for topic, payload in (await retained(broker, status_topic(shard_id))).items()}
    scrapes = await all_applied(sim, ports)

    assert len(set(ids.values())) == len(ids), ids
    assert statuses == {status_topic(i): b"online" for i in ids.values()}
    got = {shard: ({k: v.get(k) for k in COUNTERS}, v.get("rainier_ingest_frames_applied_total"))
           for shard, v in scrapes.items()}
    assert got == {shard: (dict.fromkeys(COUNTERS, 0), share(shard, sim)) for shard in shards}, (
        "\n".join(m.log()[-1500:] for m in monitors.values()))

    code, _ = monitors["0/2"].interrupt(timeout_s=within(5))
    assert code == 0
    monitors["1/2"].proc.send_signal(signal.SIGKILL)
    monitors["1/2"].proc.wait(timeout=within(5))

    def offline() -> bool:
        found = asyncio.run(retained(broker, "rainier/v1/status/#"))
        return all(found.get(status_topic(i)) == b"offline" for i in ids.values())

    # The will follows the broker's noticing the lost socket (at once on a kill, at worst 1.5 keep-alives).
    await wait_until(offline, 60, "both shards' statuses to read offline")
