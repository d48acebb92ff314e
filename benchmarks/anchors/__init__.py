"""``python -m benchmarks anchors``: rainierd beside the anchors' detectors, re-implemented from their public
descriptions (issue 38 item 2), on the same frames: the detection benchmark's fault runs and fault-free runs and
the control campaign's runs, each anchor reading the monitor core's admitted telemetry after every tick, and
every detector's raises graded by the detection benchmark's own code.  The report: per profile and fault row
each detector's precision, recall, F1 and median time to detect; per detector its false alarms a day per 10k
chips with the 95 % bound, in the detection control and in the campaign.

Why a benchmark of its own rather than an option of ``detect``: it runs both ``detect``'s runs and
``control``'s, and its cost (four more detectors a tick) must not enter ``detect``'s per-tick cost figures.

Its rooms: ``thresholds`` (EKS node monitoring agent and NVSentinel rules), ``minder`` (Minder, NSDI '25),
``cusum`` (a change point on each chip's throughput), ``zscore`` (each entity against its own history),
``_common`` (what they share), ``running`` (the runs and the grading), ``report`` (the tables).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Final

from benchmarks._table import emit
from benchmarks.anchors.report import print_table
from benchmarks.anchors.running import ANCHORS, RAINIERD, bench_anchors, calibrate
from benchmarks.detect.fleets import available_profiles
from rainierd.sim.faults import SEVERITIES, FaultKind

__all__ = ["ANCHORS", "HELP", "RAINIERD", "add_arguments", "bench_anchors", "run"]

HELP: Final = ("rainierd beside the anchors' detectors (EKS/NVSentinel thresholds, Minder, CUSUM, z-score) "
        "on the same frames")
PROFILES: Final = ("training", "realistic")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--profile", nargs="+", metavar="NAME",
                        help=f"simulator profiles (default: {' '.join(PROFILES)})")
    parser.add_argument("--seeds", type=int, default=2,
                        help="seeds of the detection benchmark's fault runs (default 2)")
    parser.add_argument("--ultraservers", type=int, default=16, help="UltraServers in each fault run (default 16)")
    parser.add_argument("--kinds", nargs="+", metavar="KIND", help="only these fault kinds (default: all)")
    parser.add_argument("--control-seeds", type=int, default=1,
                        help="the detection benchmark's fault-free runs (job mix, diurnal swing) a profile (default 1)")
    parser.add_argument("--control-ultraservers", type=int, default=16, help="UltraServers in each (default 16)")
    parser.add_argument("--control-seconds", type=float, default=600.0, help="length of each (default 600)")
    parser.add_argument("--campaign-seeds", type=int, default=1,
                        help="control-campaign runs a profile and tick length (default 1; 0: none)")
    parser.add_argument("--campaign-ultraservers", type=int, default=16,
                        help="UltraServers a campaign run (default 16)")
    parser.add_argument("--campaign-seconds", type=float, default=1_800.0,
                        help="simulated seconds a campaign run, with its restart and outage (default 1800)")
    parser.add_argument("--campaign-tick", nargs="+", type=float, default=[1.0, 5.0], metavar="SECONDS",
                        help="the campaign's tick lengths (default 1 5)")
    parser.add_argument("--calibrate", action="store_true",
                        help="only measure the healthy rates the threshold anchor's velocity thresholds are twice of "
                             "(one fault-free run a profile, seed 900000) and print them")
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per core)")
    parser.add_argument("--output", help="also write the JSON report to this file")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")


def run(args: argparse.Namespace) -> int:
    """Run rainierd and the anchors and print JSON or the tables; return 2 for bad usage."""
    available = available_profiles()
    profiles = list(dict.fromkeys(args.profile or [p for p in PROFILES if p in available]))
    if unknown := [p for p in profiles if p not in available]:
        print(f"benchmarks anchors: unknown profile {', '.join(unknown)} (this simulator has "
              f"{', '.join(available)})", file=sys.stderr)
        return 2
    kinds = None
    if args.kinds:
        names = {str(k) for k in SEVERITIES if k is not FaultKind.DIURNAL}
        if unknown := [k for k in args.kinds if k not in names]:
            print(f"benchmarks anchors: unknown fault kind {', '.join(unknown)}", file=sys.stderr)
            return 2
        kinds = {FaultKind(k) for k in args.kinds}
    if args.calibrate:
        print(json.dumps({p: calibrate(p) for p in profiles}, indent=2))
        return 0
    if min(args.seeds, args.ultraservers, args.control_ultraservers, args.campaign_ultraservers) < 1 or min(
            args.control_seeds, args.campaign_seeds) < 0 or not min(args.control_seconds, args.campaign_seconds) > 0:
        print("benchmarks anchors: sizes must be positive (seeds of controls and campaign may be 0)", file=sys.stderr)
        return 2
    report = bench_anchors(
        profiles=profiles, seeds=args.seeds, ultraservers=args.ultraservers, control_seeds=args.control_seeds,
        control_ultraservers=args.control_ultraservers, control_seconds=args.control_seconds,
        campaign_seeds=args.campaign_seeds, campaign_ultraservers=args.campaign_ultraservers,
        campaign_seconds=args.campaign_seconds, campaign_ticks_s=[float(t) for t in args.campaign_tick],
        kinds=kinds, jobs=args.jobs or os.cpu_count() or 1, noise=args.noise,
    )
    return emit(report, print_table, output=args.output, as_json=args.json)
