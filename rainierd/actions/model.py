"""What the advisory policy concludes each analysis, frozen: one recommended action per node with its reason,
what it protects and its state, the brake's status and the repeat-offender ledger's lemons.

The policy (``actions/policy.py``) builds one ``ActionsView`` per tick; every sink (``/api/v1/actions``, the
retained MQTT documents, the webhook, ``rainierd node-check``) reads only this value and its ``document()``,
whose JSON form is ``docs/actions.schema.json``.  Times are wall seconds (Unix), so a reader in another
process can compare them with its own clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

SCHEMA_VERSION: Final = 1

# Least to most disruptive: a node's advisory is the most disruptive its causes call for.  A reset retrains one
# link or port under the running job; a cordon keeps new work off the node and lets its job run on; a drain
# cordons it and moves its job off (a restart from its checkpoint); a replace drains it for a hardware ticket.
ACTIONS: Final = ("watch", "reset_link", "reset_port", "cordon", "drain", "replace")
# The actions the brake counts in their own budget (``reset_brake``): retraining a link or a port moves no job.
RESETS: Final = frozenset({"reset_link", "reset_port"})
# When an action is proposed to be taken (``Cost.when``): at once, or at the job's next checkpoint.
WHEN: Final = ("now", "next_checkpoint")

# pending: held (the hold time has not passed); proposed: an SRE or an automation may act; suppressed: the brake
# or a correlated cause holds it back; expired: its causes cleared (kept for ``expired_keep_s`` so a reader sees it).
STATES: Final = ("pending", "proposed", "suppressed", "expired")


@dataclass(frozen=True, slots=True)
class Cause:
    """One unhealthy entity behind an advisory, named as the detection events name it (docs/ids.md)."""

    entity: str  # neuronlink, efa, chip, node, cooling, ...
    index: int  # the fleet-wide index
    id: str  # the canonical id: e.g. "s0/u1/n4/chip3/link1"
    state: str  # degraded, failed, throttled, silent, ...
    reasons: tuple[str, ...]
    since_s: float  # wall time of its onset

    def document(self) -> dict[str, Any]:
        """Return the cause as plain data."""
        return {"entity": self.entity, "id": self.id, "index": self.index, "state": self.state,
                "reasons": list(self.reasons), "since_s": self.since_s}


@dataclass(frozen=True, slots=True)
class Protected:
    """A job the action protects and the FP8 FLOP/s its causes cost that job now."""

    job: str
    flops: float

    def document(self) -> dict[str, Any]:
        """Return the protected job as plain data."""
        return {"job": self.job, "flops": self.flops}


@dataclass(frozen=True, slots=True)
class Cost:
    """What a node's causes cost its job, and what acting costs: the figures its action was chosen by
    (docs/actions.md, "Cost and timing").  FLOP/s are rates, FLOP are amounts; ``None`` is unknown."""

    job: str
    loss_flops: float  # FLOP/s the node's causes cost the job now
    job_flops: float  # FLOP/s the job delivers healthy (its effective plus its lost)
    horizon_flop: float  # loss_flops over the policy's horizon: what leaving it costs
    restart_flop: float  # job_flops over a restart: what moving the job costs
    when: str  # one of WHEN
    next_checkpoint_s: float | None = None  # wall time of the job's next checkpoint (None: it has no regular one)
    until_checkpoint_flop: float | None = None  # loss_flops until then: what waiting for it costs
    redo_flop: float | None = None  # the job's work since its last checkpoint: what a restart now redoes

    @property
    def share(self) -> float:
        """Return the share of the job's healthy FLOP/s the causes cost (0 for a job delivering nothing)."""
        return self.loss_flops / self.job_flops if self.job_flops > 0 else 0.0

    def document(self) -> dict[str, Any]:
        """Return the cost as plain data."""
        return {"job": self.job, "loss_flops": self.loss_flops, "job_flops": self.job_flops, "share": self.share,
                "horizon_flop": self.horizon_flop, "restart_flop": self.restart_flop, "when": self.when,
                "next_checkpoint_s": self.next_checkpoint_s, "until_checkpoint_flop": self.until_checkpoint_flop,
                "redo_flop": self.redo_flop}


