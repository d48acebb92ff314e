"""``benchmarks run``: the cost of a whole ``rainierd run`` process, from
outside: CPU share and resident memory over a steady-state window, and how
long SIGINT takes to stop it.  Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from typing import Any, Final

from harness.procs import cpu_s, free_port, rss_bytes
from rainierd.fleet.topology import PRESETS

__all__ = ["HELP", "add_arguments", "bench_process", "run"]

HELP: Final = "CPU and memory of a whole `rainierd run` process"


def bench_process(topology: str, *, warmup_s: float, window_s: float) -> dict[str, Any]:
    """Run ``rainierd run`` and return its CPU share, RSS and stop time."""
    cmd = [sys.executable, "-m", "rainierd", "run", "--topology", topology,
           "--metrics-addr", f"127.0.0.1:{free_port()}", "--log-format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(warmup_s)
        cpu0, t0 = cpu_s(proc.pid), time.monotonic()
        time.sleep(window_s)
        cpu1, t1 = cpu_s(proc.pid), time.monotonic()
        rss = rss_bytes(proc.pid)
        stop_started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        stop_s = time.monotonic() - stop_started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {
        "benchmark": "run",
        "topology": topology,
        "window_s": round(t1 - t0, 2),
        "cpu_share_of_one_core": (cpu1 - cpu0) / (t1 - t0),
        "rss_bytes": rss,
        "sigint_exit_code": code,
        "sigint_stop_s": stop_s,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", default="demo", choices=list(PRESETS))
    parser.add_argument("--seconds", type=float, default=60.0, help="measurement window")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a line of text."""
    result = bench_process(args.topology, warmup_s=args.warmup, window_s=args.seconds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"rainierd run --topology {result['topology']}: "
              f"{100 * result['cpu_share_of_one_core']:.2f} % of one core over {result['window_s']} s, "
              f"RSS {result['rss_bytes'] / 2**20:.0f} MiB, SIGINT -> exit {result['sigint_exit_code']} "
              f"in {result['sigint_stop_s']:.2f} s")
    return 0 if result["sigint_exit_code"] == 0 else 1
