"""``benchmarks api``: what the read API (``/api/v1/…``, docs/api.md) costs,
as the daemon serves it.  An in-process exporter with the daemon's
``ReadApi`` holds a snapshot of a simulated fleet with some faults and 1,000
jobs (the monitor core, the jobs and the event log are real); a separate
client process asks each endpoint ``--requests`` times in turn (then as
many times accepting gzip, which answers of 16 KiB or more get), and the
event loop's lag is sampled throughout.  Reports each endpoint's response
time (median, p99, max) and body size, the per-UltraServer table's build
time (once per snapshot, in a worker thread), and the event loop's lag
while each endpoint is asked (its client alone), per preset.

The snapshot does not change during a run, so the table is built once:
the first answer after each analysis also pays ``table_build_s``.  What
serving the API does to the monitor's tick is ``--tick-pairs N``'s
question (a monitor that ticks, with and without a client that polls as a
terminal UI does: benchmarks/_apitick.py), with ``--follow-command`` the
follower's own CPU and memory (benchmarks/_follow.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from typing import Any, Final

import numpy as np

from benchmarks._apitick import bench_tick, spread
from benchmarks._table import print_table
from rainierd.api import ReadApi
from rainierd.api.ultraservers import UltraServerTable
from rainierd.core.analysis import MonitorCore
from rainierd.core.jobs import NameIndex, resolve_jobs
from rainierd.daemon import SWITCH_INTERVAL_S
from rainierd.fleet.topology import PRESETS, Topology, build_topology
from rainierd.http.config import HttpConfig
from rainierd.http.server import HttpServer
from rainierd.monitor.events import EventLog
from rainierd.monitor.snapshot import IngestCounts, MonitorSnapshot, MonitorStatus
from rainierd.mqtt.connection import Connection
from rainierd.runtime.logs import configure_logging
from rainierd.runtime.looplag import LoopLag
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.scenarios import random_faults
from rainierd.wire.jobs import JobDocument

__all__ = ["HELP", "add_arguments", "bench_api", "run"]

HELP: Final = "/api/v1/ response time and size per endpoint"

_CLIENT = """
import json, sys, time, urllib.request
base, count, targets = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
out = {}
for target in targets:
    row = {}
    for kind, headers in (("", {}), ("gzip_", {"Accept-Encoding": "gzip"})):
        times, size = [], 0
        for _ in range(count):
            started = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(base + target, headers=headers), timeout=60) as r:
                body = r.read()
            times.append(time.perf_counter() - started)
            size = len(body)
        row[kind + "latency_s"], row[kind + "bytes"] = times, size
    out[target] = row
print(json.dumps(out))
"""


def _fleet(preset: str, seed: int, *, n_jobs: int, ticks: int) -> tuple[Topology, MonitorCore, MonitorSnapshot,
                                                                         EventLog]:
    """Return a monitor's state after ``ticks`` ticks of a simulated ``preset`` fleet with faults and jobs."""
    topo = build_topology(preset)
    rng = np.random.default_rng(seed)
    faults = [replace(f, start_tick=0, end_tick=100)
              for f in random_faults(topo, rng, ticks=1_000, tick_s=1.0, acceleration=2e3)]
    model = FleetModel(topo, rng, tick_s=1.0, start_s=1.8e9, faults=faults)
    blocks = np.array_split(np.arange(topo.n_ultraservers), min(n_jobs, topo.n_ultraservers))
    jobs = resolve_jobs(NameIndex.of(topo), [
        JobDocument(v=1, id=f"team{j % 17}/job{j:04d}", name=f"job{j:04d}", owner=f"team{j % 17}",
                    scheduler="slurm", source="bench", ultraservers=[f"u{u}" for u in block.tolist()], start_s=0.0)
        for j, block in enumerate(blocks)])
    core = MonitorCore(topo)
    events = EventLog(topo, qos=1)
    for tick in range(ticks):
        analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="bench")], jobs=jobs)
        for event in analysis.events:
            events.announce(event)
    status = MonitorStatus(ingest=IngestCounts.of(core.stats), connection=Connection(connected=True),
                           loop_lag_worst_s=0.0)
    snap = MonitorSnapshot.of(analysis, generation=ticks, chips_total=topo.n_present_chips, analysis_s=0.0,
                              analysed_ticks=ticks, events=Counter(events.counts), lag_s=0.1, status=status)
    return topo, core, snap, events


