"""rainierd on a real three-node NATS cluster (its MQTT gateway, JetStream,
every node on a loopback port; docs/scaling.md says why NATS): the simulator
publishes on node 1, monitors listen on nodes 2 and 3, and they give the
answers one monitor on one Mosquitto gives.  A node killed and restarted
mid-run: every client fails over, every frame is applied or counted lost,
and a healthy fleet raises no event.  The publisher's node killed: the
shards, still connected, report their feed lost, never a node, and the
fail-over is measured."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from harness.cluster import Cluster, cluster
from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import FAST_TICK_S, TICK_S, within
from harness.waits import wait_until
from rainierd.fleet.inventory import load_topology
from rainierd.fleet.shards import shard_view
from rainierd.wire.topics import Shard
from tests.conftest import Daemon
from tests.e2e.test_shards import SCENARIO, TOPOLOGY, TOTALS, unhealthy
from tests.integration.test_accounting import accounted, sim_totals

PROTOCOL = ("--mqtt-protocol", "3.1.1")  # NATS speaks MQTT 3.1.1 only


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[Cluster]:
    """A three-node NATS cluster with its MQTT gateway, for one test."""
    with cluster("nats", tmp_path / "nats") as running:
        yield running


def _monitor(start: object, urls: str, port: int, shard: str, *extra: str, tick_s: float, name: str) -> Daemon:
    return start(  # type: ignore[operator,no-any-return]
        "monitor", "--mqtt-url", urls, *PROTOCOL, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(tick_s),
        "--topology", TOPOLOGY, "--shard", shard, *extra, name=name,
    )


async def _connected(ports: dict[str, int]) -> None:
    for port in ports.values():
        await wait_until(lambda p=port: current_values(p).get("rainier_mqtt_connected") == 1, 30,  # type: ignore[misc]
                         "the monitors to connect")


async def _subscribed(nats: Cluster) -> None:
    """Wait until the subscriptions node 1 (where the simulator publishes) knows have held still for 3 s: a
    monitor says connected before it subscribes, and its hundreds of filters then reach node 1 over the routes
    (seen: a monitor missing the first two ticks after a 1 s wait on this loaded machine)."""
    counts: list[int] = []

    def settled() -> bool:
        counts.append(nats.subscriptions(0))
        return len(counts) > 30 and len(set(counts[-30:])) == 1

    await wait_until(settled, 30, "the monitors' subscriptions to reach node 1")


async def _on_last_tick(ports: dict[str, int], last: int) -> dict[str, dict[str, float]]:
    """Return each monitor's scrape taken as it applies tick ``last``: a few ticks later the fleet, silent since
    the simulator ended, is rightly stale (and a monitor that never reconnected has no grace to hide it)."""
    values: dict[str, dict[str, float]] = {}

    def at_last() -> bool:
        for name, port in ports.items():
            if values.get(name, {}).get("rainier_monitor_last_tick") != last:
                values[name] = current_values(port)
        return all(v.get("rainier_monitor_last_tick") == last for v in values.values())

    await wait_until(at_last, 20, f"every monitor to apply tick {last}")
    return values


async def _every_frame_counted(ports: dict[str, int], sent: int) -> dict[str, dict[str, float]]:
    """Return each monitor's scrape once the whole monitor, and the two shards together, have applied or counted
    every frame sent (or, after 10 s, what they have: the caller's assertion shows the difference).  Tick
    ``last`` shows in the first window holding any of its frames; the rest of its batches, and a backlog after a
    fail-over, land in later windows (seen on a loaded machine: 7,874 of 7,920 applied at the last tick, all
    7,920 three seconds on, none lost)."""
    values: dict[str, dict[str, float]] = {}

    def counted() -> bool:
        values.update({name: current_values(port) for name, port in ports.items()})
        return accounted(values["whole"]) >= sent and accounted(values["s0"]) + accounted(values["s1"]) >= sent

    with contextlib.suppress(AssertionError):
        await wait_until(counted, 10, "every frame to be applied or counted")
    return values


async def test_two_shards_on_the_cluster_add_up_to_one_monitor(
    nats: Cluster, start_rainierd: object, tmp_path: Path,
) -> None:
    """Simulator on node 1, one monitor and shard 0/2 on node 2, shard 1/2 on node 3: the shards' fleet totals
    sum to the monitor's within 1e-9 relative, and their unhealthy components together are its, none twice."""
    tick_s, ticks = TICK_S, 24
    scenario = tmp_path / "faults.toml"
    scenario.write_text(SCENARIO)
    ports = {name: free_port() for name in ("whole", "s0", "s1")}
    nodes = {"whole": (1, 2), "s0": (1, 2), "s1": (2, 1)}
    shards = {"whole": "0/1", "s0": "0/2", "s1": "1/2"}
    for name, port in ports.items():
        _monitor(start_rainierd, nats.urls(*nodes[name]), port, shards[name], "--stale-after-ticks", "1000",
                 "--reconnect-grace", "0", tick_s=tick_s, name=f"monitor-{name}")
    await _connected(ports)
    await _subscribed(nats)
    sim: Daemon = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", nats.urls(0), *PROTOCOL, "--tick", str(tick_s), "--ticks", str(ticks),
        "--seed", "5", "--topology", TOPOLOGY, "--scenario", str(scenario), name="simulate",
    )
    assert await asyncio.to_thread(sim.proc.wait, within(ticks * tick_s + 30)) == 0, sim.log()[-3000:]
    published = sim_totals(sim)["frames_published"]
    await _on_last_tick(ports, ticks - 1)
    # Every frame applied, by the monitor and by the two shards: then each has analysed every window.
    values = await _every_frame_counted(ports, published)

    whole, parts = values["whole"], [values["s0"], values["s1"]]
    assert {k: sum(p[k] for p in parts) for k in TOTALS} == pytest.approx({k: whole[k] for k in TOTALS}, rel=1e-9)
    assert all(0 < p["rainier_fleet_chips"] < whole["rainier_fleet_chips"] for p in parts)
    found = [unhealthy(p) for p in parts]
    assert (found[0] | found[1], found[0] & found[1]) == (unhealthy(whole), set())
    assert all(found), found  # each shard detected its own faults
    assert whole["rainier_ingest_frames_applied_total"] == published  # the cluster lost nothing
    assert whole["rainier_ingest_frames_lost_total"] == sum(p["rainier_ingest_frames_lost_total"] for p in parts) == 0


