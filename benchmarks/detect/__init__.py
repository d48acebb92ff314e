"""``python -m benchmarks detect``: detection quality graded against injected
ground truth, in process (no MQTT), over every fault kind x severity x
placement x seed, plus fault-free control runs with the diurnal swing, for
each simulator profile and tick length asked for.

Every duration the benchmark sets (warm-up, fault, tail, grace, control) is in
seconds and becomes ticks per tick length, rounded up, so a run at a 0.5 s
tick covers the same simulated time as one at 5 s.  Fault placements and
start times are drawn from the same seeds at every tick length and profile,
so their figures compare pair by pair.

Its rooms: ``placing`` (durations, cells, where and when each fault goes),
``running`` (the runs, in a pool, with progress on stderr), ``grading``
(each run against its faults), ``reporting`` (the tables); ``phases``
(the job-mix control's false alarms by job phase), ``jobrows`` and
``jobgrading`` (faults inside jobs, each job's loss and culprit against
truth).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Final

from benchmarks._table import emit
from benchmarks.detect.grading import RunResult, grade
from benchmarks.detect.placing import Cell, cells, fault_runs, ticks_of
from benchmarks.detect.reporting import print_table
from benchmarks.detect.running import (
    DEFAULT_PROFILES,
    FULL,
    HEADLINE_TICK_S,
    QUICK,
    Scale,
    available_profiles,
    bench_detect,
    run_fleet,
)
from rainierd.sim.faults import SEVERITIES, FaultKind

__all__ = [
    "FULL", "HELP", "QUICK", "Cell", "RunResult", "Scale", "add_arguments", "available_profiles", "bench_detect",
    "cells", "fault_runs", "grade", "print_table", "run", "run_fleet", "ticks_of",
]

HELP: Final = "detection quality against injected ground truth"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--seeds", type=int, help=f"seeds per cell (default {FULL.seeds}; --quick {QUICK.seeds})")
    parser.add_argument("--ultraservers", type=int,
                        help=f"UltraServers in each fault run (default {FULL.ultraservers}; "
                             f"--quick {QUICK.ultraservers})")
    parser.add_argument("--control-seeds", type=int, help=f"fault-free runs (default {FULL.control_seeds}; "
                                                          f"--quick {QUICK.control_seeds})")
    parser.add_argument("--control-ultraservers", type=int,
                        help=f"UltraServers in each fault-free run (default {FULL.control_ultraservers}; "
                             f"--quick {QUICK.control_ultraservers})")
    # --control-ticks is the old name, from when every tick was 1 s.
    parser.add_argument("--control-seconds", "--control-ticks", dest="control_seconds", type=float,
                        help=f"length of each fault-free run (default {FULL.control_seconds:g} s; "
                             f"--quick {QUICK.control_seconds:g} s)")
    parser.add_argument("--control-chip-days", type=float,
                        help=f"the headline profile's control in chip-days, half a big fleet for "
                             f"--control-seconds and half 16 UltraServers for 6 h (default "
                             f"{FULL.control_chip_days:g}; --quick: none, --control-seeds runs as for the other "
                             "profiles; 0: none)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: one seed, small fleets, short controls (explicit sizes still win)")
    parser.add_argument("--profile", nargs="+", metavar="NAME",
                        help="simulator profiles, the first heading the report (default: training realistic ideal)")
    parser.add_argument("--tick", nargs="+", type=float, metavar="SECONDS",
                        help="tick lengths in seconds, e.g. 0.5 1 5 (default 1); other ticks compare against 1 s")
    parser.add_argument("--kinds", nargs="+", metavar="KIND", help="grade only these fault kinds (default: all)")
    parser.add_argument("--job-mix", action="store_true",
                        help='control runs run the simulator\'s job mix (FleetParams jobs="mix"), each false alarm '
                             "attributed to its job's phase (issue 21 item 4); fault runs unchanged")
    parser.add_argument("--job-rows", action="store_true",
                        help="also run job rows: faults inside fixed jobs of 2-3 UltraServers, "
                             "each job's lost FP8 by cause against the simulator's truth and its top culprit "
                             "against the injected fault, per seed (issue 21)")
    parser.add_argument("--job-row-seeds", type=int,
                        help=f"seeds of job-row runs (default {FULL.job_row_seeds}; --quick {QUICK.job_row_seeds})")
    parser.add_argument("--job-row-checkpoints", action="store_true",
                        help="every job of the job rows checkpoints for 30 s every 90 s (one or two checkpoints "
                             "begin during a fault)")
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per core)")
    parser.add_argument("--output", help="also write the JSON report to this file")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")


def _option(value: Any, quick: bool, name: str) -> Any:
    return value if value is not None else getattr(QUICK if quick else FULL, name)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or the table; return 2 for an unknown profile or kind."""
    available = available_profiles()
    if args.profile:
        profiles = list(dict.fromkeys(args.profile))
    else:
        profiles = [p for p in DEFAULT_PROFILES if p in available]
        if missing := [p for p in DEFAULT_PROFILES if p not in available]:
            print(f"benchmarks detect: this simulator has no profile {', '.join(missing)}; running "
                  f"{', '.join(profiles)}", file=sys.stderr)
    if unknown := [p for p in profiles if p not in available]:
        print(f"benchmarks detect: unknown profile {', '.join(unknown)} (this simulator has {', '.join(available)})",
              file=sys.stderr)
        return 2
    ticks_s = list(dict.fromkeys(float(t) for t in (args.tick or [HEADLINE_TICK_S])))
    if any(not t > 0 for t in ticks_s):
        print(f"benchmarks detect: tick lengths must be positive, not {ticks_s}", file=sys.stderr)
        return 2
    kinds = None
    if args.kinds:
        names = {str(k) for k in SEVERITIES if k is not FaultKind.DIURNAL}
        if unknown := [k for k in args.kinds if k not in names]:
            print(f"benchmarks detect: unknown fault kind {', '.join(unknown)} (kinds: {', '.join(sorted(names))})",
                  file=sys.stderr)
            return 2
        kinds = {FaultKind(k) for k in args.kinds}
    report = bench_detect(
        seeds=_option(args.seeds, args.quick, "seeds"),
        ultraservers=_option(args.ultraservers, args.quick, "ultraservers"),
        control_seeds=_option(args.control_seeds, args.quick, "control_seeds"),
        control_ultraservers=_option(args.control_ultraservers, args.quick, "control_ultraservers"),
        control_seconds=_option(args.control_seconds, args.quick, "control_seconds"),
        jobs=args.jobs or os.cpu_count() or 1, noise=args.noise, profiles=profiles, ticks_s=ticks_s,
        kinds=kinds, quick=args.quick, job_mix=args.job_mix, job_rows=args.job_rows,
        job_row_seeds=_option(args.job_row_seeds, args.quick, "job_row_seeds"),
        job_row_checkpoints=args.job_row_checkpoints,
        control_chip_days=_option(args.control_chip_days, args.quick, "control_chip_days") or None,
    )
    return emit(report, print_table, output=args.output, as_json=args.json)
