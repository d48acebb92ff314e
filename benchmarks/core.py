"""``benchmarks core``: what one tick costs the monitor at each fleet size,
stage by stage, measured in a process that holds the monitor alone.

For each size a fresh process runs the monitor's core (no MQTT) and reads a
simulated fleet's binary messages from a feeder subprocess, one tick at a
time, so its maximum RSS is the monitor's own plus one tick of payloads (as
a running monitor holds).  Stages, per tick after one warm-up tick:

* admission: every message through the monitor's inbox as the MQTT client
  hands it over, on the event loop (``Inbox.put``: its header read and its
  topic's share charged, before any decoding), the window taken, and the
  streams handed back after the analysis (``Confirmed``, built in the
  analysis thread); reported apart, not in the total, which stays the
  analysis thread's work as it always was;
* decode + admit: every message decoded, checked and applied to the state
  (``Ingest.admit``);
* core: the throughput model;
* detection: every detector, the lost-by-cause model, and the copy of the
  unhealthy sets handed to the exporter.

Reported per size: median and p99 of each stage and of their sum, chips per
second per core (chips / median total), and the maximum RSS.  ``--plot``
draws the scaling curve with matplotlib (the optional ``bench`` extra).

``--training-jobs N`` gives the fleet N jobs of the simulator's mix and
measures, in the same ticks, what they add: the per-job model and the
exporter's job families each tick, with and without the jobs, and the whole
scrape's series and bytes with and without them (benchmarks/_jobwork.py).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import numpy as np

from benchmarks._jobwork import JobWork, job_capacity
from benchmarks.feed import START_S, read_tick, request_tick
from rainierd.admission import Admission, Confirmed, SharePolicy
from rainierd.core.analysis import HealthView, MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.fleetloss import price_fleet
from rainierd.core.ingest import Message
from rainierd.core.throughput import compute_throughput
from rainierd.errors import ConfigError
from rainierd.fleet.topology import build_topology, parse_topology
from rainierd.monitor.admission import confirmed_of
from rainierd.monitor.clock import ReceiveClock
from rainierd.monitor.inbox import Inbox
from rainierd.monitor.rejections import RejectionLog
from rainierd.runtime.malloc import keep_freed_memory

__all__ = ["HELP", "SWEEP", "add_arguments", "bench_core", "run"]

HELP: Final = "per-tick cost of the monitor's core, from 64 to 1,000,000 chips"

SWEEP: Final = (
    "ultraserver", "sites=1,ultraservers=16", "sites=1,ultraservers=256", "sites=2,ultraservers=1000",
    "rainier", "rainier-1m",
)
_STAGES: Final = ("decode_admit", "core", "detect")
_LOOP_STAGES: Final = ("admission",)  # on the event loop, not in the total


def _percentiles(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p99": float(np.percentile(values, 99))}


class _Admission:
    """The monitor's inbox with its default shares, on a clock of the fed ticks (one a second from START_S)."""

    def __init__(self, core: MonitorCore) -> None:
        self.core = core
        self.clock_s = 0.0
        self.admission = Admission(SharePolicy(), tick_s=1.0)
        self.confirmed: Confirmed | None = None
        self.inbox = Inbox(max_frame_bytes=core.config.max_frame_bytes, max_backlog_bytes=2**62,
                           listening_s=lambda: START_S + self.clock_s, rejections=RejectionLog(),
                           admission=self.admission, monotonic_s=lambda: self.clock_s,
                           receive_clock=ReceiveClock(wall=lambda: START_S, monotonic=lambda: self.clock_s))

    def window(self, received: list[tuple[str, bytes]], *, tick: int) -> list[Message]:
        """Put one tick's messages through the inbox and return its window; raises if it refused any."""
        self.clock_s = float(tick)
        for topic, payload in received:
            self.inbox.put(topic, payload)
        window = self.inbox.take_window()
        if len(window) != len(received):
            raise RuntimeError(f"the inbox refused {len(received) - len(window)} genuine messages: "
                               f"{self.inbox.receipts}")
        return window

    def learn(self) -> float:
        """Hand the streams as the analysis left them to the admission, as the monitor does after each; return
        how long it took."""
        started = time.perf_counter()
        self.confirmed = confirmed_of(self.core.ingest, self.confirmed)
        self.admission.learn(self.confirmed)
        return time.perf_counter() - started


