"""Detection end to end over a real Mosquitto: a scenario degrades one
NeuronLink and one EFA port; the monitor reports exactly those two, in time,
publishes the events, and exports lost FP8 only for those two causes."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiomqtt
import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values
from harness.timing import TICK_S
from harness.waits import wait_until

pytestmark = pytest.mark.e2e

# After the monitor's baselines have 30 s of history: an entity is judged by a change in itself, so a
# fault already there when it is first seen is found only by hard evidence or the band against peers.
FAULT_AT_TICK = 80
SCENARIO = f"""
[[fault]]
kind = "nl_degraded"
target = 5
severity = 0.75
at_s = {FAULT_AT_TICK * TICK_S}
for_s = 60

[[fault]]
kind = "efa_degraded"
target = 70
severity = 0.75
at_s = {FAULT_AT_TICK * TICK_S}
for_s = 60
"""


@pytest.mark.long(49)
@pytest.mark.mosquitto
async def test_scenario_degrades_exactly_one_link_and_one_port(
    mosquitto: Broker, start_rainierd: object, tmp_path: Path,
) -> None:
    """Link 5 and EFA port 70 are reported degraded within 10 ticks of onset; nothing else is."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S),
        name="monitor",
    )
    events: list[dict[str, object]] = []
    first_frame_s: float | None = None
    async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="event-reader") as client:
        await client.subscribe("rainier/v1/events/#", qos=1)
        await client.subscribe("rainier/v1/telemetry/#", qos=0)  # when the simulator's clock is running
        await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 10, "the monitor to connect")
        sim_started = time.time()
        start_rainierd(  # type: ignore[operator]
            "simulate", "--mqtt-url", mosquitto.url, "--tick", str(TICK_S), "--scenario", str(scenario),
            "--seed", "5", name="simulate",
        )
        async with asyncio.timeout((FAULT_AT_TICK + 10) * TICK_S + 15):
            async for message in client.messages:
                if message.topic.matches("rainier/v1/telemetry/#"):
                    first_frame_s = first_frame_s or time.time()
                    continue
                events.append(json.loads(bytes(message.payload)))  # type: ignore[arg-type]
                if {(e["entity"], e["index"]) for e in events} >= {("neuronlink", 5), ("efa", 70)}:
                    break
    # Events carry the monitor's wall time: after the fault began, within 10 ticks of it and 3 s of delivery
    # and analysis.  The simulator's clock started between its spawn (the earliest the fault can begin) and its
    # first frame's arrival (the latest): its start-up, seconds of a loaded CI machine's CPU (a rehearsal,
    # 2026-12-07: a port raised 8.09 s after spawn + onset against a bound of 8.0 that counted the start-up),
    # is the process's, not detection's.
    assert first_frame_s is not None
    for event in events:
        earliest_s = sim_started + FAULT_AT_TICK * TICK_S
        latest_s = first_frame_s + FAULT_AT_TICK * TICK_S
        assert earliest_s <= event["t_s"] <= latest_s + 10 * TICK_S + 3.0, event  # type: ignore[operator]
    assert {(e["entity"], e["id"], e["index"], e["after"]) for e in events} == {
        ("neuronlink", "s0/u0/n0/chip5/link0", 5, "degraded"), ("efa", "s0/u1/n4/efa6", 70, "degraded"),
    }
    await asyncio.sleep(3 * TICK_S)
    values = current_values(port)
    unhealthy = {k: v for k, v in values.items() if k.startswith("rainier_unhealthy{") and v}
    assert unhealthy == {
        'rainier_unhealthy{entity="efa",state="degraded"}': 1.0,
        'rainier_unhealthy{entity="neuronlink",state="degraded"}': 1.0,
    }
    assert values['rainier_neuronlink_unhealthy{link="5",id="s0/u0/n0/chip5/link0",kind="torus",site="s0",'
                  'ultraserver="u0",node="n0",state="degraded"}'] == 1.0
    assert values['rainier_efa_port_unhealthy{port="70",id="s0/u1/n4/efa6",site="s0",ultraserver="u1",node="n4",'
                  'state="degraded"}'] == 1.0
    lost = {k.split('"')[1]: v for k, v in values.items() if k.startswith("rainier_fleet_fp8_lost_flops{")}
    assert {cause for cause, v in lost.items() if v > 0} == {"degraded_neuronlink", "degraded_efa"}
    # The monitor never hears its own events (or anyone's status or truth) as telemetry.
    rejected = {k: v for k, v in values.items() if k.startswith("rainier_ingest_decode_errors_total") and v}
    assert rejected == {}
    assert "frame rejected" not in monitor.log()
