"""Job phases: which training jobs have gone quiet together, and why, so a
checkpoint reads as a checkpoint and not as a fleet of sick chips.

It exists because a job's members move together: in a checkpoint every chip
of the job drops to near zero for tens of seconds and its collectives fall
silent; after a crash the scheduler restarts the job and its chips idle for
minutes; a failed chip or a silent node stalls every member.  The detectors
already hold such moves against no one (a NeuronLink or EFA group that goes
idle is not judged, cooling compares nodes under the same load, a straggler
is judged only above 20 % utilisation); this module names the move for the
operator, per job:

- ``running``: the job steps;
- ``checkpoint``: at least ``together`` of its reporting chips are quiet
  (utilisation under ``quiet_util``), for at most ``checkpoint_max_s``, and
  none of its members has failed or fallen silent;
- ``restarting``: quiet, and its scheduler says it is restarting (the job
  document's ``restarting``);
- ``stalled``: quiet longer than a checkpoint, or a failed or silent member
  stalls it (the job model's ``stalled``: a fault, never a phase).

Per job it keeps the phase, when it began and the job's stall seconds (every
second in a phase other than ``running``).  Jobs are numbered by their ids'
order, which moves as jobs come and go: the state is carried by id.

Pure: the membership, the chips' utilisation and freshness, the job model's
stalls and the time in; one frozen ``JobPhases`` out.  Per tick it costs a
reduction of the chips to their nodes and a bincount over the nodes; the
per-id bookkeeping runs only when the set of jobs changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, F64, I64, B
from rainierd.core.jobs import JobMembership

PHASE_NAMES: Final = ("running", "checkpoint", "restarting", "stalled")
RUNNING, CHECKPOINT, RESTARTING, STALLED = range(len(PHASE_NAMES))


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseParams:
    """When a job counts as quiet, and how long a quiet spell may be a checkpoint (docs/jobs.md)."""

    quiet_util: float = 0.05  # a chip under this utilisation steps no training work
    together: float = 0.9  # this share of a job's reporting chips quiet at once: the job is quiet
    # Checkpoints take tens of seconds (the simulator's mix: 20-90 s); a quiet spell past this is a stall.
    checkpoint_max_s: float = 300.0


@dataclass(frozen=True, eq=False)
class JobPhases:
    """Per job (``JobMembership`` order): its phase (``PHASE_NAMES`` index), seconds in it, and stall seconds."""

    phase: I64
    phase_s: F64
    stall_s: F64

    @property
    def n_jobs(self) -> int:
        """Return how many jobs there are."""
        return int(self.phase.size)

    def names(self) -> list[str]:
        """Return each job's phase name."""
        return [PHASE_NAMES[p] for p in self.phase.tolist()]


class PhaseTracker:
    """Each job's phase from tick to tick (one per monitor core)."""

    def __init__(self, params: PhaseParams | None = None) -> None:
        self.params = params or PhaseParams()
        self._ids: tuple[str, ...] = ()
        self._phase = np.zeros(0, np.int64)
        self._since_s = np.zeros(0, np.float64)  # when the current phase began
        self._quiet_since_s = np.zeros(0, np.float64)  # when the current quiet spell began (NaN: not quiet)
        self._stall_s = np.zeros(0, np.float64)
        self._last_s = float("nan")

    def update(
        self, membership: JobMembership, *, util: F32, chip_fresh: B, stalled: B, now_s: float,
    ) -> JobPhases:
        """Fold in one tick: ``util`` and ``chip_fresh`` per chip, the job model's ``stalled`` per job (a failed
        or silent member); return every job's phase (restarting: as its document says)."""
        self._follow(membership.ids, now_s)
        quiet = self._quiet(membership, util, chip_fresh)
        restart = membership.restarting
        np.copyto(self._quiet_since_s, np.float64(now_s), where=quiet & np.isnan(self._quiet_since_s))
        np.copyto(self._quiet_since_s, np.float64(np.nan), where=~quiet)
        quiet_s = now_s - self._quiet_since_s  # NaN where not quiet
        phase = np.full(membership.n_jobs, RUNNING, np.int64)
        phase[quiet] = CHECKPOINT
        phase[quiet & (quiet_s > self.params.checkpoint_max_s)] = STALLED
        phase[quiet & restart] = RESTARTING
        phase[np.asarray(stalled, dtype=bool)] = STALLED  # a fault, whether or not the job looks quiet yet
        elapsed = now_s - self._last_s if np.isfinite(self._last_s) else 0.0
        self._stall_s += np.where(self._phase != RUNNING, max(elapsed, 0.0), 0.0)  # the interval just ended
        changed = phase != self._phase
        self._since_s[changed] = now_s
        self._phase = phase
        self._last_s = now_s
        return JobPhases(phase.copy(), now_s - self._since_s, self._stall_s.copy())

    def _quiet(self, membership: JobMembership, util: F32, chip_fresh: B) -> B:
        """Return which jobs have ``together`` of their reporting chips quiet (a job reporting none is not)."""
        return quiet_groups(membership.node_job, membership.n_jobs, util, chip_fresh, self.params)

    def _follow(self, ids: tuple[str, ...], now_s: float) -> None:
        """Carry each job's state over to this membership's numbering (new jobs start running now)."""
        if ids == self._ids:
            return
        old = {job_id: i for i, job_id in enumerate(self._ids)}
        at: I64 = np.array([old.get(job_id, -1) for job_id in ids], dtype=np.int64)
        kept = at >= 0

        def carry(values: np.ndarray, fill: float | int) -> np.ndarray:
            out = np.full(len(ids), fill, values.dtype)
            out[kept] = values[at[kept]]
            return out

        self._phase = carry(self._phase, RUNNING)
        self._since_s = carry(self._since_s, now_s)
        self._quiet_since_s = carry(self._quiet_since_s, np.nan)
        self._stall_s = carry(self._stall_s, 0.0)
        self._ids = ids


def quiet_groups(
    node_job: npt.NDArray[np.signedinteger[Any]], n_groups: int, util: F32, chip_fresh: B, params: PhaseParams,
) -> B:
    """Return which groups (``node_job``: each node's, -1 for none) have ``together`` of their reporting chips
    quiet, under ``quiet_util`` (a group reporting none is not): the phase tracker's quiet job, and what the job
    model learns no healthy share in (``core/jobmodel.py``)."""
    if n_groups == 0:
        return np.zeros(0, dtype=bool)
    per_node = chip_fresh.size // node_job.size
    fresh = chip_fresh.reshape(node_job.size, per_node)
    low = fresh & (util.reshape(node_job.size, per_node) < np.float32(params.quiet_util))
    held = node_job >= 0
    groups = node_job[held]
    reporting = np.bincount(groups, weights=fresh.sum(axis=1)[held], minlength=n_groups)
    quiet = np.bincount(groups, weights=low.sum(axis=1)[held], minlength=n_groups)
    return np.asarray((reporting > 0) & (quiet >= params.together * reporting), dtype=bool)