def measure(topology: str, *, repeat: int, batch_nodes: int, seed: int, training_jobs: int = 0) -> dict[str, Any]:
    """Return one size's per-stage timings (this process holds the monitor alone), and with ``training_jobs``
    what that many jobs add to the tick and the scrape."""
    topo = build_topology(topology)
    core = MonitorCore(topo, MonitorConfig(max_frame_bytes=64 * 2**20))
    work = JobWork.of(core, training_jobs, start_s=START_S, seed=seed) if training_jobs else None
    feeder = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.feed", topology, str(repeat + 1), str(batch_nodes), str(seed)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert feeder.stdout is not None
    assert feeder.stdin is not None
    stages: dict[str, list[float]] = {name: [] for name in (*_LOOP_STAGES, *_STAGES, "total")}
    messages = payload_bytes = 0
    tick = 0
    admission = _Admission(core)
    while True:  # the feeder idles while a tick is measured
        request_tick(feeder.stdin)
        if (received := read_tick(feeder.stdout)) is None:
            break
        now_s = START_S + tick
        queued = time.perf_counter()
        window = admission.window(received, tick=tick)
        started = time.perf_counter()
        flush = core.ingest.admit(window)
        admitted = time.perf_counter()
        core.state.now_s = now_s
        throughput = compute_throughput(core.state, peak_flops_per_chip=core.peak_flops_per_chip,
                                        stale_after_s=core.stale_after_s)
        modelled = time.perf_counter()
        core.detector.update(core.state.latest_tick)
        if work is None:  # with training jobs, the job work prices the fleet (as the monitor does, once a tick)
            price_fleet(throughput, core.detector, core.jobs, params=core.model, shares=core.node_shares)
        HealthView.of(core.detector)  # what the exporter is handed
        detected = time.perf_counter()
        if work is not None:
            work.tick(throughput, keep=tick > 0)
        core.ingest.record(flush)
        learned_s = admission.learn()
        if tick > 0:  # the first tick pays first-touch page faults
            stages["admission"].append(started - queued + learned_s)
            for name, seconds in zip(_STAGES, (admitted - started, modelled - admitted, detected - modelled),
                                     strict=True):
                stages[name].append(seconds)
            stages["total"].append(detected - started)
        messages, payload_bytes = len(window), sum(len(m.payload) for m in window)
        del window, received  # one tick of payloads at a time, as a running monitor holds (not two while reading)
        tick += 1
        if tick == repeat + 1:
            break
    feeder.stdin.close()
    assert feeder.stderr is not None
    sim = json.loads(feeder.stderr.read().splitlines()[-1])
    feeder.wait()
    if core.stats.rejected or core.stats.frames_applied != (tick * (topo.n_nodes + topo.n_sites)):
        raise RuntimeError(f"bench feed not applied cleanly: {core.stats}")
    total = _percentiles(stages["total"])
    return {
        "topology": topology,
        "chips": topo.n_chips,
        "nodes": topo.n_nodes,
        "links": topo.n_links,
        "efa_ports": topo.n_efa,
        "batch_nodes": batch_nodes,
        "messages_per_tick": messages,
        "bytes_per_tick": payload_bytes,
        "ticks_measured": len(stages["total"]),
        "per_tick_s": {name: _percentiles(values) for name, values in stages.items()},
        "chips_per_s_per_core": topo.n_chips / total["median"],
        # The simulator's side, measured in the feeder process: one step of the
        # fleet model, and cutting and encoding the tick's messages.
        "simulator_s": {name: _percentiles(values[1:]) for name, values in sim.items()},
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        **({"jobs": work.report(stages["total"])} if work is not None else {}),
    }


def bench_core(
    topologies: list[str], *, repeat: int, batch_nodes: int, seed: int, training_jobs: int = 0,
) -> dict[str, Any]:
    """Return the report: one fresh monitor process per size."""
    results = []
    for topology in topologies:
        print(f"bench core: {topology} ...", file=sys.stderr, flush=True)
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.core", topology, str(repeat), str(batch_nodes), str(seed),
             str(training_jobs)],
            check=True, capture_output=True,
        )
        results.append(json.loads(out.stdout))
    return {"benchmark": "core", "repeat": repeat, "batch_nodes": batch_nodes,
            **({"training_jobs": training_jobs} if training_jobs else {}), "results": results}