@pytest.mark.long(38)
async def test_a_node_killed_and_restarted_mid_run_loses_only_what_is_counted(
    nats: Cluster, start_rainierd: object,
) -> None:
    """Node 2, where one monitor and shard 0/2 listen, SIGKILLed mid-run and started again: they fail over to
    node 3, the simulator on node 1 carries on, every frame is applied or counted lost (by the monitor, and by
    the two shards together), and the healthy fleet raises no event."""
    tick_s, ticks = FAST_TICK_S, 120  # many frames across a node's kill and restart, in little wall time
    ports = {name: free_port() for name in ("whole", "s0", "s1")}
    nodes = {"whole": (1, 2), "s0": (1, 2), "s1": (2, 1)}
    shards = {"whole": "0/1", "s0": "0/2", "s1": "1/2"}
    monitors = {name: _monitor(start_rainierd, nats.urls(*nodes[name]), port, shards[name], tick_s=tick_s,
                               name=f"monitor-{name}") for name, port in ports.items()}
    await _connected(ports)
    await _subscribed(nats)
    sim: Daemon = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", nats.urls(0, 2), *PROTOCOL, "--tick", str(tick_s), "--ticks", str(ticks),
        "--seed", "8", "--topology", TOPOLOGY, name="simulate",
    )
    await wait_until(lambda: current_values(ports["whole"]).get("rainier_ingest_frames_applied_total", 0) > 50, 30,
                     "frames to flow")
    killed_at = time.time()
    nats.nodes[1].kill()
    flowing_s = await _flowing_again({n: ports[n] for n in ("whole", "s0")}, killed_at, tick_s)
    for name in ("whole", "s0"):
        await wait_until(lambda n=name: current_values(ports[n]).get("rainier_mqtt_connection_failures_total",  # type: ignore[misc]
                                                                     0) >= 1, 15, f"{name} to notice node 2 died")
    await _connected(ports)  # on node 3 now
    await asyncio.to_thread(nats.restart, 1)
    assert sim.proc.poll() is None, "the simulator finished before the node came back: raise the ticks"
    assert await asyncio.to_thread(sim.proc.wait, within(ticks * tick_s + 60)) == 0, sim.log()[-3000:]
    values = await _on_last_tick(ports, ticks - 1)
    totals = sim_totals(sim)
    sent = totals["frames_published"] + totals["frames_dropped"]
    counted = await _every_frame_counted(ports, sent)
    assert (accounted(counted["whole"]), accounted(counted["s0"]) + accounted(counted["s1"])) == (sent, sent), {
        n: {k: v for k, v in counted[n].items() if k.startswith("rainier_ingest_frames")} for n in ports}
    assert [counted[n]["rainier_ingest_frames_missing"] for n in ports] == [0, 0, 0]
    # Whether the kill loses frames depends on timing (CI saw both: some counted lost, and none, the monitor back
    # on node 3 before the routes dropped a frame); either way every frame is applied or counted lost, above.
    assert [{k: v for k, v in values[n].items() if k.startswith("rainier_health_events_total") and v}
            for n in ports] == [{}, {}, {}]
    assert [unhealthy(values[n]) for n in ports] == [set(), set(), set()]
    for name in ("whole", "s0"):
        # Connected first to node 2, then (after the kill) to node 3.  Node 3 may in turn drop the session when node
        # 2 rejoins (seen once in CI: the list then wraps back to node 2); that is fail-over too, and the counts above
        # already hold it to account.
        brokers = [json.loads(line)["broker"] for line in monitors[name].log().splitlines()
                   if '"mqtt connected"' in line]
        assert [brokers[0] == nats.nodes[1].url, nats.nodes[2].url in brokers[1:]] == [True, True], (name, brokers)
    assert all(m.proc.poll() is None for m in monitors.values())
    reconnect_s = max(_connected_at(monitors[n])[1][0] for n in ("whole", "s0")) - killed_at
    print(f"\nthe monitors' node killed: both connected to node 3 after {reconnect_s:.2f} s, "
          f"frames applied again after {flowing_s:.2f} s")


