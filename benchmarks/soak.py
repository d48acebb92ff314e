"""``benchmarks soak``: one fleet size for a long while, as a user runs it.

A real Mosquitto, ``rainierd monitor`` and ``rainierd simulate`` as separate
processes (the ingest benchmark's fleet), at one size and tick.  After the
warm-up, the monitor's and simulator's RSS are read from /proc and the
monitor's /metrics are scraped every ``sample_s``; the report gives RSS at the
end of the warm-up and at the end (and the growth between them), the
percentiles of the sample lag and of the event-loop lag over the window
(from the difference of two scrapes of their histograms), the worst
event-loop lag seen, and, once the simulator has finished and the monitor
drained, every frame accounted for exactly as ``bench ingest`` does.

It also lists every health event the monitor logged, by entity, new state
and reasons, while the simulator published (its fleet has no faults, so
each is a false alarm) and after it stopped (the fleet falling silent).

A soak passes with RSS growth of at most 2 % after the warm-up, no frame
lost, every frame accounted for, an event-loop lag p99 of at most 10 ms,
and no health event while the simulator published.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from benchmarks._fleet import Fleet, fleet, monitor_values
from benchmarks._progress import Progress
from benchmarks.ingest import account_frames, settle
from harness.procs import cpu_s, max_rss_bytes, rss_bytes, runqueue_wait_s
from harness.scrape import histogram_delta, histogram_quantile
from rainierd.fleet.topology import build_topology

__all__ = ["HELP", "add_arguments", "bench_soak", "run"]

HELP: Final = ("simulate -> real Mosquitto -> monitor at one size for a long while: RSS growth, frames lost, "
        "sample and event-loop lag")

MAX_RSS_GROWTH: Final = 0.02
MAX_LOOP_LAG_P99_S: Final = 0.010
_SAMPLE_LAG: Final = "rainier_monitor_sample_lag_seconds"
_LOOP_LAG: Final = "rainier_event_loop_probe_lag_seconds"
_MIB: Final = 2**20


def _rss(pid: int) -> int | None:
    try:
        return rss_bytes(pid)
    except OSError:  # it has exited
        return None


def _percentiles(buckets: list[tuple[float, float]]) -> dict[str, float | None]:
    return {"p50": histogram_quantile(0.5, buckets), "p99": histogram_quantile(0.99, buckets)}


def _events(monitor_log: Path, *, until: str | None) -> dict[str, dict[str, int]]:
    """Return the health events of the monitor's JSON log (each a change to an unhealthy state), as counts
    of "entity state (reasons)", split at the ISO time ``until`` (the simulator's last line; None: all
    while publishing)."""
    stop = datetime.fromisoformat(until) if until else None
    split: dict[str, Counter[str]] = {"while_publishing": Counter(), "after_the_simulator_stopped": Counter()}
    for line in monitor_log.read_text(errors="replace").splitlines():
        if not line.startswith("{") or '"health degraded"' not in line:
            continue
        event = json.loads(line)
        late = stop is not None and datetime.fromisoformat(event["timestamp"]) > stop
        name = f"{event['entity']} {event['after']} ({', '.join(event['reasons'])})"
        split["after_the_simulator_stopped" if late else "while_publishing"][name] += 1
    return {when: dict(counts.most_common()) for when, counts in split.items()}


def _slope_per_hour(points: list[tuple[float, int]]) -> float | None:
    """Return the least-squares slope of (seconds, bytes) points, in MiB an hour."""
    if len(points) < 2:
        return None
    slope = statistics.linear_regression([t for t, _ in points], [b / _MIB for _, b in points]).slope
    return slope * 3600


def _sample(running: Fleet, *, until: float, sample_s: float, started: float, phase: str, total_s: float,
            progress: Progress) -> list[dict[str, Any]]:
    """Read RSS and scrape the monitor every ``sample_s`` until the monotonic time ``until``, each read a step
    of ``progress`` (``total_s``: the seconds of warm-up and window together)."""
    samples: list[dict[str, Any]] = []
    while (now := time.monotonic()) < until:
        time.sleep(min(sample_s, until - now))
        values = monitor_values(running.metrics_port)
        at_s = round(time.monotonic() - started, 1)
        monitor_rss = _rss(running.monitor.pid)
        samples.append({
            "t_s": at_s,
            "monitor_rss_bytes": monitor_rss, "simulate_rss_bytes": _rss(running.simulate.pid),
            "loop_lag_worst_s": values.get("rainier_event_loop_lag_seconds"),
            "analysis_s": values.get("rainier_monitor_analysis_duration_seconds"),
            "load_1m": os.getloadavg()[0],
        })
        progress.step(f"{phase}, {at_s:.0f} of {total_s:.0f} s: monitor RSS {(monitor_rss or 0) / _MIB:,.0f} MiB",
                      left_fraction=max(0.0, 1 - at_s / total_s))
    return samples


def bench_soak(
    topology: str, *, tick_s: float, window_s: float, warmup_s: float, sample_s: float, batch_nodes: int,
) -> dict[str, Any]:
    """Run the fleet for ``warmup_s`` + ``window_s``; return the report (benchmarks/README.md)."""
    chips = build_topology(topology).n_chips
    ticks = math.ceil((warmup_s + window_s) / tick_s) + 2
    with (tempfile.TemporaryDirectory(prefix="rainierd-bench-soak-") as tmp,
          fleet(topology, tick_s=tick_s, ticks=ticks, batch_nodes=batch_nodes, workdir=Path(tmp)) as running):
        started = time.monotonic()
        procs = {"monitor": running.monitor.pid, "simulate": running.simulate.pid,
                 "mosquitto": running.broker.pid}
        total_s = warmup_s + window_s
        progress = Progress(math.ceil(warmup_s / sample_s) + math.ceil(window_s / sample_s), prefix="bench soak: ")
        _sample(running, until=started + warmup_s, sample_s=sample_s, started=started, phase="warm-up",
                total_s=total_s, progress=progress)
        before, t0 = monitor_values(running.metrics_port), time.monotonic()
        cpu0 = {name: cpu_s(pid) for name, pid in procs.items()}
        waited0 = runqueue_wait_s(running.monitor.pid)
        rss0 = {name: _rss(pid) for name, pid in procs.items()}
        progress.note(f"warm-up over: monitor RSS {(rss0['monitor'] or 0) / _MIB:,.0f} MiB; measuring {window_s:.0f} s")
        samples = _sample(running, until=t0 + window_s, sample_s=sample_s, started=started, phase="measuring",
                          total_s=total_s, progress=progress)
        after, t1 = monitor_values(running.metrics_port), time.monotonic()
        rss1 = {name: _rss(pid) for name, pid in procs.items()}
        waited = (runqueue_wait_s(running.monitor.pid) - waited0) / (t1 - t0)
        usage = {name: {"cpu_share_of_one_core": (cpu_s(pid) - cpu0[name]) / (t1 - t0),
                        "max_rss_bytes": max_rss_bytes(pid)} for name, pid in procs.items()}
        progress.note("window over; waiting for the simulator to finish and the monitor to drain")
        _at_exit, end, finished = settle(running, tick_s=tick_s, ticks=ticks)
        events = _events(running.monitor_log, until=finished.get("timestamp"))
    frames = account_frames(end, finished)
    loop_lag = histogram_delta(after, before, _LOOP_LAG)
    probes = loop_lag[-1][1] if loop_lag else 0.0
    over_budget = probes - next((count for bound, count in loop_lag if bound >= MAX_LOOP_LAG_P99_S), probes)
    worst = [s["loop_lag_worst_s"] for s in samples if s["loop_lag_worst_s"] is not None]
    analysis = [s["analysis_s"] for s in samples if s["analysis_s"] is not None]
    rss: dict[str, Any] = {}
    for name in ("monitor", "simulate"):
        start, stop = rss0[name], rss1[name]
        points = [(s["t_s"], s[f"{name}_rss_bytes"]) for s in samples if s[f"{name}_rss_bytes"] is not None]
        rss[name] = {
            "after_warmup_bytes": start, "end_bytes": stop,
            "growth_ratio": (stop - start) / start if start and stop else None,
            "slope_mib_per_hour": _slope_per_hour(points),
        }
    report: dict[str, Any] = {
        "benchmark": "soak", "topology": topology, "chips": chips, "tick_s": tick_s, "batch_nodes": batch_nodes,
        "warmup_s": warmup_s, "window_s": round(t1 - t0, 1), "sample_s": sample_s,
        "rss": rss,
        "frames": frames | {"lost_in_window": int(after.get("rainier_ingest_frames_lost_total", 0)
                                                  - before.get("rainier_ingest_frames_lost_total", 0))},
        "sample_lag_s": _percentiles(histogram_delta(after, before, _SAMPLE_LAG)),
        "event_loop_lag_s": _percentiles(loop_lag) | {
            "max": max(worst, default=None), "probes": int(probes), "probes_over_10ms": int(over_budget),
        },
        "analysis_s": {"median": statistics.median(analysis) if analysis else None,
                       "max": max(analysis, default=None)},
        # What the machine did to the loop: the share of the window the loop
        # thread was runnable but waiting for a CPU, and the machine's load.
        "machine": {"cpus": os.cpu_count(), "monitor_loop_thread_runqueue_wait_share": waited,
                    "load_1m_median": statistics.median(s["load_1m"] for s in samples) if samples else None},
        "overload_episodes": int(end.get("rainier_monitor_overload_episodes_total", 0)),
        "health_events": events,
        "simulator_ticks_late": int(finished.get("ticks_late", -1)),
        "processes": usage,
        "rss_series": [[s["t_s"], s["monitor_rss_bytes"], s["simulate_rss_bytes"]] for s in samples],
    }
    growth, p99 = rss["monitor"]["growth_ratio"], report["event_loop_lag_s"]["p99"]
    report["passed"] = {
        "rss_growth": growth is not None and growth <= MAX_RSS_GROWTH,
        "no_loss": frames["counted_lost"] == 0 and frames["dropped_by_simulator"] == 0 and frames["accounted"],
        "event_loop_lag_p99": p99 is not None and p99 <= MAX_LOOP_LAG_P99_S,
        "no_health_events": not events["while_publishing"],
    }
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", default="rainier", help="a preset or sites=S,ultraservers=U (default rainier)")
    parser.add_argument("--tick", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=600.0, help="measured window, after the warm-up")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before the measured window")
    parser.add_argument("--sample-interval", type=float, default=5.0, help="seconds between RSS reads and scrapes")
    parser.add_argument("--batch-nodes", type=int, default=128)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the soak and print JSON or a table."""
    print(f"bench soak: {args.topology} at a {args.tick} s tick: {args.warmup:.0f} s warm-up, "
          f"{args.seconds:.0f} s measured", file=sys.stderr, flush=True)
    r = bench_soak(args.topology, tick_s=args.tick, window_s=args.seconds, warmup_s=args.warmup,
                   sample_s=args.sample_interval, batch_nodes=args.batch_nodes)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0

    def mib(value: int | None) -> str:
        return "-" if value is None else f"{value / _MIB:,.0f}"

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.1f}"

    mon, sim, frames = r["rss"]["monitor"], r["rss"]["simulate"], r["frames"]
    loop, lag = r["event_loop_lag_s"], r["sample_lag_s"]
    growth = "-" if mon["growth_ratio"] is None else f"{100 * mon['growth_ratio']:+.2f} %"
    print(f"bench soak: {r['topology']} ({r['chips']:,} chips), {r['tick_s']} s tick, "
          f"{r['window_s']:.0f} s after {r['warmup_s']:.0f} s of warm-up")
    print("| monitor RSS warm-up → end | growth | simulator RSS warm-up → end | frames published / applied / lost "
          "| sample lag p50 / p99 | loop lag p50 / p99 / max | probes > 10 ms |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {mib(mon['after_warmup_bytes'])} → {mib(mon['end_bytes'])} MiB | {growth} | "
          f"{mib(sim['after_warmup_bytes'])} → {mib(sim['end_bytes'])} MiB | "
          f"{frames['published']:,} / {frames['applied']:,} / {frames['counted_lost']:,} | "
          f"{lag['p50']:.2f} / {lag['p99']:.2f} s | "
          f"{ms(loop['p50'])} / {ms(loop['p99'])} / {ms(loop['max'])} ms | "
          f"{loop['probes_over_10ms']} of {loop['probes']} |")
    for when, counts in r["health_events"].items():
        print(f"health events {when.replace('_', ' ')}: " + (", ".join(f"{n} {name}" for name, n in counts.items())
                                                            or "none"))
    print("passed: " + ", ".join(f"{name} {ok}" for name, ok in r["passed"].items()))
    return 0
