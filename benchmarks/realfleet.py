"""``python -m benchmarks realfleet``: real Trainium2 nodes through real
processes for as long as an on-call engineer would want before trusting a
page: four nodes' neuron-monitor streams (written from AWS's documentation,
``harness/neuron_monitor.py``) and EFA driver counters, each through its own
``rainierd bridge neuron-monitor`` into a real Mosquitto and a real
``rainierd monitor`` (``harness/realfleet.py``), at neuron-monitor's default
5 s period beside the monitor's 1 s tick.

Without ``--faults`` (the control, default 30 minutes) every raise is a false
alarm; with it, the seven faults of ``SEVEN_FAULTS`` start at 90 s and their
time to detect is reported (the end-to-end test, ``tests/integration/
test_real_nodes_e2e.py``, asserts the same in four minutes).  Both score each
node's effective FP8 on the read API against the generator's truth for the
report it is from (p50, p99, max relative error; the largest chip figure
against the chip's peak), stop one bridge for 5 s at 45 s, and report each
process's CPU share of one core and peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from harness.neuron_monitor import FP8_DENSE_FLOPS_PER_DEVICE
from harness.procs import cpu_s, max_rss_bytes, mosquitto
from harness.realfleet import FAULT_AT_S, SEVEN_FAULTS, RealFleet, Scoreboard, drive, judge, node_plans

__all__ = ["HELP", "add_arguments", "run"]

HELP: Final = "real nodes (documented neuron-monitor streams) through real bridges into a monitor: false alarms, " \
              "time to detect, FP8 against truth"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options."""
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (simulated = wall time)")
    parser.add_argument("--faults", action="store_true", help="inject the seven faults at 90 s")
    parser.add_argument("--period", type=float, default=5.0, help="neuron-monitor's period, seconds")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a summary")


async def _run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    run_s = args.minutes * 60.0
    board = Scoreboard(args.period)
    with mosquitto(workdir) as broker:
        plans = node_plans(faults=args.faults, period_s=args.period, seed=args.seed)
        async with RealFleet(plans, workdir=workdir, broker_url=broker.url, monitor_args=("--tick", "1")) as fleet:
            started = time.monotonic()
            pids = {"monitor": fleet.monitor.pid} if fleet.monitor is not None else {}
            pids |= {f"bridge-n{n.index}": n.proc.pid for n in fleet.nodes if n.proc is not None}
            cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
            await drive(fleet, board, run_s=run_s, stall=(3, 45.0, 5.0))
            elapsed = time.monotonic() - started
            cpu = {name: (cpu_s(pid) - cpu0[name]) / elapsed for name, pid in pids.items()}
            rss = {name: max_rss_bytes(pid) for name, pid in pids.items()}
            events = (await asyncio.to_thread(fleet.api, "/api/v1/events?limit=1000"))["events"]
            refused = {k: v for k, v in fleet.metrics().items()
                       if k.startswith("rainier_ingest_counters_refused_total") and v}
            wall_fault = fleet.wall(FAULT_AT_S)
    found, missing, false_alarms = judge(events, SEVEN_FAULTS if args.faults else (), wall_fault_s=wall_fault)
    return {
        "benchmark": "realfleet", "minutes": args.minutes, "period_s": args.period, "faults": args.faults,
        "seed": args.seed, "nodes": 4,
        "time_to_detect_s": found, "missed": missing, "false_alarms": false_alarms,
        "node_fp8_error": {"samples": len(board.errors), "unknown": board.unknown, "p50": board.percentile(50),
                           "p99": board.percentile(99), "max": max(board.errors, default=float("nan")),
                           "worst": [{"error": e, "node": n, "t_s": t, "seen": s, "truth": w}
                                     for e, n, t, s, w in board.worst]},
        "top_chip_flops": board.top_chip_flops, "chip_peak_flops": FP8_DENSE_FLOPS_PER_DEVICE,
        "counters_refused": refused,
        "cpu_share_of_a_core": cpu, "max_rss_bytes": rss,
    }


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; print its report."""
    with tempfile.TemporaryDirectory(prefix="bench-realfleet-") as tmp:
        report = asyncio.run(_run(args, Path(tmp)))
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    error = report["node_fp8_error"]
    print(f"realfleet: {args.minutes:g} min, period {args.period:g} s, faults {'on' if args.faults else 'off'}")
    print(f"  false alarms: {len(report['false_alarms'])}; missed: {report['missed'] or 'none'}")
    print(f"  time to detect (s): {({k: round(v, 1) for k, v in report['time_to_detect_s'].items()})}")
    print(f"  node FP8 error: p50 {error['p50']:.2e} p99 {error['p99']:.2e} max {error['max']:.2e} "
          f"({error['samples']} samples); top chip {report['top_chip_flops']:.4g} of {FP8_DENSE_FLOPS_PER_DEVICE:.4g}")
    print(f"  CPU share: {({k: round(v, 3) for k, v in report['cpu_share_of_a_core'].items()})}")
    return 0
