"""A monitor that falls behind says so and never blames the fleet: starved of
CPU (SIGSTOP, as a noisy neighbour or a paused container would) while a real
simulator keeps publishing through a real Mosquitto, it reports its backlog,
drops its oldest messages and counts them, raises no lost or stale event for
a fleet that kept publishing, and recovers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal

import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values, scrape
from harness.timing import TICK_S, within
from harness.waits import wait_until
from tests.integration.test_accounting import accounted

# 64 nodes: one 237 KB batch a tick, so a few seconds of stall overflow a 1 MiB inbox.
TOPOLOGY = "sites=1,ultraservers=16"


@pytest.mark.mosquitto
async def test_a_starved_monitor_reports_drops_and_raises_no_false_event(
    mosquitto: Broker, start_rainierd: object,
) -> None:
    """Stopped for 6 s: backlog dropped and counted, overload raised and cleared, not one health event."""
    port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S),
        "--topology", TOPOLOGY, "--max-backlog-bytes", str(2**20), name="monitor",
    )
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 15, "the monitor to connect")
    sim = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", mosquitto.url, "--tick", str(TICK_S), "--topology", TOPOLOGY, "--ticks", "60",
        name="simulate",
    )
    await wait_until(lambda: current_values(port).get("rainier_fleet_chips_reporting") == 1024, 20,
                     "every chip to report")

    os.kill(monitor.proc.pid, signal.SIGSTOP)
    await asyncio.sleep(6.0)
    os.kill(monitor.proc.pid, signal.SIGCONT)

    await wait_until(lambda: current_values(port).get("rainier_monitor_backlog_dropped_messages_total", 0) > 0, 20,
                     "the monitor to drop what it could not hold")
    await wait_until(lambda: current_values(port).get("rainier_monitor_overload_episodes_total", 0) >= 1, 20,
                     "the monitor to say it fell behind")
    await wait_until(lambda: current_values(port).get("rainier_monitor_overloaded") == 0, 30,
                     "the monitor to catch up")
    assert scrape(port, "/readyz").strip() == "ready"
    assert current_values(port)["rainier_fleet_chips_reporting"] == 1024

    assert await asyncio.to_thread(sim.proc.wait, within(60)) == 0, sim.log()
    # The fleet published until now: not one health event, lost or stale or any other.
    # (From here on it is truly silent, and stale_after later the monitor may rightly say so.)
    values = current_values(port)
    events = {k: v for k, v in values.items() if k.startswith("rainier_health_events_total") and v}
    assert events == {}, events
    finished = next(json.loads(line) for line in sim.log().splitlines()
                    if line.startswith("{") and '"simulation finished"' in line)
    sent = finished["frames_published"] + finished["frames_dropped"]
    # The last frames land a window or more after the simulator ends: wait for them, not for a time.
    with contextlib.suppress(AssertionError):
        await wait_until(lambda: accounted(current_values(port)) >= sent, 10, "every frame to be applied or counted")
    values = current_values(port)
    # Every frame the simulator produced was applied or counted lost; none vanished.
    assert accounted(values) == sent, {k: v for k, v in values.items() if k.startswith("rainier_ingest_frames")}
    assert values["rainier_ingest_frames_lost_total"] + values["rainier_ingest_frames_missing"] > 0
    log = monitor.log()
    assert "monitor falling behind" in log
    assert "monitor caught up" in log
    assert monitor.interrupt()[0] == 0, monitor.log()  # within 2 s: test_stops.py
