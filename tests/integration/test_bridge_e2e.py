"""neuron-monitor's real output format through `rainierd bridge neuron-monitor`
(a real process reading it on stdin, a real Mosquitto) into a real monitor:
per-chip utilisation, effective FP8 and ECC of that node are on /metrics, and
what neuron-monitor does not report is unknown, never down."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values, sample_values, scrape
from harness.waits import wait_until

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parents[1] / "data"
SAMPLES = DATA / "neuron-monitor"
HOST = "ip-10-0-17-8"  # node 0 of the two-site inventory


@pytest.mark.mosquitto
async def test_neuron_monitor_through_the_bridge(mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    """Five reports, 1 s apart: chip utilisation, FP8 and ECC per chip on /metrics; links unknown, not down."""
    inventory = tmp_path / "fleet.toml"
    text = (DATA / "inventory-two-sites.toml").read_text()
    inventory.write_text(text.replace(f'hostname = "{HOST}"', f'hostname = "{HOST}"\n    detail = true', 1))
    sysfs = tmp_path / "sys"
    sysfs.symlink_to(SAMPLES / "efa-sysfs-t0")
    port = free_port()
    start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--topology", str(inventory),
        name="monitor",
    )
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 15, "the monitor to connect")
    bridge = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rainierd", "bridge", "neuron-monitor", "--node", HOST, "--topology", str(inventory),
        "--mqtt-url", mosquitto.url, "--mqtt-qos", "1", "--efa-sysfs", str(sysfs), "--log-format", "json",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert bridge.stdin is not None
    lines = (SAMPLES / "neuron-monitor-trn2.jsonl").read_bytes().splitlines(keepends=True)
    for i, line in enumerate(lines):  # one report a second, as neuron-monitor streams them
        bridge.stdin.write(line)
        await bridge.stdin.drain()
        if i == 0:
            sysfs.unlink()
            sysfs.symlink_to(SAMPLES / "efa-sysfs-t1")  # the driver's counters one second later
        await asyncio.sleep(1.0)
    bridge.stdin.close()
    out, _ = await asyncio.wait_for(bridge.communicate(), 20)
    assert bridge.returncode == 0, out.decode()

    await asyncio.sleep(2.0)
    values = sample_values(scrape(port))
    last = json.loads(lines[-1])
    cores = last["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]

    def series(name: str, chip: int) -> float:
        key = next(k for k in values if k.startswith(f'{name}{{chip="{chip}",') and f'hostname="{HOST}"' in k)
        return values[key]

    for chip in (0, 9):
        util = sum(cores[str(4 * chip + c)]["neuroncore_utilization"] for c in range(4)) / 400
        flops = sum(cores[str(4 * chip + c)]["flops"] for c in range(4))
        assert series("rainier_chip_utilization_ratio", chip) == pytest.approx(util, rel=1e-6)
        # FLOP per period over the bridge's own 1 s spacing: the rate within a few per cent.
        assert series("rainier_chip_fp8_effective_flops", chip) == pytest.approx(flops, rel=0.05)
    assert series("rainier_chip_ecc_corrected_errors_total", 4) == 7
    assert series("rainier_chip_ecc_uncorrected_errors_total", 0) == 0
    assert values["rainier_fleet_chips_reporting"] == 16
    # What neuron-monitor cannot say stays unknown: the node's 48 links (and the 8 silent nodes'), never down.
    assert values['rainier_unknown{entity="neuronlink",judgement="health"}'] == 9 * 48
    assert values['rainier_unknown{entity="chip",judgement="throttled"}'] == 9 * 16
    assert values['rainier_unknown{entity="efa",judgement="health"}'] == 8 * 16  # its ports report, via sysfs
    assert values['rainier_unhealthy{entity="neuronlink",state="down"}'] == 0
    assert not [k for k in values if k.startswith("rainier_neuronlink_unhealthy{")]
    assert sum(v for k, v in values.items() if k.startswith("rainier_ingest_decode_errors_total")) == 0
