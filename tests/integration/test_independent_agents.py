"""A real fleet of independent node agents: nine `examples/publisher.py`
processes, one per node of a two-site inventory, started at different times
with different tick counters and clocks skewed by up to 2 s; one restarts
under its own id, one under a new id, one skips three frames.  The monitor
(real Mosquitto, real processes) must see exactly what they sent."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values, scrape
from harness.timing import TICK_S
from harness.waits import wait_until
from rainierd.fleet.inventory import load_inventory

ROOT = Path(__file__).parents[2]
INVENTORY = ROOT / "tests" / "data" / "inventory-two-sites.toml"
PUBLISHER = ROOT / "examples" / "publisher.py"
TICKS = 70
PEAK = 1.299e15
SKEWS = (-2.0, 1.5, 0.0, 2.0, -1.2, 0.7, -0.4, 1.9, -1.9)  # seconds each agent's clock is off


@pytest.mark.long(40)
@pytest.mark.mosquitto
async def test_independent_agents_are_seen_exactly(mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    """Figures match what was sent, loss is exactly the skipped frames, restarts are counted, names are on /metrics."""
    topo = load_inventory(INVENTORY)
    hosts = [h for h in topo.names.hostnames if h is not None]
    assert len(hosts) == 9
    port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S),
        "--topology", str(INVENTORY), name="monitor",
    )
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 15, "the monitor to connect")

    utils = {host: 0.5 + 0.02 * i for i, host in enumerate(hosts)}
    procs: list[asyncio.subprocess.Process] = []

    async def agent(i: int, host: str, ticks: int, *extra: str) -> asyncio.subprocess.Process:
        with (tmp_path / f"agent-{i}-{len(procs)}.log").open("w") as log:  # the child keeps its own copy
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(PUBLISHER), "--url", mosquitto.url, "--inventory", str(INVENTORY),
                "--hostname", host, "--tick", str(TICK_S), "--ticks", str(ticks),
                "--tick-start", str(1_000 * i + 7), "--clock-skew", str(SKEWS[i]), "--util", str(utils[host]),
                *extra, stdout=log, stderr=log,
            )
        procs.append(proc)
        return proc

    restart_same, restart_new, skipper = hosts[4], hosts[6], hosts[2]
    firsts = {}
    for i, host in enumerate(hosts):  # started 0.3 s apart: no two agents share a phase
        extra = (("--skip", "10,11,12") if host == skipper
                 else ("--publisher-id", "agent-a") if host == restart_new else ())
        firsts[host] = await agent(i, host, 24 if host in (restart_same, restart_new) else TICKS, *extra)
        await asyncio.sleep(0.3)
    # Two agents end after 24 ticks and start again at once: one as itself, one under a new id.
    await asyncio.gather(firsts[restart_same].wait(), firsts[restart_new].wait())
    await agent(4, restart_same, TICKS - 30)
    await agent(6, restart_new, TICKS - 30, "--publisher-id", "agent-b")

    # Steady state, every agent publishing: the fleet figures are what they sent.
    await asyncio.sleep(8.0)
    expected = sum(16 * PEAK * u for u in utils.values())
    values = current_values(port)
    assert values["rainier_fleet_chips"] == values["rainier_fleet_chips_reporting"] == 144
    assert values["rainier_fleet_fp8_peak_flops"] == pytest.approx(144 * PEAK)
    assert values["rainier_fleet_fp8_delivered_flops"] == pytest.approx(expected, rel=1e-6)
    assert values["rainier_fleet_fp8_effective_flops"] == pytest.approx(expected, rel=1e-3)
    assert values["rainier_ingest_publisher_restarts_total"] == 1
    assert values["rainier_ingest_publisher_changes_total"] == 1
    events = {k: v for k, v in values.items() if k.startswith("rainier_health_events_total") and v}
    text = scrape(port)
    for host in hosts:
        assert f'hostname="{host}"' in text
    assert 'site_name="use2-dc2"' in text
    # Every agent is publishing now; from here on they end, one by one over a few seconds (the restarted ones
    # first), and a node whose agent has ended is rightly reported lost. (Before 2026-12-01 none ever was: the
    # agents' clock skews of up to 2 s tripped the monitor's receive-lag overload, which stopped silence being
    # judged at all; issue 22.)
    while_publishing = len(monitor.log().splitlines())

    for proc in procs:
        await asyncio.wait_for(proc.wait(), TICKS * TICK_S + 30)
    await asyncio.sleep(2 * TICK_S)
    values = current_values(port)
    lost = values["rainier_ingest_frames_lost_total"] + values["rainier_ingest_frames_missing"]
    assert lost == 3, "exactly the three frames the skipping agent did not send"
    assert values["rainier_ingest_decode_errors_total{reason=\"stale_seq\"}"] == 0

    # No entity went lost or stale while the agents published, but a restarted
    # node for at most two ticks.
    restarted = {n for n in range(topo.n_nodes) if topo.names.hostnames[n] in (restart_same, restart_new)}
    log_lines = monitor.log().splitlines()
    lines = [json.loads(line) for line in log_lines if line.startswith("{")]
    raised = [json.loads(line) for line in log_lines[:while_publishing]
              if line.startswith("{") and json.loads(line).get("event") == "health degraded"]
    for event in raised:
        index = event["index"]
        node = index if event["entity"] == "node" else index // 16 if event["entity"] == "chip" else -1
        assert node in restarted, event
        cleared = [e for e in lines if e.get("event") == "health recovered" and e["entity"] == event["entity"]
                   and e["id"] == event["id"]]
        assert cleared, event
        gap_s = _ts(cleared[0]["timestamp"]) - _ts(event["timestamp"])
        assert gap_s <= 2 * TICK_S + 0.5, (event, cleared[0])
    assert all(k.endswith(('state="lost"}', 'state="stale"}', 'state="healthy"}')) for k in events), events


def _ts(stamp: str) -> float:
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:].rstrip("Z"))
