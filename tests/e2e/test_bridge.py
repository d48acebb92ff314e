"""`rainierd bridge neuron-monitor` as a real process (reports piped to its
stdin, an EFA sysfs tree beside it, a real Mosquitto): the frames it
publishes, read off the broker, and its own /metrics; then neuron-monitor's
captured output through the bridge into a real monitor."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomqtt
import numpy as np
import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values, sample_values, scrape
from harness.timing import within
from harness.waits import wait_until
from rainierd.fleet.hardware import TRN2
from rainierd.wire import CHIP_DTYPE, NodeFrame, decode_json
from tests.bridge_reports import EFA_NAMES, busy, efa_counters, efa_tree

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parents[1] / "data"
SAMPLES = DATA / "neuron-monitor"
HOST = "ip-10-0-17-8"  # node 0 of the two-site inventory, instance i-0a1b2c3d4e5f60718
TOPIC = "rainier/v1/telemetry/s0/b0/u0/n0"
PERIOD_S = 0.5


@contextlib.asynccontextmanager
async def frames_on(broker: Broker) -> AsyncIterator[list[NodeFrame]]:
    """Collect every frame published on node 0's topic while the block runs."""
    frames: list[NodeFrame] = []
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier="test-bridge-reader") as client:
        await client.subscribe(TOPIC, qos=1)

        async def read() -> None:
            async for message in client.messages:
                frame = decode_json(bytes(message.payload))  # type: ignore[arg-type]
                assert isinstance(frame, NodeFrame)
                frames.append(frame)

        task = asyncio.create_task(read())
        try:
            yield frames
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def report_line(k: int, *, instance_id: str = "i-0a1b2c3d4e5f60718", flops: float = 2e14) -> bytes:
    """Return report ``k`` of a node whose 16 devices each run one application at 50 %, period ``PERIOD_S``."""
    document = busy(range(16), flops=flops, period=PERIOD_S + k * 1e-9)
    document["instance_info"]["instance_id"] = instance_id
    return json.dumps(document).encode() + b"\n"


def nan_line(k: int) -> bytes:
    """Return report ``k`` with device 3's flops NaN."""
    document = json.loads(report_line(k))
    for core in document["neuron_runtime_data"][3]["report"]["neuroncore_counters"]["neuroncores_in_use"].values():
        core["flops"] = float("nan")
    return json.dumps(document).encode() + b"\n"


def flop_total(frame: NodeFrame, chip: int) -> float | None:
    """Return chip ``chip``'s FLOP total in ``frame``, None where the frame does not carry it."""
    (i,) = np.flatnonzero(frame.chips["chip"] == chip)
    bit = 1 << (CHIP_DTYPE.names or ()).index("fp8_flop_total")
    known = frame.known is None or bool(int(frame.known["chips"][i]) & bit)
    return float(frame.chips["fp8_flop_total"][i]) if known else None


def chip_rates(frames: list[NodeFrame], chip: int) -> np.ndarray:
    """Return chip ``chip``'s FLOP/s between consecutive frames, as the monitor takes them: only where both
    carried its FLOP total."""
    totals = [flop_total(f, chip) for f in frames]
    return np.array([(b - a) / (g.t_s - f.t_s) for f, g, a, b in zip(frames, frames[1:], totals, totals[1:],
                                                                       strict=False)
                     if a is not None and b is not None])


