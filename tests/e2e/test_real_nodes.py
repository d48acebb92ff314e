"""Real Trainium2 nodes end to end: four nodes' neuron-monitor streams, written
from AWS's public documentation alone (harness/neuron_monitor.py), and their EFA
driver counters (harness/efa_sysfs.py), each through its own real
``rainierd bridge neuron-monitor`` process into a real Mosquitto and a real
``rainierd monitor`` (harness/realfleet.py), at neuron-monitor's default 5 s
period beside the monitor's 1 s tick.

One run injects the seven faults a real node can show (harness/realfleet.py
``SEVEN_FAULTS``: a utilisation collapse, a chip doing 30 % less FLOP than its
peers, uncorrectable HBM ECC, rising execution errors, a degraded EFA port, an
EFA device vanishing, a Neuron device vanishing), each on its own device, and
stops one bridge for 5 s before them: each fault is raised on its entity with
its reason, nothing else is raised, and every node's effective FP8 as the read
API shows it matches the generator's truth for that report within 5 % at p99
and never passes the chips' peak.  Time to detect is printed (``-s``).  The
half-hour fault-free run is the ``realfleet`` benchmark's (benchmarks/README.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.neuron_monitor import FP8_DENSE_FLOPS_PER_DEVICE
from harness.procs import Broker
from harness.realfleet import CHIPS_PER_NODE, FAULT_AT_S, SEVEN_FAULTS, RealFleet, Scoreboard, drive, judge, node_plans

pytestmark = [pytest.mark.e2e, pytest.mark.mosquitto]

PERIOD_S = 5.0  # neuron-monitor's documented default
RUN_S = FAULT_AT_S + 140.0
RESYNCS = "rainier_bridge_clock_resyncs_total{"  # the bridge's clock steps, by reason


@pytest.mark.long(235)
async def test_seven_faults_of_real_nodes_are_raised_and_fp8_is_the_truth(mosquitto: Broker, tmp_path: Path) -> None:
    """Seven faults of four real nodes at a 5 s period are each raised with its reason and nothing else is;
    each node's FP8 is within 5 % of the truth at p99, never above peak, through a 5 s stall of a bridge."""
    board = Scoreboard(PERIOD_S)
    async with RealFleet(node_plans(faults=True, period_s=PERIOD_S), workdir=tmp_path, broker_url=mosquitto.url,
                         monitor_args=("--tick", "1")) as fleet:
        await drive(fleet, board, run_s=RUN_S, stall=(3, 45.0, 5.0))
        events = (await asyncio.to_thread(fleet.api, "/api/v1/events?limit=1000"))["events"]
        reporting = fleet.metrics().get("rainier_fleet_chips_reporting", 0.0)
        bridges = [fleet.bridge_metrics(i) for i in range(4)]
        published = [b.get("rainier_bridge_frames_published_total", 0.0) for b in bridges]
        resyncs = {f"n{i}": {k.split('"')[1]: v for k, v in b.items() if k.startswith(RESYNCS)}
                   for i, b in enumerate(bridges)}
        wall_fault = fleet.wall(FAULT_AT_S)

    found, missing, false_alarms = judge(events, SEVEN_FAULTS, wall_fault_s=wall_fault)
    print("time to detect (s):", {k: round(v, 1) for k, v in found.items()})
    print(f"node FP8 relative error: p50 {board.percentile(50):.2e}, p99 {board.percentile(99):.2e}, "
          f"max {max(board.errors, default=float('nan')):.2e}, {len(board.errors)} samples, {board.unknown} unknown; "
          f"worst {board.worst[:2]}; bridge clock resyncs {resyncs}")
    assert (missing, false_alarms) == ([], [])
    assert len(board.errors) > 4 * RUN_S / PERIOD_S, "too few node figures could be compared with the truth"
    # Unknown only where a chip has no interval yet, or where a bridge stepped its sample clock: a report read more
    # than 2 % of a period earlier than the clock expected (CPU starvation: reads jitter) is stamped at the wall
    # clock without counters (docs/bridge.md), so its node's FP8 is unknown for that frame and the next, about
    # (period + 1) polls each. On a loaded machine (four CPU hogs beside the test, 2026-12-07): 15 steps, all
    # "ahead", and 110 unknown of 570; on a quiet one, none. Counted by the bridge, so allowed by that count.
    steps = sum(sum(by_reason.values()) for by_reason in resyncs.values())
    assert {reason for by_reason in resyncs.values() for reason, n in by_reason.items() if n} <= {"ahead"}
    assert board.unknown <= 0.05 * len(board.errors) + steps * 2 * (PERIOD_S + 1)
    assert board.percentile(99) <= 0.05
    assert board.top_chip_flops <= FP8_DENSE_FLOPS_PER_DEVICE
    assert board.top_node_flops <= CHIPS_PER_NODE * FP8_DENSE_FLOPS_PER_DEVICE
    assert reporting >= 4 * CHIPS_PER_NODE - 1  # the vanished device's chip is failed, still reporting absent
    assert all(frames > 0 for frames in published)
