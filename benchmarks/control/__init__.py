"""``python -m benchmarks control``: the control campaign (issue 38 item 1).
Fault-free fleets running the job mix (checkpoints, evaluations, restarts,
job ends, idle UltraServers), in each simulator profile and tick length
asked for, each run with a monitor restart (both checkpoints saved and taken
back) and a broker outage inside it, simulated and watched by the monitor
core in process, faster than real time.  Every raise is a false alarm: the
report gives them per entity class and cause, the exposure in chip-days
(present chips x simulated days), the rate a day per 10,000 chips with its
exact 95 % upper bound, every raise with its seed, tick, canonical id and the
evidence that fired, and what the campaign cost a simulated chip-day.

Its rooms: ``running`` (one run), ``evidence`` (the figures behind a raise),
``report`` (the sums and the tables).  The fleets, profiles, frames and the
pool are the detection benchmark's (``detect/fleets.py``,
``detect/running.py``), its Poisson bound ``detect/alarms.py``'s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Final

from benchmarks._progress import Progress
from benchmarks._table import emit
from benchmarks.control.report import print_table, summarise
from benchmarks.control.running import (
    OUTAGE_AT,
    OUTAGE_S,
    RECONNECT_GRACE_S,
    RESTART_AT,
    RESTART_DOWN_S,
    ControlRun,
    RunResult,
    campaign_mix,
    run_control,
)
from benchmarks.detect.fleets import available_profiles, present_chips
from benchmarks.detect.running import run_pool

__all__ = ["HELP", "ControlRun", "RunResult", "add_arguments", "campaign", "campaign_mix", "run", "run_control"]

HELP: Final = "false alarms of fault-free fleets with the job mix, restarts and an outage (the control campaign)"
PROFILES: Final = ("training", "realistic")
TICKS_S: Final = (1.0, 5.0)
ULTRASERVERS: Final = 16
SECONDS: Final = 5_400.0  # 90 simulated minutes: rainier's 7,800 UltraServers over it are 31,200 chip-days
FIRST_SEED: Final = 700_000  # the same seeds in every profile and tick, so their sections compare run by run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--profile", nargs="+", metavar="NAME",
                        help=f"simulator profiles (default: {' '.join(PROFILES)})")
    parser.add_argument("--tick", nargs="+", type=float, metavar="SECONDS",
                        help=f"tick lengths in seconds (default: {' '.join(f'{t:g}' for t in TICKS_S)})")
    parser.add_argument("--ultraservers", type=int, default=ULTRASERVERS,
                        help=f"UltraServers a fleet, in the profile's shape (default {ULTRASERVERS}; "
                             "the demo fleet is 2, rainier 7800)")
    parser.add_argument("--seconds", type=float, default=SECONDS,
                        help=f"simulated seconds a run (default {SECONDS:g})")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--seeds", type=int, default=1, help="runs a profile and tick length (default 1)")
    size.add_argument("--chip-days", type=float,
                      help="run enough seeds that the whole campaign holds at least this exposure, shared evenly "
                           "between the profiles and tick lengths")
    parser.add_argument("--restart-down", type=float, default=RESTART_DOWN_S,
                        help=f"seconds the restarting monitor misses (default {RESTART_DOWN_S:g}); it restarts "
                             f"{RESTART_AT:g} of the way into each run")
    parser.add_argument("--outage", type=float, default=OUTAGE_S,
                        help=f"seconds of the broker outage (default {OUTAGE_S:g}), {OUTAGE_AT:g} of the way into "
                             "each run")
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--output", help="also write the JSON report to this file")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")


def plan(*, profiles: list[str], ticks_s: list[float], ultraservers: int, seconds: float, seeds: int | None,
         chip_days: float | None, restart_down_s: float, outage_s: float, noise: float) -> list[ControlRun]:
    """Return the campaign's runs: ``seeds`` a profile and tick length, or as many as ``chip_days`` needs."""
    runs = []
    for profile in profiles:
        if chip_days is not None:
            share = chip_days / (len(profiles) * len(ticks_s))
            seeds = max(1, math.ceil(share / (present_chips(profile, ultraservers) * seconds / 86_400.0)))
        for tick_s in ticks_s:
            runs += [ControlRun(profile=profile, tick_s=tick_s, ultraservers=ultraservers, seed=FIRST_SEED + s,
                                seconds=seconds, noise=noise, restart_down_s=restart_down_s, outage_s=outage_s)
                     for s in range(seeds or 1)]
    return runs


def campaign(runs: list[ControlRun], *, jobs: int = 1, progress: Progress | None = None) -> dict[str, object]:
    """Run ``runs`` (in ``jobs`` worker processes) and return the report (``report.summarise``)."""
    started = time.perf_counter()
    results = run_pool(run_control, runs, jobs, Progress(len(runs), prefix="bench control: ")
                       if progress is None else progress)
    config = {
        "profiles": list(dict.fromkeys(r.profile for r in runs)),
        "ticks_s": list(dict.fromkeys(r.tick_s for r in runs)),
        "ultraservers": sorted({r.ultraservers for r in runs}), "seconds": sorted({r.seconds for r in runs}),
        "seeds": sorted({r.seed for r in runs}), "noise": sorted({r.noise for r in runs}),
        "restart_at": RESTART_AT, "restart_down_s": sorted({r.restart_down_s for r in runs}),
        "outage_at": OUTAGE_AT, "outage_s": sorted({r.outage_s for r in runs}),
        "reconnect_grace_s": RECONNECT_GRACE_S, "jobs": jobs,
    }
    return summarise(results, config=config, wall_s=time.perf_counter() - started)


def _usage(message: str) -> int:
    print(f"benchmarks control: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run the campaign and print JSON or the tables; return 2 for an unknown profile or a bad size."""
    available = available_profiles()
    profiles = list(dict.fromkeys(args.profile or [p for p in PROFILES if p in available]))
    if unknown := [p for p in profiles if p not in available]:
        return _usage(f"unknown profile {', '.join(unknown)} (this simulator has {', '.join(available)})")
    ticks_s = list(dict.fromkeys(float(t) for t in (args.tick or TICKS_S)))
    if any(not t > 0 for t in ticks_s):
        return _usage(f"tick lengths must be positive, not {ticks_s}")
    if args.ultraservers < 1 or not args.seconds > 0 or args.seeds < 1 or args.jobs < 1:
        return _usage("--ultraservers, --seconds, --seeds and --jobs must be positive")
    if args.chip_days is not None and not args.chip_days > 0:
        return _usage(f"--chip-days must be positive, not {args.chip_days:g}")
    if args.restart_down < 0 or args.outage < 0:
        return _usage("--restart-down and --outage must not be negative")
    runs = plan(profiles=profiles, ticks_s=ticks_s, ultraservers=args.ultraservers, seconds=args.seconds,
                seeds=args.seeds, chip_days=args.chip_days, restart_down_s=args.restart_down,
                outage_s=args.outage, noise=args.noise)
    if short := sorted({f"{r.seconds:g} s at {r.tick_s:g} s ticks" for r in runs if not r.disturbed}):
        return _usage(f"runs of {', '.join(short)} end before the restart and the outage do: give more --seconds")
    report = campaign(runs, jobs=args.jobs)
    return emit(report, print_table, output=args.output, as_json=args.json)