@pytest.mark.mosquitto
async def test_the_bridge_survives_bad_input_and_times_frames_by_the_reports(
    mosquitto: Broker, tmp_path: Path,
) -> None:
    """Good reports, a backlog after a stall, garbage, a 17 MiB line, a NaN, another instance's report and an
    EFA device vanishing: every good report is a frame, every bad line is counted by reason on /metrics, FLOP
    rates between frames are the reports' own (never above peak), the vanished device is its port absent, and
    the end of stdin ends the bridge with 0."""
    inventory = tmp_path / "fleet.toml"
    shutil.copy(DATA / "inventory-two-sites.toml", inventory)
    sysfs = efa_tree(tmp_path / "sys", {name: efa_counters(1_000 * k) for k, name in enumerate(EFA_NAMES)})
    port = free_port()
    async with frames_on(mosquitto) as frames:
        bridge = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rainierd", "bridge", "neuron-monitor", "--node", HOST, "--topology",
            str(inventory), "--mqtt-url", mosquitto.url, "--mqtt-qos", "1", "--efa-sysfs", str(sysfs),
            "--listen", f"127.0.0.1:{port}", "--log-format", "json",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        assert bridge.stdin is not None
        await wait_until(lambda: current_values(port).get("rainier_bridge_mqtt_connected") == 1, 20,
                         "the bridge to connect")

        async def write(*lines: bytes) -> None:
            assert bridge.stdin is not None
            bridge.stdin.write(b"".join(lines))
            await bridge.stdin.drain()

        start = time.monotonic()

        async def at(k: int) -> None:  # report k is due k periods after the start
            await asyncio.sleep(max(0.0, start + k * PERIOD_S - time.monotonic()))

        for k in range(3):
            await at(k)
            await write(report_line(k))
        await write(b"not json\n", b"[1, 2, 3]\n", b"\n", b"{" * 200_000 + b"\n", b"x" * (17 * 2**20) + b"\n",
                    report_line(99, instance_id="i-0ffffffffffffffff"))
        await at(8)  # stalled: reports 3-8 waited in the pipe, and arrive at once
        await write(*(report_line(k) for k in range(3, 8)), nan_line(8))
        shutil.rmtree(sysfs / "class" / "infiniband" / "rdmap48s0")
        for k in range(9, 12):
            await at(k)
            await write(report_line(k))
        await wait_until(lambda: len(frames) == 12, 20, "12 frames")
        await wait_until(lambda: current_values(port).get("rainier_bridge_frames_published_total") == 12, 20,
                         "/metrics to count them")  # it renders once a second
        values = current_values(port)
        bridge.stdin.close()
        out, _ = await asyncio.wait_for(bridge.communicate(), within(20))
    assert bridge.returncode == 0, out.decode()

    assert [f.seq for f in frames] == list(range(12))
    assert [
        values[f'rainier_bridge_lines_skipped_total{{reason="{reason}"}}']
        for reason in ("not_json", "not_object", "empty", "oversize")] == [2, 1, 1, 1]
    assert (values['rainier_bridge_reports_refused_total{reason="instance_mismatch"}'],
            values['rainier_bridge_values_refused_total{field="flops",reason="non_finite"}'],
            values["rainier_bridge_frames_published_total"], values["rainier_bridge_reports_read_total"]) == (
        1, 4, 12, 13)
    # Sample times a period apart however the lines arrived (the backlog's read at once too), never more, so every
    # rate is the reports' own.
    t_s = np.array([f.t_s for f in frames])
    assert (np.diff(t_s[3:9]).tolist(), bool((np.diff(t_s) > 0).all()), np.diff(t_s).max() <= PERIOD_S + 1e-6) == (
        pytest.approx([PERIOD_S] * 5), True, True)
    # (A line read sooner after its report than the first was pulls the clock back to the wall clock: by at most
    # the clamp's 2 % of the period, so within 2 % of the reports' rate; the backlog's exactly.  A longer pull, 10 ms
    # at this period, which a loaded machine's late first write or read makes, steps the clock: that frame carries
    # no counters and costs the rates on either side of it, each step counted by reason on /metrics.)
    steps = sum(values[f'rainier_bridge_clock_resyncs_total{{reason="{reason}"}}']
                for reason in ("ahead", "behind", "no_period"))
    stepped = [f.seq for f in frames if flop_total(f, 0) is None]
    assert len(stepped) == steps, f"frames without counters {stepped}, clock steps counted {steps}"
    for chip, gaps in ((0, 0), (3, 2), (15, 0)):  # chip 3's NaN frame costs the rates on either side of it
        rates = chip_rates(frames, chip)
        assert len(rates) >= 11 - gaps - 2 * steps
        assert rates.tolist() == pytest.approx([8e14] * len(rates), rel=0.021)
        assert rates.max() <= TRN2.fp8_dense_flops
    # EFA counters are of now: on the first frame, never on the backlog's, and by name after the vanishing.
    assert (len(frames[0].efa), [len(f.efa) for f in frames[3:7]]) == (16, [0, 0, 0, 0])
    last = frames[-1]
    if len(last.efa):  # the frame was of now (a loaded machine may read it late; then it carries none)
        absent = last.efa["port"][last.efa["present"] == 0].tolist()
        assert absent == [2]