def unfit(topologies: list[str], training_jobs: int) -> list[str]:
    """Return the sizes too small for ``training_jobs`` jobs of at least one UltraServer (``job_capacity``)."""
    out = []
    for topology in topologies:
        sites, per_site = parse_topology(topology)
        if training_jobs > job_capacity(sites * per_site):
            out.append(f"{topology} (at most {job_capacity(sites * per_site)})")
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    """Draw per-tick time and chips/s against fleet size (needs matplotlib: the bench extra)."""
    import matplotlib as mpl  # noqa: PLC0415 - optional dependency, only for this plot

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = report["results"]
    chips = [r["chips"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for stage in (*_STAGES, "total"):
        left.plot(chips, [r["per_tick_s"][stage]["median"] * 1e3 for r in rows], marker="o", label=stage)
    left.axhline(300, color="grey", linestyle="--", linewidth=0.8, label="300 ms target at 1M")
    left.set(xscale="log", yscale="log", xlabel="chips", ylabel="ms per tick (median)",
             title="monitor work per tick, one core")
    left.legend(fontsize=8)
    right.plot(chips, [r["chips_per_s_per_core"] for r in rows], marker="o")
    right.set(xscale="log", yscale="log", xlabel="chips", ylabel="chip-samples / s / core",
              title="monitor throughput per core")
    right2 = right.twinx()
    right2.plot(chips, [r["max_rss_bytes"] / 2**20 for r in rows], marker="s", color="tab:red")
    right2.set_ylabel("max RSS, MiB (red)")
    fig.suptitle(f"benchmarks core: batch frames of {report['batch_nodes']} nodes, "
                 f"{report['repeat']} ticks per size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", nargs="+", default=list(SWEEP),
                        help="presets or sites=S,ultraservers=U (default: a sweep from 64 to 1,000,000 chips)")
    parser.add_argument("--repeat", type=int, default=10, help="ticks measured per size (after one warm-up)")
    parser.add_argument("--batch-nodes", type=int, default=128, help="nodes per batch frame (0: one frame per node)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--training-jobs", type=int, default=0, metavar="N",
                        help="give the fleet N training jobs of the simulator's mix and report what they add to the "
                             "tick and the scrape (default 0: none)")
    parser.add_argument("--plot", help="also draw the scaling curve to this PNG (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    try:
        too_small = unfit(list(args.topology), max(0, args.training_jobs))
    except ConfigError as exc:
        print(f"bench core: {exc}", file=sys.stderr)
        return 2
    if too_small:
        print(f"bench core: {args.training_jobs} training jobs do not fit in {', '.join(too_small)}",
              file=sys.stderr)
        return 2
    report = bench_core(list(args.topology), repeat=max(2, args.repeat), batch_nodes=args.batch_nodes, seed=args.seed,
                        training_jobs=max(0, args.training_jobs))
    if args.plot:
        try:
            plot(report, Path(args.plot))
        except ImportError:
            print("bench core: --plot needs matplotlib (pip install 'rainierd[bench]')", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"bench core: batch frames of {report['batch_nodes']} nodes, medians (p99) of {report['repeat']} ticks")
    print("| topology | chips | admission (loop) | decode + admit | core | detection | total | chips/s/core "
          "| max RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in report["results"]:
        t = r["per_tick_s"]
        cells = " | ".join(f"{t[s]['median'] * 1e3:.1f} ({t[s]['p99'] * 1e3:.1f}) ms"
                           for s in (*_LOOP_STAGES, *_STAGES, "total"))
        print(f"| {r['topology']} | {r['chips']:,} | {cells} | {r['chips_per_s_per_core']:.3g} | "
              f"{r['max_rss_bytes'] / 2**20:.0f} MiB |")
    if report.get("training_jobs"):
        _print_jobs(report["results"])
    return 0


def _print_jobs(results: list[dict[str, Any]]) -> None:
    print("\njob work per tick, medians (p99); the share is of the tick with jobs, tick by tick")
    print("| topology | jobs | job_loss | job families render | job work | share of tick | tick without jobs | "
          "tick with jobs | series added | scrape bytes without / with |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        j = r["jobs"]
        t, s, sc = j["per_tick_s"], j["share_of_tick"], j["scrape"]
        ms = " | ".join(f"{t[k]['median'] * 1e3:.2f} ({t[k]['p99'] * 1e3:.2f}) ms"
                        for k in ("job_loss", "render", "work"))
        print(f"| {r['topology']} | {j['mix']['jobs']:,} | {ms} | {s['median']:.1%} ({s['p99']:.1%}) | "
              f"{t['tick_without_jobs']['median'] * 1e3:.1f} ms | {t['tick_with_jobs']['median'] * 1e3:.1f} ms | "
              f"{sc['series_added']:,} | {sc['without_jobs']['bytes']:,} / {sc['with_jobs']['bytes']:,} |")


if __name__ == "__main__":
    keep_freed_memory()  # as the monitor daemon does
    name, count, batch, seed_arg, jobs_arg = sys.argv[1:6]
    print(json.dumps(measure(name, repeat=int(count), batch_nodes=int(batch), seed=int(seed_arg),
                             training_jobs=int(jobs_arg))))
