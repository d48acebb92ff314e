"""The rule ``benchmarks tsdb`` judges a ramp step by, with no I/O: what the
TSDB recorded of a step's scrapes, whether the step was sustained (and if not,
why), and which target count the ramp tries next.  Apart from the run so the
tests pin the rule on recorded figures.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["SUSTAINED_SHARE", "Scrapes", "Step", "metric_sum", "next_targets", "quiet_phase", "scrape_counts",
           "shortfalls"]

SUSTAINED_SHARE = 0.99  # appended / offered a sustained step reaches


@dataclass(frozen=True, slots=True)
class Scrapes:
    """What the TSDB recorded of a step's scrapes: counts, and durations in seconds."""

    expected: int
    ok: int
    failed: int
    missed: int
    overrun: int  # took the whole interval or longer
    duration_p50_s: float | None
    duration_p99_s: float | None
    duration_max_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One step of the ramp: K targets scraped for a window of whole intervals."""

    targets: int
    scraped_series: int  # targets x series per target
    tsdb_series: float  # the TSDB's own count of active series at the window's end
    window_s: float
    offered_samples_per_s: float
    appended_samples_per_s: float
    scrapes: Scrapes
    tsdb_cpu_cores: float
    tsdb_rss_bytes: int
    tsdb_max_rss_bytes: int
    targets_cpu_cores: float  # the process serving every target
    warmup_s: float
    shortfalls: tuple[str, ...]  # why it was not sustained; empty when it was

    @property
    def sustained(self) -> bool:
        """Return whether the step met every part of the rule."""
        return not self.shortfalls


def metric_sum(values: Mapping[str, float], name: str) -> float:
    """Return the sum of family ``name``'s samples over all its label sets in a parsed scrape (0 if absent)."""
    return sum(v for series, v in values.items() if series == name or series.startswith(name + "{"))


def scrape_counts(up: Mapping[str, Sequence[float]], durations: Mapping[str, Sequence[float]], *,
                  targets: Sequence[str], per_target: int, interval_s: float) -> Scrapes:
    """Return the scrape counts of a window from each target's ``up`` values and scrape durations.

    A target expected ``per_target`` scrapes; fewer recorded (successful or
    not) are missed.  A scrape is failed when ``up`` is 0 and overran when it
    took ``interval_s`` or longer.
    """
    ok = sum(sum(1 for v in up.get(t, ()) if v == 1) for t in targets)
    failed = sum(sum(1 for v in up.get(t, ()) if v != 1) for t in targets)
    missed = sum(max(0, per_target - len(up.get(t, ()))) for t in targets)
    every = [d for t in targets for d in durations.get(t, ())]
    return Scrapes(
        expected=per_target * len(targets), ok=ok, failed=failed, missed=missed,
        overrun=sum(1 for d in every if d >= interval_s),
        duration_p50_s=float(np.percentile(every, 50)) if every else None,
        duration_p99_s=float(np.percentile(every, 99)) if every else None,
        duration_max_s=max(every, default=None),
    )


def shortfalls(scrapes: Scrapes, *, offered_per_s: float, appended_per_s: float) -> tuple[str, ...]:
    """Return why a step was not sustained (module docstring), one phrase each; empty when it was."""
    found = []
    if scrapes.missed:
        found.append(f"{scrapes.missed} of {scrapes.expected} scrapes missed")
    if scrapes.failed:
        found.append(f"{scrapes.failed} scrapes failed")
    if scrapes.overrun:
        found.append(f"{scrapes.overrun} scrapes took the whole interval")
    if appended_per_s < SUSTAINED_SHARE * offered_per_s:
        found.append(f"appended {appended_per_s / offered_per_s:.3f} of offered")
    return tuple(found)


def next_targets(history: Sequence[tuple[int, bool]], *, start: int, factor: float, max_targets: int,
                 refine: int) -> int | None:
    """Return the next step's target count after ``history`` of (targets, sustained), or None when done.

    The ramp starts at ``start`` and multiplies by ``factor`` (at least +1) up
    to ``max_targets`` while every step is sustained.  After the first step
    that is not, it tries up to ``refine`` times the midpoint between the
    largest sustained count and the smallest not sustained, while one lies
    strictly between them.
    """
    if not history:
        return min(start, max_targets)
    failed = [k for k, ok in history if not ok]
    if not failed:
        last = history[-1][0]
        return None if last >= max_targets else min(max_targets, max(last + 1, math.floor(last * factor)))
    below = max((k for k, ok in history if ok and k < min(failed)), default=0)
    middle = (below + min(failed)) // 2
    refinements = len(history) - 1 - next(i for i, (_k, ok) in enumerate(history) if not ok)
    if refinements >= refine or middle <= below or any(k == middle for k, _ in history):
        return None
    return middle


def quiet_phase(samples: Sequence[tuple[float, float]], period_s: float) -> float:
    """Return the phase (seconds mod ``period_s``) in the middle of the longest run of a counter not changing.

    ``samples`` are (time, value) over about one period, in time order.  A
    window that starts and ends there does not cut through a scrape's append,
    so counting whole intervals counts whole scrapes.
    """
    best_start, best_length = samples[0][0], -1.0
    run_start = samples[0][0]
    for (_t0, v0), (t1, v1) in itertools.pairwise(samples):
        if v1 != v0:
            run_start = t1
        elif t1 - run_start > best_length:
            best_start, best_length = run_start, t1 - run_start
    return (best_start + max(best_length, 0.0) / 2) % period_s
