"""rainierd on a real three-node NATS cluster (its MQTT gateway, JetStream,
every node on a loopback port; docs/scaling.md says why NATS): the simulator
publishes on node 1, monitors listen on nodes 2 and 3, and they give the
answers one monitor on one Mosquitto gives.  A node killed and restarted
mid-run: every client fails over, every frame is applied or counted lost,
and a healthy fleet raises no event."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cluster import Cluster, cluster
from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import FAST_TICK_S, TICK_S, within
from harness.waits import wait_until
from tests.conftest import Daemon
from tests.integration.test_accounting import accounted, sim_totals
from tests.integration.test_shards_e2e import SCENARIO, TOPOLOGY, TOTALS, unhealthy

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
    nats.nodes[1].kill()
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