def _streams(shard: Shard) -> int:
    """Return the streams (nodes, and sites' facility frames) shard ``shard`` of TOPOLOGY takes."""
    topology = load_topology(TOPOLOGY)
    nodes = int(shard_view(topology, shard).node_present.sum())
    return nodes + sum(shard.owns_site_facility(site) for site in range(topology.n_sites))


def _connected_at(daemon: Daemon) -> list[tuple[float, str]]:
    """Return (wall time, broker) of each `mqtt connected` line of a daemon's JSON log."""
    records = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    return [(datetime.fromisoformat(r["timestamp"]).timestamp(), r["broker"]) for r in records
            if r["event"] == "mqtt connected"]


@pytest.mark.long(54)
async def test_the_publishers_node_killed_reads_as_the_feed_lost_never_a_node(
    nats: Cluster, start_rainierd: object,
) -> None:
    """Simulator on node 1 (then node 3), shard 0/2 on node 2, shard 1/2 on node 3; node 1 SIGKILLed mid-run:
    the shards' nodes live on, and the shards hear nothing until the simulator fails over.  Neither reports a
    node lost (every node kept publishing; the silence was the transport's), each reports its feed lost and
    back (or nothing, after the quickest fail-overs), and every frame is applied or counted lost, per shard and
    in total.  The fail-over time is printed."""
    tick_s, ticks = TICK_S, 90
    ports = {name: free_port() for name in ("s0", "s1")}
    nodes = {"s0": (1, 2), "s1": (2, 1)}
    shards = {"s0": Shard(0, 2), "s1": Shard(1, 2)}
    for name, port in ports.items():
        # No reconnect grace: the shards judge silence from their first connection, as after 20 s they would.
        _monitor(start_rainierd, nats.urls(*nodes[name]), port, str(shards[name]), "--reconnect-grace", "0",
                 tick_s=tick_s, name=f"monitor-{name}")
    await _connected(ports)
    await _subscribed(nats)
    sim: Daemon = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", nats.urls(0, 2), *PROTOCOL, "--tick", str(tick_s), "--ticks", str(ticks),
        "--seed", "8", "--topology", TOPOLOGY, name="simulate",
    )
    # Every stream heard, and the feed judged over a steady fleet, before the kill.
    await wait_until(lambda: all(current_values(p).get("rainier_ingest_frames_applied_total", 0) > 20 * _streams(
        shards[n]) for n, p in ports.items()), 60, "every shard to apply 20 ticks")
    killed_at = time.time()
    nats.nodes[0].kill()
    flowing_s = await _flowing_again(ports, killed_at, tick_s)
    await wait_until(lambda: len(_connected_at(sim)) >= 2, 60, "the simulator to fail over to node 3")
    assert sim.proc.poll() is None, "the simulator finished before it failed over: raise the ticks"
    assert await asyncio.to_thread(sim.proc.wait, within(ticks * tick_s + 60)) == 0, sim.log()[-3000:]
    values = await _on_last_tick(ports, ticks - 1)
    totals = sim_totals(sim)
    sent = totals["frames_published"] + totals["frames_dropped"]
    assert sent == ticks * (_streams(shards["s0"]) + _streams(shards["s1"]))  # one frame a stream a tick
    counted = await _every_frame_counted_by_shards(ports, {n: ticks * _streams(s) for n, s in shards.items()})

    reconnect_s = _connected_at(sim)[1][0] - killed_at
    print(f"\npublisher's node killed: the simulator connected to node 3 after {reconnect_s:.2f} s, "
          f"frames applied again after {flowing_s:.2f} s")
    events = [{k.split("{", 1)[1].rstrip("}"): v for k, v in values[n].items()
               if k.startswith("rainier_health_events_total") and v} for n in ports]
    # The feed is reported lost (and back) when the silence outlasts a stale interval (1.5 s), as it does but
    # for the quickest fail-overs (seen: 0.2 to 10.5 s); a node, never.
    assert [{k for k in e if not k.startswith('entity="feed"')} for e in events] == [set(), set()], events
    assert [e.get('entity="feed",state="lost"', 0) == e.get('entity="feed",state="healthy"', 0) <= 1
            for e in events] == [True, True], events
    assert {n: accounted(counted[n]) for n in ports} == {n: ticks * _streams(s) for n, s in shards.items()}, {
        n: {k: v for k, v in counted[n].items() if k.startswith("rainier_ingest_frames")} for n in ports}
    assert [counted[n]["rainier_ingest_frames_missing"] for n in ports] == [0, 0]
    # NATS may drop the shards' own sessions too, on nodes that lived, while JetStream elects new leaders for the
    # streams that held the lost node's share (seen: both shards disconnected 5.4 s after the kill, back 10 s
    # later). Their clocks then stop, so that part of the silence is judged by no one; the counts above hold.
    print("shards' connection failures:", [counted[n]["rainier_mqtt_connection_failures_total"] for n in ports])


