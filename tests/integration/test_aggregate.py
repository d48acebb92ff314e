"""The aggregation tier end to end (real Mosquitto, real processes): the
simulator publishing one frame per node, as a fleet's agents do, through
``rainierd aggregate`` into a monitor that hears batches only.  Every frame
published is applied or counted lost by the monitor, exactly, with no health
event for a healthy fleet; an aggregator killed and restarted mid-run costs
frames that the monitor counts, and nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import FAST_TICK_S, TICK_S
from harness.waits import wait_until
from rainierd.fleet.topology import build_topology
from tests.conftest import Daemon, MosquittoProcess
from tests.integration.test_accounting import applied, assert_every_frame_accounted, settled, sim_totals
from tests.integration.test_authorisation import ShippedBroker, shipped_broker  # noqa: F401 (a fixture)

Start = Callable[..., Daemon]


def start_monitor(start: Start, url: str, port: int, tick_s: float) -> Daemon:
    return start("monitor", "--mqtt-url", url, "--tick", str(tick_s), "--metrics-addr", f"127.0.0.1:{port}",
                 "--telemetry-input", "batches", name="monitor")


def start_aggregator(start: Start, url: str, port: int, tick_s: float, shard: str) -> Daemon:
    return start("aggregate", "--mqtt-url", url, "--tick", str(tick_s), "--metrics-addr", f"127.0.0.1:{port}",
                 "--shard", shard, "--mqtt-client-id", f"agg-{shard.replace('/', 'of')}",
                 name=f"aggregate-{shard.replace('/', 'of')}")


def aggregator_totals(port: int) -> dict[str, float]:
    values = current_values(port)
    return {k.removeprefix("rainier_aggregator_"): v for k, v in values.items()
            if k.startswith("rainier_aggregator_") and ("_total" in k or "frames_dropped" in k)}


@pytest.mark.mosquitto
@pytest.mark.parametrize("encoding", ["binary", "json"])
async def test_per_node_frames_through_an_aggregator_are_every_one_accounted(
    mosquitto_process: MosquittoProcess, start_rainierd: Start, encoding: str,
) -> None:
    """simulate --batch-nodes 0 (one frame per node) -> aggregate -> monitor --telemetry-input batches: the
    monitor applies every frame published (the aggregator dropped none, and batched each under its own
    publisher and seq), nothing lost or missing, and a healthy fleet raises no event."""
    url = mosquitto_process.url
    port, agg_port = free_port(), free_port()
    monitor = start_monitor(start_rainierd, url, port, TICK_S)
    aggregator = start_aggregator(start_rainierd, url, agg_port, TICK_S, "0/1")
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 20, "the monitor to connect")
    await wait_until(lambda: current_values(agg_port).get("rainier_aggregator_mqtt_connected") == 1, 20,
                     "the aggregator to connect")
    sim = start_rainierd("simulate", "--mqtt-url", url, "--tick", str(TICK_S), "--ticks", "40", "--seed", "3",
                         "--batch-nodes", "0", "--encoding", encoding, name="simulate")
    values = await settled(port, sim, timeout_s=60)
    assert_every_frame_accounted(values, sim)
    assert values.counted["rainier_ingest_frames_lost_total"] == 0
    assert sum(v for k, v in values.counted.items() if k.startswith("rainier_ingest_decode_errors_total")) == 0
    node_frames = sim_totals(sim)["frames_published"] - sim_totals(sim)["ticks"] * build_topology("demo").n_sites
    # Its status is frozen once a tick: the last batches published show a tick later.
    await wait_until(lambda: aggregator_totals(agg_port)["frames_published_total"] == node_frames, 10,
                     "the aggregator to report every node frame published")
    totals = aggregator_totals(agg_port)
    assert sum(v for k, v in totals.items() if k.startswith("frames_dropped")) == 0
    assert (totals["messages_received_total"], totals["frames_batched_total"]) == (node_frames, node_frames)
    assert aggregator.interrupt(sig=15)[0] == 0, aggregator.log()[-3000:]
    assert monitor.interrupt()[0] == 0


@pytest.mark.long(54)
@pytest.mark.mosquitto
async def test_an_aggregator_killed_and_restarted_costs_only_counted_frames(
    mosquitto_process: MosquittoProcess, start_rainierd: Start,
) -> None:
    """Two aggregators share the fleet; one is SIGKILLed mid-run and started again 2 s later: the monitor counts
    the frames it held and those published while it was away as lost (by each node's own sequence), so
    applied + lost == published exactly, with frames lost, and no node or link event is raised."""
    url = mosquitto_process.url
    port, agg_ports = free_port(), (free_port(), free_port())
    tick_s = FAST_TICK_S
    monitor = start_monitor(start_rainierd, url, port, tick_s)
    aggregators = [start_aggregator(start_rainierd, url, p, tick_s, f"{i}/2") for i, p in enumerate(agg_ports)]
    for p in (port, *agg_ports):
        await wait_until(lambda p=p: any(current_values(p).get(k) == 1 for k in (  # type: ignore[misc]
            "rainier_mqtt_connected", "rainier_aggregator_mqtt_connected")), 20, f"{p} to connect")
    sim = start_rainierd("simulate", "--mqtt-url", url, "--tick", str(tick_s), "--ticks", "200", "--seed", "4",
                         "--batch-nodes", "0", name="simulate")
    await wait_until(lambda: applied(port) > 0, 30, "frames to be applied")
    await asyncio.sleep(3)
    aggregators[1].proc.kill()
    aggregators[1].proc.wait(5)
    await asyncio.sleep(2)
    assert sim.proc.poll() is None, "the simulator finished before the restart: raise --ticks"
    aggregators[1] = start_aggregator(start_rainierd, url, agg_ports[1], tick_s, "1/2")
    values = await settled(port, sim, timeout_s=120)
    assert values.counted["rainier_ingest_frames_lost_total"] > 0  # the kill did lose frames: they are counted
    assert_every_frame_accounted(values, sim)
    assert monitor.proc.poll() is None
    assert [a.interrupt(sig=15)[0] for a in aggregators] == [0, 0]


@pytest.mark.mosquitto
async def test_the_shipped_broker_lets_an_aggregator_read_node_frames_and_write_batches(
    shipped_broker: ShippedBroker, start_rainierd: Start,  # noqa: F811 (the imported fixture)
) -> None:
    """On the shipped Mosquitto config and ACL, the simulator as rainierd-sim, an aggregator as
    rainierd-aggregate-0 and the monitor as rainierd-monitor (batches only): every frame published is applied,
    the aggregator dropped none, nothing is lost."""
    broker = shipped_broker
    port, agg_port = free_port(), free_port()
    common = ("--mqtt-url", broker.url, "--tick", str(TICK_S))
    monitor = start_rainierd("monitor", *common, "--metrics-addr", f"127.0.0.1:{port}", "--telemetry-input",
                             "batches", name="monitor", env=broker.credentials["rainierd-monitor"])
    start_rainierd("aggregate", *common, "--metrics-addr", f"127.0.0.1:{agg_port}", name="aggregate",
                   env=broker.credentials["rainierd-aggregate-0"])
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 20, "the monitor to connect")
    await wait_until(lambda: current_values(agg_port).get("rainier_aggregator_mqtt_connected") == 1, 20,
                     "the aggregator to connect")
    sim = start_rainierd("simulate", *common, "--ticks", "30", "--seed", "2", "--batch-nodes", "0", name="simulate",
                         env=broker.credentials["rainierd-sim"])
    values = await settled(port, sim, timeout_s=60)
    assert_every_frame_accounted(values, sim)
    assert values.counted["rainier_ingest_frames_lost_total"] == 0
    totals = aggregator_totals(agg_port)
    assert (totals["messages_received_total"], sum(v for k, v in totals.items() if k.startswith("frames_dropped"))) \
        == (sim_totals(sim)["frames_published"] - 30 * build_topology("demo").n_sites, 0)
    assert monitor.interrupt()[0] == 0
