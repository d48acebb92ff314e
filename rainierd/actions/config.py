"""The advisory policy's figures, frozen and built in one place (``Settings.action_config``): how long a cause
is held before it is proposed, how long an expired advisory stays visible, what a restart costs and how far
ahead a cause's cost is counted (the break-even between leaving a cause and moving its job), how long a reset
may take to restore, the blast-radius brakes' bounds (drains and resets each their own), the repeat-offender
ledger's threshold, and when a cause is too widespread to be a node's own.  docs/actions.md explains each
default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionConfig:
    """Every figure the advisory policy (``actions/policy.py``) and its ledger judge by."""

    dry_run: bool = True  # the sinks advertise, nothing acts (docs/actions.md): what every view says
    # A cause must stand this long before its node's advisory is proposed: a flap, a checkpoint's quiet or a
    # transient clears first (the detectors' own persistence is seconds).
    hold_s: float = 300.0
    expired_keep_s: float = 3_600.0  # an expired proposal stays visible this long
    # Cost: moving a job (a drain) costs it ``restart_s`` of its healthy FLOP/s (requeue, reload from its
    # checkpoint); leaving a cause costs its FLOP/s over ``horizon_s``.  A cause worth more than a restart over
    # the horizon (a share of its job over restart_s / horizon_s: 300 / 3600 = 8.3 %) calls for its dear action.
    restart_s: float = 300.0
    horizon_s: float = 3_600.0
    # A link or port whose reset has not restored it this long from its onset (the hold, then the reset's time
    # to act and show) calls for what follows the reset.
    reset_escalate_s: float = 1_200.0
    # A silent node (or chip) is watched; silent this long it is cordoned (it may be dead, not just unheard).
    silent_long_s: float = 1_800.0
    # The brake: at most this many nodes, and this share of a site's and of the fleet's present nodes (at least
    # one), proposed within the window.
    brake_max_nodes: int = 10
    brake_max_fraction: float = 0.05
    brake_window_s: float = 3_600.0
    # Resets (reset_link, reset_port) have their own budget in the same window: they move no job, but a reset
    # storm is a common cause (a firmware rollout) as much as a drain storm is.
    reset_brake_max_nodes: int = 20
    reset_brake_max_fraction: float = 0.10
    # A job checkpoints regularly when its last ``checkpoint_intervals`` intervals between checkpoints are each
    # within ``checkpoint_jitter`` of their median.
    checkpoint_intervals: int = 2
    checkpoint_jitter: float = 0.25
    # Correlated causes: this many nodes of one UltraServer unhealthy at once (its power, cooling or
    # backplane, not each node), or node cooling on this many UltraServers of one site at once (the facility).
    ultraserver_nodes: int = 3
    site_cooling_ultraservers: int = 2
    # The ledger: a node proposed this many times within this many days is a lemon.
    lemon_flags: int = 3
    lemon_days: float = 30.0
    ledger_history: int = 50  # entries kept per node, the newest

    def __post_init__(self) -> None:
        checks = {
            "hold_s": self.hold_s >= 0, "expired_keep_s": self.expired_keep_s >= 0,
            "restart_s": self.restart_s >= 0, "horizon_s": self.horizon_s > 0,
            "reset_escalate_s": self.reset_escalate_s >= 0, "silent_long_s": self.silent_long_s >= 0,
            "reset_brake_max_nodes": self.reset_brake_max_nodes >= 1,
            "reset_brake_max_fraction": 0 < self.reset_brake_max_fraction <= 1,
            "checkpoint_intervals": self.checkpoint_intervals >= 1, "checkpoint_jitter": self.checkpoint_jitter >= 0,
            "brake_max_nodes": self.brake_max_nodes >= 1, "brake_max_fraction": 0 < self.brake_max_fraction <= 1,
            "brake_window_s": self.brake_window_s > 0, "ultraserver_nodes": self.ultraserver_nodes >= 2,
            "site_cooling_ultraservers": self.site_cooling_ultraservers >= 1, "lemon_flags": self.lemon_flags >= 1,
            "lemon_days": self.lemon_days > 0, "ledger_history": self.ledger_history >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"action config out of range: {', '.join(bad)}")