async def _every_frame_counted_by_shards(ports: dict[str, int], sent: dict[str, int]) -> dict[str, dict[str, float]]:
    """Return each shard's scrape once it has applied or counted every frame of its own streams (or, after
    10 s, what it has: the caller's assertion shows the difference)."""
    values: dict[str, dict[str, float]] = {}

    def counted() -> bool:
        values.update({name: current_values(port) for name, port in ports.items()})
        return all(accounted(values[name]) >= sent[name] for name in ports)

    with contextlib.suppress(AssertionError):
        await wait_until(counted, 10, "every frame to be applied or counted")
    return values


async def _flowing_again(ports: dict[str, int], killed_at: float, tick_s: float) -> float:
    """Return the seconds from ``killed_at`` until every shard applies frames again.

    What a shard had received before the kill is analysed within a tick, so what it applies after two came
    through the fail-over (analysed a tick at most after it arrived: the figure is late by under a tick)."""
    await asyncio.sleep(max(0.0, killed_at + 2 * tick_s - time.time()))
    before = {n: current_values(p).get("rainier_ingest_frames_applied_total", 0) for n, p in ports.items()}
    await wait_until(lambda: all(current_values(p).get("rainier_ingest_frames_applied_total", 0) > before[n]
                                 for n, p in ports.items()), 60, "frames to flow again")
    return time.time() - killed_at
