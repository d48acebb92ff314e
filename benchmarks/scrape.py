"""``benchmarks scrape``: what a Prometheus scrape costs, as the daemon
serves it.  An in-process exporter (the daemon's registry, UltraServer
families and HTTP server) holds a snapshot of a simulated fleet with some
faults, re-renders it once a second as the monitor does after each analysis,
and a separate client process scrapes it, plain and then gzipped as
Prometheus asks; the event loop's lag is sampled throughout.  Reports scrape
latency (median, p99) and body size of each, series count, render time and
the worst loop lag, per preset.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Final

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.daemon import SWITCH_INTERVAL_S
from rainierd.exporter import route_metrics_and_probes
from rainierd.exporter.wiring import build_exporter
from rainierd.fleet.topology import PRESETS, Topology, build_topology
from rainierd.http.config import HttpConfig
from rainierd.http.server import HttpServer
from rainierd.monitor.snapshot import IngestCounts, MonitorSnapshot, MonitorStatus
from rainierd.mqtt.connection import Connection
from rainierd.runtime.looplag import LoopLag
from rainierd.runtime.probes import Verdict
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.scenarios import random_faults

__all__ = ["HELP", "add_arguments", "bench_scrape", "run", "snapshots"]

HELP: Final = "/metrics latency, size and event-loop lag"

_CLIENT = """
import json, sys, time, urllib.request
url, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
out = []
for _ in range(count):
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    out.append(time.perf_counter() - started)
    time.sleep(interval)
gz = []
for _ in range(count):  # as Prometheus asks: gzip (the first may compress; later ones are served compressed)
    time.sleep(interval)
    started = time.perf_counter()
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as r:
        gzipped = r.read()
    gz.append(time.perf_counter() - started)
print(json.dumps({"latency_s": out, "bytes": len(body), "gzip_bytes": len(gzipped), "gzip_latency_s": gz,
                  "series": sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))}))
"""


def _snapshot(preset: str, seed: int) -> tuple[MonitorCore, MonitorSnapshot, Any]:
    return next(snapshots(preset, seed))


def snapshots(preset: str, seed: int) -> Iterator[tuple[MonitorCore, MonitorSnapshot, Topology]]:
    """Yield the monitor's snapshot of a simulated ``preset`` fleet with some faults, a tick at a time, from its
    twelfth tick on (with the core that made it, for its stats, and the topology)."""
    topo = build_topology(preset)
    rng = np.random.default_rng(seed)
    # Faults at 2e3 x the calibrated rates over 1,000 ticks: a busy fleet's worth of unhealthy entities.
    faults = [replace(f, start_tick=0, end_tick=100)
              for f in random_faults(topo, rng, ticks=1_000, tick_s=1.0, acceleration=2e3)]
    model = FleetModel(topo, rng, tick_s=1.0, start_s=1.8e9, faults=faults)
    core = MonitorCore(topo)
    for tick in itertools.count():
        analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="bench")])
        if tick >= 11:
            status = MonitorStatus(ingest=IngestCounts.of(core.stats), connection=Connection(connected=True),
                                   loop_lag_worst_s=0.0)
            yield core, MonitorSnapshot.of(analysis, generation=tick - 10, chips_total=topo.n_present_chips,
                                           analysis_s=0.0, analysed_ticks=tick + 1, events=Counter(), lag_s=0.1,
                                           status=status), topo


async def _serve_and_scrape(preset: str, *, scrapes: int, interval_s: float, seed: int) -> dict[str, Any]:
    _core, snap, topo = _snapshot(preset, seed)
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as the daemon runs
    generation = 1
    lag = LoopLag(interval_s=0.01, window=1_000_000)
    exporter = build_exporter(topo, lambda: snap)
    server = HttpServer(HttpConfig(host="127.0.0.1", port=0))
    metrics = route_metrics_and_probes(server, exporter.render, generation=lambda: generation,
                                       healthy=lambda: Verdict(True, "ok"), ready=lambda: Verdict(True, "ready"))
    render_s: list[float] = []

    async def analysis_ticks() -> None:
        nonlocal generation
        while True:
            generation += 1
            started = time.perf_counter()
            await metrics.refresh()
            render_s.append(time.perf_counter() - started)
            await asyncio.sleep(1.0)

    async with server, asyncio.TaskGroup() as tg:
        port = server.port
        tasks = [tg.create_task(lag.run(), name="loop-lag"),
                 tg.create_task(analysis_ticks(), name="analysis-ticks")]
        await asyncio.sleep(1.5)
        lag.samples.clear()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLIENT, f"http://127.0.0.1:{port}/metrics", str(scrapes), str(interval_s),
            stdout=subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        for task in tasks:
            task.cancel()
    client = json.loads(out)
    latency = client["latency_s"]
    lags = list(lag.samples)
    return {
        "topology": preset, "chips": topo.n_chips, "series": client["series"], "bytes": client["bytes"],
        "gzip_bytes": client["gzip_bytes"],
        "gzip_scrape_latency_s": {"median": statistics.median(client["gzip_latency_s"]),
                                  "p99": float(np.percentile(client["gzip_latency_s"], 99)),
                                  "max": max(client["gzip_latency_s"])},
        "scrapes": len(latency),
        "scrape_latency_s": {"median": statistics.median(latency), "p99": float(np.percentile(latency, 99)),
                             "max": max(latency)},
        "render_s_median": statistics.median(render_s) if render_s else None,
        "loop_lag_s": {"median": statistics.median(lags) if lags else None,
                       "p99": float(np.percentile(lags, 99)) if lags else None, "max": max(lags, default=None)},
        "unhealthy": {k: int(v.size) for k, v in snap.health.ids.items()} if snap.health else {},
    }


def bench_scrape(presets: list[str], *, scrapes: int, interval_s: float, seed: int) -> dict[str, Any]:
    """Return the scrape report for each preset."""
    return {"benchmark": "scrape", "results": [
        asyncio.run(_serve_and_scrape(p, scrapes=scrapes, interval_s=interval_s, seed=seed)) for p in presets
    ]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", nargs="+", default=["demo", "rainier"], choices=list(PRESETS))
    parser.add_argument("--scrapes", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between scrapes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    report = bench_scrape(args.topology, scrapes=args.scrapes, interval_s=args.interval, seed=args.seed)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("| topology | chips | series | bytes | scrape median | scrape p99 | render median | loop lag p99 | "
          "loop lag max |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in report["results"]:
        ms = 1e3
        print(f"| {r['topology']} | {r['chips']:,} | {r['series']:,} | {r['bytes']:,} | "
              f"{r['scrape_latency_s']['median'] * ms:.1f} ms | {r['scrape_latency_s']['p99'] * ms:.1f} ms | "
              f"{r['render_s_median'] * ms:.0f} ms | {r['loop_lag_s']['p99'] * ms:.1f} ms | "
              f"{r['loop_lag_s']['max'] * ms:.1f} ms |")
    return 0
