"""Losing the broker is weather, not a reason to exit: a monitor whose broker is
SIGKILLed while it is publishing health events keeps running, reconnects with
backoff once the broker is back, and goes on analysing."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import TICK_S
from harness.waits import wait_until
from tests.conftest import MosquittoProcess


@pytest.mark.long(49)
@pytest.mark.mosquitto
async def test_monitor_survives_broker_kill_while_publishing_events(
    mosquitto_process: MosquittoProcess, start_rainierd: object,
) -> None:
    """Broker SIGKILLed twice mid-stream of events: the monitor never exits, reconnects, and analyses again."""
    url = f"mqtt://127.0.0.1:{mosquitto_process.port}"
    port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S), name="monitor",
    )
    # Random faults at a huge multiple of the calibrated rates: health events every tick.
    start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", url, "--tick", str(TICK_S), "--fault-acceleration", "3e5", "--seed", "4",
        name="simulate",
    )

    def events_published() -> float:
        values = current_values(port)
        return sum(v for k, v in values.items() if k.startswith("rainier_health_events_total"))

    for outage in (1, 2):
        before = events_published()
        await wait_until(lambda before=before: events_published() > before + 5, 30,  # type: ignore[misc]
                         "health events to flow")
        mosquitto_process.kill()
        await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 0, 15,
                         "the monitor to notice the broker is gone")
        await asyncio.sleep(2.0)
        assert monitor.proc.poll() is None, monitor.log()
        mosquitto_process.start()
        await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 30,
                         "the monitor to reconnect")
        failures = current_values(port)["rainier_mqtt_connection_failures_total"]
        assert failures >= outage

    analyses = current_values(port)["rainier_monitor_analyses_total"]
    await wait_until(lambda: current_values(port)["rainier_monitor_analyses_total"] > analyses + 2, 10,
                     "analysis to go on after the outages")
    assert monitor.proc.poll() is None
    assert monitor.interrupt()[0] == 0, monitor.log()  # within 2 s: test_stops.py
    lines = [json.loads(line) for line in monitor.log().splitlines() if line.startswith("{")]
    assert not [line for line in lines if line["event"] == "rainierd task failed"]
    assert [line for line in lines if line["event"] == "mqtt connection failed; retrying"]