async def _serve_and_ask(preset: str, *, requests: int, seed: int, n_jobs: int, ticks: int) -> dict[str, Any]:
    topo, core, snap, events = _fleet(preset, seed, n_jobs=n_jobs, ticks=ticks)
    builds = []
    for _ in range(5):
        started = time.perf_counter()
        table = UltraServerTable.of(topo, snap)
        builds.append(time.perf_counter() - started)
    worst_us = int(np.nanargmin(np.where(table.present, table.share, np.nan)))
    worst_job = snap.jobs.ids[int(np.argmax(snap.job_loss.lost_total))] if snap.jobs and snap.job_loss else "none"
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as the daemon runs, with what was built so far frozen
    gc.collect()
    gc.freeze()
    lag = LoopLag(interval_s=0.01, window=1_000_000)
    api = ReadApi(topo, lambda: snap, core=core, lock=asyncio.Lock(), events=lambda: events.recent)
    server = HttpServer(HttpConfig(host="127.0.0.1", port=0))
    server.route("/api/v1/", api.serve)
    targets = ["/api/v1/", "/api/v1/fleet", "/api/v1/sites", "/api/v1/ultraservers",
               "/api/v1/ultraservers?sort=effective_share&limit=50", "/api/v1/ultraservers?sort=lost&limit=10000",
               "/api/v1/ultraservers?limit=10000&fields=site,effective_share,unhealthy_total",
               f"/api/v1/ultraservers/u{worst_us}", "/api/v1/jobs", "/api/v1/jobs?sort=id&limit=10000",
               f"/api/v1/jobs/{worst_job}", "/api/v1/events", "/api/v1/events?limit=1000"]
    async with server, asyncio.TaskGroup() as tg:
        port = server.port
        lagging = tg.create_task(lag.run(), name="loop-lag")
        await asyncio.sleep(0.5)
        lag.samples.clear()
        await asyncio.sleep(3.0)  # the loop's lag with no request: the machine's noise
        idle = list(lag.samples)
        client: dict[str, Any] = {}
        for target in targets:  # one client a target, so each endpoint's loop lag is its own
            lag.samples.clear()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _CLIENT, f"http://127.0.0.1:{port}", str(requests), json.dumps([target]),
                stdout=subprocess.PIPE,
            )
            out, _ = await proc.communicate()
            client[target] = json.loads(out)[target] | {"lags": list(lag.samples)}
        lagging.cancel()
    return {
        "topology": preset, "chips": topo.n_chips, "ultraservers": topo.n_ultraservers,
        "jobs": snap.jobs.n_jobs if snap.jobs else 0, "recent_events": len(events.recent),
        "unhealthy": {k: int(v.size) for k, v in snap.health.ids.items()} if snap.health else {},
        "requests_per_endpoint": requests, "table_build_s_median": statistics.median(builds),
        "loop_lag_idle_s": spread(idle),
        "endpoints": [{"target": t, "bytes": r["bytes"], "latency_s": spread(r["latency_s"]),
                       "gzip_bytes": r["gzip_bytes"], "gzip_latency_s": spread(r["gzip_latency_s"]),
                       "loop_lag_s": spread(r["lags"])} for t, r in client.items()],
    }


