"""The advisory policy's figures, frozen and built in one place (``Settings.action_config``): how long a cause
is held before it is proposed, how long an expired advisory stays visible, the blast-radius brake's bounds, the
repeat-offender ledger's threshold, and when a cause is too widespread to be a node's own.  docs/actions.md
explains each default."""

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
    # A degraded NeuronLink whose reset has not helped this long (from its onset) escalates to a drain.
    link_escalate_s: float = 1_800.0
    # A silent node (or chip) is watched; silent this long it is cordoned (it may be dead, not just unheard).
    silent_long_s: float = 1_800.0
    # The brake: at most this many nodes, and this share of a site's and of the fleet's present nodes (at least
    # one), proposed within the window.
    brake_max_nodes: int = 10
    brake_max_fraction: float = 0.05
    brake_window_s: float = 3_600.0
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
            "link_escalate_s": self.link_escalate_s >= 0, "silent_long_s": self.silent_long_s >= 0,
            "brake_max_nodes": self.brake_max_nodes >= 1, "brake_max_fraction": 0 < self.brake_max_fraction <= 1,
            "brake_window_s": self.brake_window_s > 0, "ultraserver_nodes": self.ultraserver_nodes >= 2,
            "site_cooling_ultraservers": self.site_cooling_ultraservers >= 1, "lemon_flags": self.lemon_flags >= 1,
            "lemon_days": self.lemon_days > 0, "ledger_history": self.ledger_history >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"action config out of range: {', '.join(bad)}")