def listening(port: int) -> bool:
    """Return True once a process answers ``/metrics`` with samples on ``port``."""
    return bool(current_values(port))


@pytest.mark.mosquitto
async def test_neuron_monitor_through_the_bridge_into_the_monitor(
    mosquitto: Broker, start_rainierd: Any, tmp_path: Path,
) -> None:
    """The captured reports, 1 s apart: chip utilisation, effective FP8 and HBM ECC (per period, added up) per
    chip on the monitor's /metrics; links unknown, not down."""
    inventory = tmp_path / "fleet.toml"
    text = (DATA / "inventory-two-sites.toml").read_text()
    inventory.write_text(text.replace(f'hostname = "{HOST}"', f'hostname = "{HOST}"\n    detail = true', 1))
    sysfs = tmp_path / "sys"
    sysfs.symlink_to(SAMPLES / "efa-sysfs-t0")
    port = free_port()
    start_rainierd(
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--topology", str(inventory),
        name="monitor",
    )
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 15, "the monitor to connect")
    bridge_port = free_port()
    bridge = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rainierd", "bridge", "neuron-monitor", "--node", HOST, "--topology", str(inventory),
        "--mqtt-url", mosquitto.url, "--mqtt-qos", "1", "--efa-sysfs", str(sysfs), "--log-format", "json",
        "--listen", f"127.0.0.1:{bridge_port}",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert bridge.stdin is not None
    # The first report once the bridge is up, as neuron-monitor's comes a period after both start: a line left in
    # the pipe while the bridge starts (seconds on a loaded machine) starts its sample clock late, and each line
    # read on time after it steps the clock back, its frame without counters (docs/bridge.md), so that the last
    # report's ECC count never reached the monitor in a loaded fresh-clone rehearsal.
    await wait_until(lambda: bridge.returncode is not None or listening(bridge_port), 30, "the bridge to listen")
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

    reports = [json.loads(line) for line in lines]
    ecc4 = sum(next(d for d in copy.deepcopy(r)["system_data"]["neuron_hw_counters"]["neuron_devices"]
                    if d["neuron_device_index"] == 4)["mem_ecc_corrected"] for r in reports)

    def ecc(values: dict[str, float]) -> float | None:
        name = 'rainier_chip_ecc_corrected_errors_total{chip="4",'
        return next((v for k, v in values.items() if k.startswith(name) and f'hostname="{HOST}"' in k), None)

    # The last report is on /metrics once the monitor has applied it and a tick has passed: waited for, not slept
    # for (2 s was too short on a loaded machine), by the cumulative ECC count only the last report completes.
    await wait_until(lambda: ecc(sample_values(scrape(port))) == ecc4, 20, "the last report on the monitor")
    values = sample_values(scrape(port))
    cores = reports[-1]["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]

    def series(name: str, chip: int) -> float:
        key = next(k for k in values if k.startswith(f'{name}{{chip="{chip}",') and f'hostname="{HOST}"' in k)
        return values[key]

    for chip in (0, 9):
        util = sum(cores[str(4 * chip + c)]["neuroncore_utilization"] for c in range(4)) / 400
        flops = sum(cores[str(4 * chip + c)]["flops"] for c in range(4))
        assert series("rainier_chip_utilization_ratio", chip) == pytest.approx(util, rel=1e-6)
        # FLOP of the report's own period over the sample clock's: the report's rate.
        assert series("rainier_chip_fp8_effective_flops", chip) == pytest.approx(flops, rel=1e-3)
    assert series("rainier_chip_ecc_corrected_errors_total", 4) == ecc4
    assert series("rainier_chip_ecc_uncorrected_errors_total", 0) == 0
    assert values["rainier_fleet_chips_reporting"] == 16
    # What neuron-monitor cannot say stays unknown: the node's 48 links (and the 8 silent nodes'), never down.
    assert values['rainier_unknown{entity="neuronlink",judgement="health"}'] == 9 * 48
    assert values['rainier_unknown{entity="efa",judgement="health"}'] == 8 * 16  # its ports report, via sysfs
    assert values['rainier_unhealthy{entity="neuronlink",state="down"}'] == 0
    assert not [k for k in values if k.startswith("rainier_neuronlink_unhealthy{")]
    assert sum(v for k, v in values.items() if k.startswith("rainier_ingest_decode_errors_total")) == 0