def bench_api(presets: list[str], *, requests: int, seed: int, jobs: int, ticks: int) -> dict[str, Any]:
    """Return the API report for each preset."""
    return {"benchmark": "api", "results": [
        asyncio.run(_serve_and_ask(p, requests=requests, seed=seed, n_jobs=jobs, ticks=ticks)) for p in presets
    ]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", nargs="+", default=["rainier"], choices=list(PRESETS))
    parser.add_argument("--requests", type=int, default=30, help="requests per endpoint")
    parser.add_argument("--jobs", type=int, default=1_000, help="jobs over the fleet (whole UltraServers each)")
    parser.add_argument("--ticks", type=int, default=12, help="ticks simulated before the snapshot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tick-pairs", type=int, default=0, metavar="N",
                        help="instead: a monitor that ticks, fed by a simulator over Mosquitto, in N pairs of "
                             "windows without and with a client polling as a terminal UI does (default 0: not run)")
    parser.add_argument("--window-s", type=float, default=30.0, help="--tick-pairs: seconds a window")
    parser.add_argument("--warmup-s", type=float, default=30.0, help="--tick-pairs: seconds before the first window")
    parser.add_argument("--tick", type=float, default=1.0, dest="tick_s", help="--tick-pairs: seconds a tick")
    parser.add_argument("--fault-acceleration", type=float, default=2e3,
                        help="--tick-pairs: the simulator's random faults at the calibrated rates times this")
    parser.add_argument("--follow-command", metavar="CMD",
                        help="with a ticking monitor: run CMD in a tmux terminal ({url}: the monitor's URL) and "
                             "report its CPU and memory, e.g. '.venv/bin/rainierd top --url {url}'")
    parser.add_argument("--follow-s", type=float, default=60.0, help="--follow-command: seconds it runs")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    # The event log logs each event it keeps; at rainier the simulated faults raise thousands.
    configure_logging(log_format="auto", level="error")
    if args.tick_pairs > 0 or args.follow_command:
        if args.follow_command and "{url}" not in args.follow_command:
            print("bench api: --follow-command needs {url} where the monitor's URL goes", file=sys.stderr)
            return 2
        return _print_tick(bench_tick(
            args.topology, tick_s=args.tick_s, warmup_s=args.warmup_s, pairs=max(0, args.tick_pairs),
            window_s=args.window_s, fault_acceleration=args.fault_acceleration, seed=args.seed,
            follow_command=args.follow_command, follow_s=args.follow_s), as_json=args.json)
    report = bench_api(args.topology, requests=args.requests, seed=args.seed, jobs=args.jobs, ticks=args.ticks)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for r in report["results"]:
        print(f"{r['topology']}: {r['ultraservers']:,} UltraServers, {r['jobs']:,} jobs, table build "
              f"{r['table_build_s_median'] * 1e3:.1f} ms, loop lag idle max {r['loop_lag_idle_s']['max'] * 1e3:.1f} ms")
        print("| endpoint | bytes | median | p99 | gzip bytes | gzip median | loop lag max |\n"
              "|---|---|---|---|---|---|---|")
        for e in r["endpoints"]:
            print(f"| `{e['target']}` | {e['bytes']:,} | {e['latency_s']['median'] * 1e3:.1f} ms | "
                  f"{e['latency_s']['p99'] * 1e3:.1f} ms | {e['gzip_bytes']:,} | "
                  f"{e['gzip_latency_s']['median'] * 1e3:.1f} ms | {(e['loop_lag_s']['max'] or 0) * 1e3:.1f} ms |")
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f} ms"


def _spread_ms(spread: dict[str, float | None]) -> str:
    return f"{_ms(spread['median'])} ({_ms(spread['p99'])})"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _print_tick(report: dict[str, Any], *, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    for r in report["results"]:
        print(f"{r['topology']}: {r['ultraservers']:,} UltraServers, {r['jobs']:,} jobs, windows of "
              f"{r['window_s']:.0f} s, medians (p99)")
        print_table(
            ("window", "ticks", "analysis", "loop lag", "monitor's worst loop lag", "overloaded ticks", "client CPU"),
            ((w["kind"], str(w["ticks"]), _spread_ms(w["analysis_s"]), _spread_ms(w["loop_lag_s"]),
              _spread_ms(w["monitor_loop_lag_worst_s"]), str(w["overloaded_ticks"]),
              _pct(w.get("client_cpu_share_of_one_core"))) for w in r["windows"]))
        ratio = r["comparison"]["on_over_off"]
        print("on/off: " + ", ".join(f"{k} {v:.3f}" for k, v in ratio.items() if v is not None))
        if (f := r.get("follow")) is not None:
            print(f"follower {f['template']!r}: {f['seconds']} s, CPU {f['cpu_share_of_one_core']:.1%} of a core "
                  f"(settled {_pct(f['cpu_share_of_one_core_settled'])}), RSS max "
                  f"{f['rss_bytes']['max'] / 2**20:.0f} MiB, final {f['rss_bytes']['final'] / 2**20:.0f} MiB; "
                  "the tick meanwhile over off: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                             f["monitor_tick_over_off"].items() if v is not None))
    return 0
