"""``benchmarks simfeed``: how many node frames a second the simulator alone
can publish, one frame per node as a real fleet's agents do.

The aggregation tier's end-to-end test (``ingest --aggregators N``) can
only show what the feed gives it, so the feed is measured on its own: a
real Mosquitto, a null subscriber (``mosquitto_sub``, C, printing only each
message's topic to a file, so the subscriber is not what bounds the run) on
the node telemetry, and ``rainierd simulate --batch-nodes 0`` for a bounded
number of ticks.  After a warm-up, over the window: the messages the
subscriber received a second, the CPU of the simulator, the broker and the
subscriber; at the end, the simulator's own count of frames published and
dropped from its outbox, and its late ticks; and how long the simulator's
threads waited for a CPU while runnable (on a shared machine, a simulator
that waits is starved, not saturated).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from benchmarks._fleet import last_log
from harness.procs import cpu_s, max_rss_bytes, mosquitto, require_binary, runqueue_wait_s
from rainierd.fleet.topology import build_topology

__all__ = ["HELP", "add_arguments", "run"]

HELP: Final = "the simulator alone, one frame per node, into a real Mosquitto with a null subscriber"


def _waited_s(pid: int) -> float:
    """Return the seconds every thread of ``pid`` has waited for a CPU while runnable (a shared machine's
    toll: a process that waits is starved, not saturated)."""
    return sum(runqueue_wait_s(pid, int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir())


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def run_size(topology: str, *, tick_s: float, warmup_s: float, window_s: float, workdir: Path) -> dict[str, Any]:
    """Run simulate -> Mosquitto -> a null subscriber at one size; return what was measured."""
    topo = build_topology(topology)
    ticks = math.ceil((warmup_s + window_s) / tick_s) + 2
    sub_bin = require_binary("mosquitto_sub", package="mosquitto-clients")
    received = workdir / f"received-{topology}.txt"
    sim_log = workdir / f"simulate-{topology}.log"
    with mosquitto(workdir) as broker, received.open("wb") as out:
        sub = subprocess.Popen([sub_bin, "-h", "127.0.0.1", "-p", str(broker.port), "-t", "rainier/v1/telemetry/#",
                                "-F", "%t"], stdout=out)
        time.sleep(1.0)
        cmd = [sys.executable, "-m", "rainierd", "simulate", "--topology", topology, "--tick", str(tick_s),
               "--log-format", "json", "--mqtt-url", broker.url, "--ticks", str(ticks), "--batch-nodes", "0"]
        with sim_log.open("w") as log_out:
            sim = subprocess.Popen(cmd, stdout=log_out, stderr=subprocess.STDOUT)
        try:
            time.sleep(warmup_s)
            procs = {"simulate": sim.pid, "mosquitto": broker.pid, "subscriber": sub.pid}
            cpu0, n0, t0 = {k: cpu_s(p) for k, p in procs.items()}, _lines(received), time.monotonic()
            wait0 = _waited_s(sim.pid)
            time.sleep(window_s)
            cpu1, n1, t1 = {k: cpu_s(p) for k, p in procs.items()}, _lines(received), time.monotonic()
            wait1 = _waited_s(sim.pid)
            rss = max_rss_bytes(sim.pid)
            try:
                sim.wait(timeout=ticks * tick_s + 120)
            except subprocess.TimeoutExpired:
                sim.terminate()
                sim.wait(timeout=60)
            time.sleep(2.0)
        finally:
            if sim.poll() is None:
                sim.kill()
            sub.terminate()
            sub.wait()
    finished = last_log(sim_log, "simulation finished")
    seconds = t1 - t0
    total = _lines(received)
    return {
        "topology": topology, "nodes": topo.n_nodes, "chips": topo.n_chips, "tick_s": tick_s,
        "window_s": round(seconds, 2),
        "offered_frames_per_s": topo.n_nodes / tick_s,
        "received_messages_per_s": (n1 - n0) / seconds,
        "cpu_share_of_one_core": {k: (cpu1[k] - cpu0[k]) / seconds for k in cpu0},
        "simulate_cpu_us_per_frame": (cpu1["simulate"] - cpu0["simulate"]) / (n1 - n0) * 1e6 if n1 > n0 else None,
        "simulate_waited_for_cpu_share": (wait1 - wait0) / seconds,
        "simulate_max_rss_bytes": rss,
        "simulator": {k: finished.get(k) for k in ("ticks", "frames_published", "frames_dropped", "ticks_late",
                                                    "messages_published")},
        "subscriber_received_total": total,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", nargs="+", default=["sites=1,ultraservers=400", "rainier"])
    parser.add_argument("--tick", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    results = []
    with tempfile.TemporaryDirectory(prefix="rainierd-bench-simfeed-") as tmp:
        for topology in args.topology:
            r = run_size(topology, tick_s=args.tick, warmup_s=args.warmup, window_s=args.seconds, workdir=Path(tmp))
            print(f"bench simfeed: {topology}: {r['received_messages_per_s']:,.0f} of {r['offered_frames_per_s']:,.0f} "
                  f"frames/s, CPU {r['cpu_share_of_one_core']}", file=sys.stderr)
            results.append(r)
    report = {"benchmark": "simfeed", "results": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("| topology | offered frames/s | received/s | CPU sim / broker / sub | sim µs a frame | sim waited for CPU | "
          "published | dropped | ticks late |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        c, s = r["cpu_share_of_one_core"], r["simulator"]
        print(f"| {r['topology']} | {r['offered_frames_per_s']:,.0f} | "
              f"{r['received_messages_per_s']:,.0f} | {c['simulate']:.2f} / {c['mosquitto']:.2f} / "
              f"{c['subscriber']:.2f} | {r['simulate_cpu_us_per_frame'] or 0:.0f} | "
              f"{r['simulate_waited_for_cpu_share']:.2f} | {s['frames_published']} | {s['frames_dropped']} | "
              f"{s['ticks_late']} |")
    return 0
