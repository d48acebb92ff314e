"""What a node's causes cost its job, what acting costs, and when to act (docs/actions.md, "Cost and timing"):
the figures a priced rule (``actions/rules.py``) is decided by, and their account in an advisory's reason.

A node's causes cost its job ``loss`` FLOP/s (the job model's charge); the job delivers ``job`` FLOP/s
healthy (its effective plus everything it loses).  Leaving the causes costs ``loss x horizon_s``, moving the
job costs ``job x restart_s``: a priced step is **dear** when the first is at least the second.  A drain
chosen dear, for a job that checkpoints regularly (``actions/checkpoints.py``) and is not stalled, waits for
the job's next checkpoint when what the causes cost until then is less than the work since its last
checkpoint a restart now would redo.  Text spells rates and amounts as ``top`` does (``fleet/units.py``).

Pure arithmetic over the job model's frozen values; the policy (``actions/policy.py``) asks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from rainierd._types import F64, I64, B
from rainierd.actions.checkpoints import Checkpoints
from rainierd.actions.config import ActionConfig
from rainierd.actions.model import Cost
from rainierd.core import JobLoss, JobMembership
from rainierd.fleet.units import flop_text, flops_text


@dataclass(frozen=True, eq=False)
class PricedJobs:
    """This analysis's jobs as the pricing needs them (``loss`` None: no job model, nothing is priced)."""

    membership: JobMembership
    loss: JobLoss | None
    healthy: F64  # FLOP/s each job delivers healthy: its effective plus its lost
    stalled: B

    @classmethod
    def of(cls, jobs: JobMembership | None, loss: JobLoss | None) -> PricedJobs | None:
        """Return the jobs to price by (None: no jobs; ``loss`` None when the model is missing or disagrees)."""
        if jobs is None or not jobs.n_jobs:
            return None
        if loss is None or loss.n_jobs != jobs.n_jobs:
            return cls(jobs, None, np.zeros(jobs.n_jobs), np.zeros(jobs.n_jobs, bool))
        healthy = np.asarray(loss.effective + loss.lost_total, np.float64)
        return cls(jobs, loss, np.where(np.isfinite(healthy), healthy, 0.0), np.asarray(loss.stalled, bool))

    def dear(self, job: I64, flops: F64, config: ActionConfig) -> B:
        """Return, per node (its job number, -1 for none, and what its causes cost it), whether its causes cost
        the job more over the horizon than a restart does; never for a node in no job or with no model."""
        if self.loss is None:
            return np.zeros(job.size, bool)
        healthy = np.where(job >= 0, self.healthy[np.maximum(job, 0)], 0.0)
        return np.asarray((job >= 0) & (flops > 0) & (flops * config.horizon_s >= healthy * config.restart_s))

    def cost(self, job: int, flops: float, config: ActionConfig, *, dear: bool, clock: Checkpoints | None,
             t_s: float) -> Cost | None:
        """Return what a node's causes (``flops``) cost job number ``job`` and what acting costs, timed to its
        next checkpoint when ``dear`` (a drain chosen by its cost) and the job checkpoints regularly and is not
        stalled; None when unpriced."""
        if self.loss is None:
            return None
        healthy = float(self.healthy[job])
        cost = Cost(self.membership.ids[job], flops, healthy, flops * config.horizon_s, healthy * config.restart_s,
                    "now")
        upcoming = clock.next_after(t_s) if clock is not None and dear and not self.stalled[job] else None
        if clock is None or upcoming is None:
            return cost
        until, redo = flops * (upcoming - t_s), healthy * max(t_s - clock.last_s, 0.0)
        return replace(cost, when="next_checkpoint" if until < redo else "now", next_checkpoint_s=upcoming,
                       until_checkpoint_flop=until, redo_flop=redo)


def action_text(action: str, cost: Cost | None) -> str:
    """Return a reason's first words: the action, and when (``drain at lab/pretrain's next checkpoint (…)``)."""
    if cost is None or cost.when != "next_checkpoint" or cost.next_checkpoint_s is None:
        return action
    at = time.strftime("%H:%M:%SZ", time.gmtime(cost.next_checkpoint_s))
    return f"{action} at {cost.job}'s next checkpoint ({at})"


def cost_text(job: str | None, cost: Cost | None, config: ActionConfig) -> str:
    """Return a reason's account of the cost: the share, both sides of the break-even and, when timed, of the
    wait (``costs lab/pretrain 24.3% (12.6 PF/s): 45.5 EF over 1 h >= 15.6 EF for a restart``)."""
    if job is None:
        return "in no job"
    if cost is None:
        return f"protects {job} (its cost unknown: no job model)"
    hours = config.horizon_s / 3600
    horizon = f"{hours:.3g} h" if hours >= 1 else f"{config.horizon_s / 60:.3g} min"
    side = ">=" if cost.loss_flops > 0 and cost.horizon_flop >= cost.restart_flop else "<"
    text = (f"costs {job} {cost.share:.1%} ({flops_text(cost.loss_flops)}): {flop_text(cost.horizon_flop)} "
            f"over {horizon} {side} {flop_text(cost.restart_flop)} for a restart")
    if cost.until_checkpoint_flop is not None and cost.redo_flop is not None:
        wait = "<" if cost.when == "next_checkpoint" else ">="
        text += (f"; {flop_text(cost.until_checkpoint_flop)} lost until its next checkpoint {wait} "
                 f"{flop_text(cost.redo_flop)} a restart now redoes")
    return text
