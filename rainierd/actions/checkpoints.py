"""Each job's checkpoint clock, learned from its phases: when it last checkpointed and, when it does so
regularly, when it will next, so a drain can be proposed for the moment the job loses least by it (its next
checkpoint: nothing to redo) rather than at once (docs/actions.md, "Cost and timing").

No job document says how often its job checkpoints; the monitor's phase tracker (``core/jobphase.py``) names
each quiet spell of a whole job ``checkpoint``.  A checkpoint's onset is when its job entered that phase (the
analysis' wall time less the phase's age).  A job checkpoints **regularly** once its last ``intervals``
intervals between onsets are each within ``jitter`` of their median; its next checkpoint is then the last
onset plus whole medians, the first still ahead.  A job whose cadence is irregular, or not yet seen twice, has
no next checkpoint: unknown, never guessed.

Plain data and arithmetic, keyed by job id (jobs are renumbered as they come and go); a job that leaves the
membership is forgotten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rainierd.core import CHECKPOINT, JobMembership, JobPhases


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """One job's checkpoint clock at an analysis."""

    last_s: float  # wall time of its latest checkpoint's onset
    every_s: float | None  # the median interval, when regular (None: irregular or not yet known)

    def next_after(self, t_s: float) -> float | None:
        """Return the wall time of the job's first checkpoint after ``t_s`` (None: it has no regular one)."""
        if self.every_s is None or self.every_s <= 0:
            return None
        periods = max(1, math.floor((t_s - self.last_s) / self.every_s) + 1)
        return self.last_s + periods * self.every_s


class CheckpointClock:
    """Every job's checkpoint onsets, from analysis to analysis."""

    def __init__(self, *, intervals: int = 2, jitter: float = 0.25) -> None:
        self.intervals, self.jitter = intervals, jitter
        self._onsets: dict[str, list[float]] = {}  # job id -> onsets, oldest first (at most intervals + 1)
        self._in_checkpoint: set[str] = set()

    def update(self, jobs: JobMembership | None, phases: JobPhases | None, *, t_s: float) -> None:
        """Fold in one analysis' phases (``t_s``: its wall time)."""
        if jobs is None or phases is None or phases.n_jobs != jobs.n_jobs:
            return
        now = set(jobs.ids)
        for gone in [j for j in self._onsets if j not in now]:
            del self._onsets[gone]
        self._in_checkpoint &= now
        checkpointing = np.flatnonzero(phases.phase == CHECKPOINT).tolist()
        entered = {jobs.ids[j]: t_s - float(phases.phase_s[j]) for j in checkpointing}
        for job, onset in entered.items():
            if job not in self._in_checkpoint:
                kept = self._onsets.setdefault(job, [])
                kept.append(onset)
                del kept[:-(self.intervals + 1)]
        self._in_checkpoint = set(entered)

    def of(self, job: str) -> Checkpoints | None:
        """Return ``job``'s clock (None: never seen checkpointing)."""
        onsets = self._onsets.get(job)
        if not onsets:
            return None
        gaps = np.diff(onsets)
        every = None
        if gaps.size >= self.intervals:
            median = float(np.median(gaps))
            if median > 0 and bool(np.all(np.abs(gaps - median) <= self.jitter * median)):
                every = median
        return Checkpoints(onsets[-1], every)
