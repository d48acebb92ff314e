"""One frame cannot blind the fleet: a record-less frame whose sample time is
200 s ahead (inside ``max_clock_skew_s``), sent through a real Mosquitto
between two ticks, neither makes the monitor declare itself overloaded nor
stops its listening clock, so a node that falls silent afterwards is reported
lost in its normal time (issue 19, "One frame blinds the fleet")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiomqtt
import numpy as np
import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values, scrape
from harness.timing import TICK_S, within
from harness.waits import wait_until
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import encode_binary
from rainierd.wire.records import NodeFrame
from rainierd.wire.topics import EVENTS_ROOT, node_topic

SILENT_NODE = 5
STALE_AFTER_TICKS = 3  # the monitor's default


@pytest.mark.mosquitto
async def test_one_frame_ahead_does_not_blind_the_monitor(mosquitto: Broker, start_rainierd: object) -> None:
    """After the poisoned frame, node 5 falls silent: lost within stale_after + a few ticks, never overloaded."""
    topo = build_topology("demo")
    port = free_port()
    start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S),
        "--topology", "demo", "--reconnect-grace", "0", name="monitor",
    )
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 15,
                     "the monitor to connect")
    model = FleetModel(topo, np.random.default_rng(0), tick_s=TICK_S, start_s=time.time())
    silent, burst = asyncio.Event(), asyncio.Event()
    lost_at: list[float] = []
    seq: list[int] = []

    async def publish(client: aiomqtt.Client) -> None:
        for k in range(10_000):
            frames = list(tick_frames(topo, model.step(k), publisher="sim"))
            seq.append(next(f.seq for _, f in frames if isinstance(f, NodeFrame) and f.node == 0))
            for topic, frame in frames:
                if not (silent.is_set() and isinstance(frame, NodeFrame) and frame.node == SILENT_NODE):
                    await client.publish(topic, encode_binary(frame), qos=1)
            burst.set()
            await asyncio.sleep(TICK_S)

    async def watch(client: aiomqtt.Client) -> None:
        await client.subscribe(f"{EVENTS_ROOT}/node/{SILENT_NODE}", qos=1)
        async for message in client.messages:
            event = json.loads(bytes(message.payload))  # type: ignore[arg-type]
            if event["after"] == "lost":
                lost_at.append(time.monotonic())
                return

    async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="agents") as client, \
            aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="watcher") as watcher:
        publisher = asyncio.create_task(publish(client), name="publish")
        try:
            await wait_until(lambda: current_values(port).get("rainier_fleet_chips_reporting") == topo.n_chips,
                             20, "every chip to report")
            # Between two ticks, after the monitor took the last tick's window: the frame comes alone in its own.
            burst.clear()
            await burst.wait()
            await asyncio.sleep(0.3 * TICK_S)
            site, us = int(topo.node_site[0]), int(topo.node_ultraserver[0])
            # The next seq, no records, sampled 200 s ahead: the frame main let set the lag floor.
            poison = NodeFrame("sim", seq[-1] + 1, 0, time.time() + 200.0, 0)
            await client.publish(node_topic(site, us, 0), encode_binary(poison), qos=1)
            await asyncio.sleep(2 * TICK_S)  # the poisoned frame has been analysed
            silent.set()
            went_silent = time.monotonic()
            watching = asyncio.create_task(watch(watcher), name="watch")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within((STALE_AFTER_TICKS + 6) * TICK_S)):
                    await watching
            values = current_values(port)
        finally:
            publisher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await publisher
    assert lost_at, ("node 5 fell silent and was never reported lost; overloaded "
                     f"{values['rainier_monitor_overloaded']}")
    assert lost_at[0] - went_silent <= within((STALE_AFTER_TICKS + 6) * TICK_S)
    assert values["rainier_monitor_overload_episodes_total"] == 0
    assert values['rainier_ingest_decode_errors_total{reason="time_jump"}'] == 1
    assert scrape(port, "/readyz").strip() == "ready"