@dataclass(frozen=True, slots=True)
class Advisory:
    """One node's recommended action."""

    node: str  # the node's canonical id, "s0/u1/n4" (docs/ids.md)
    index: int  # the node's fleet-wide index
    site: str  # "s0"
    ultraserver: str  # "s0/u1"
    action: str  # one of ACTIONS
    state: str  # one of STATES
    reason: str  # one line an SRE reads at 3 a.m.
    causes: tuple[Cause, ...]
    protects: tuple[Protected, ...]  # costliest first
    since_s: float  # the earliest cause's onset
    proposed_s: float | None = None  # when it became proposed (None: never yet)
    expired_s: float | None = None
    suppressed_by: str | None = None  # "brake", "correlated:<scope>", "monitor_behind", ... (state suppressed)
    lemon: bool = False  # the ledger marks this node a repeat offender
    hostname: str | None = None  # the inventory's name of the node (None: it names none)
    cost: Cost | None = None  # what its causes cost its job and what acting costs (None: in no job, or unpriced)

    @property
    def protects_flops(self) -> float:
        """Return the FLOP/s all the jobs it protects lose to its causes."""
        return sum(p.flops for p in self.protects)

    def document(self) -> dict[str, Any]:
        """Return the advisory as plain data (one element of ``/api/v1/actions``' ``actions``)."""
        return {
            "node": self.node, "hostname": self.hostname, "index": self.index, "site": self.site,
            "ultraserver": self.ultraserver,
            "action": self.action, "state": self.state, "reason": self.reason,
            "causes": [c.document() for c in self.causes], "protects": [p.document() for p in self.protects],
            "protects_flops": self.protects_flops, "since_s": self.since_s, "proposed_s": self.proposed_s,
            "expired_s": self.expired_s, "suppressed_by": self.suppressed_by, "lemon": self.lemon,
            "cost": None if self.cost is None else self.cost.document(),
        }


@dataclass(frozen=True, slots=True)
class BrakeStatus:
    """The blast-radius brake: both bounds, how many nodes are under action in the window, and whether it holds."""

    max_nodes: int
    max_fraction: float  # of the scope's present nodes
    window_s: float
    under_action: int  # nodes proposed within the window (fleet-wide)
    tripped: bool = False
    scope: str | None = None  # "fleet" or the site whose bound tripped
    since_s: float | None = None

    def document(self) -> dict[str, Any]:
        """Return the brake's status as plain data."""
        return {"max_nodes": self.max_nodes, "max_fraction": self.max_fraction, "window_s": self.window_s,
                "under_action": self.under_action, "tripped": self.tripped, "scope": self.scope,
                "since_s": self.since_s}


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One node's history of actions and causes, kept across restarts."""

    node: str
    flagged: int  # advisories proposed for it within the ledger's window
    lemon: bool
    history: tuple[tuple[float, str, str], ...]  # (wall time, action, one-line cause), oldest first

    def document(self) -> dict[str, Any]:
        """Return the record as plain data."""
        return {"node": self.node, "flagged": self.flagged, "lemon": self.lemon,
                "history": [{"t_s": t, "action": a, "cause": c} for t, a, c in self.history]}


@dataclass(frozen=True, slots=True)
class ActionsView:
    """Every advisory of one analysis (most disruptive, then costliest first), both brakes and the lemons."""

    t_s: float  # wall time of the analysis
    dry_run: bool
    advisories: tuple[Advisory, ...] = ()
    brake: BrakeStatus = field(default_factory=lambda: BrakeStatus(0, 0.0, 0.0, 0))  # cordon, drain, replace
    lemons: tuple[LedgerRecord, ...] = ()
    reset_brake: BrakeStatus = field(default_factory=lambda: BrakeStatus(0, 0.0, 0.0, 0))  # resets, their own

    def for_node(self, node: str) -> Advisory | None:
        """Return the advisory of the node whose id is ``node`` (``s0/u1/n4``), or None."""
        return next((a for a in self.advisories if a.node == node), None)

    def document(self, *, node: str | None = None, state: str | None = None, limit: int | None = None,
                 ) -> dict[str, Any]:
        """Return the view as ``/api/v1/actions`` serves it (docs/actions.schema.json): optionally one node's,
        one state's, and at most ``limit`` advisories (``total`` counts them all)."""
        chosen = [a for a in self.advisories
                  if (node is None or a.node == node) and (state is None or a.state == state)]
        shown = chosen if limit is None else chosen[:limit]
        return {
            "schema_version": SCHEMA_VERSION, "t_s": self.t_s, "dry_run": self.dry_run,
            "total": len(chosen), "actions": [a.document() for a in shown],
            "brake": self.brake.document(), "reset_brake": self.reset_brake.document(),
            "lemons": [r.document() for r in self.lemons],
        }
