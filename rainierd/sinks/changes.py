"""What changed between two consecutive ``ActionsView``: the one diff every
pushing sink (the retained MQTT documents, the webhook) sends, so they agree
on what a change is.

An advisory changes when it appears (``new``), when what a consumer acts on
changes (``changed``: its action, state, what suppresses it, its lemon mark
or the set of causes and their states), and when it leaves the view
(``cleared``).  Figures that move every tick (the FLOP/s it protects, a
cause's reasons) are not a change on their own: they travel with the next
change and are always current in ``GET /api/v1/actions``.  The brake changes
when it trips, releases, moves scope or its count of nodes under action
moves.

Cost: one dict of the advisories by node and a tuple a advisory a tick, on
the event loop; advisories are per node, not per chip or link (a few
hundred at ``rainier`` with 1,000 unhealthy entities).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from rainierd.actions import ActionsView, Advisory, BrakeStatus

ChangeKind = Literal["new", "changed", "cleared"]


@dataclass(frozen=True, slots=True)
class Change:
    """One node's advisory that changed: ``advisory`` is the new one (the last one for ``cleared``)."""

    kind: ChangeKind
    node: str
    advisory: Advisory
    t_s: float  # wall time of the analysis that saw the change

    @property
    def event_type(self) -> str:
        """Return the change's name as a CloudEvents type suffix: the advisory's state, or ``cleared``."""
        return "cleared" if self.kind == "cleared" else self.advisory.state


def signature(advisory: Advisory) -> Hashable:
    """Return what a consumer acts on in ``advisory``: equal signatures are no change."""
    return (advisory.action, advisory.state, advisory.suppressed_by, advisory.lemon,
            tuple((c.entity, c.id, c.state) for c in advisory.causes))


def diff(before: ActionsView | None, after: ActionsView | None) -> list[Change]:
    """Return the changes from ``before`` to ``after`` (None: no advisories), in ``after``'s order, then the
    cleared ones in ``before``'s order."""
    old = {a.node: a for a in before.advisories} if before is not None else {}
    t_s = after.t_s if after is not None else (before.t_s if before is not None else 0.0)
    changes: list[Change] = []
    seen: set[str] = set()
    for advisory in after.advisories if after is not None else ():
        seen.add(advisory.node)
        previous = old.get(advisory.node)
        if previous is None:
            changes.append(Change("new", advisory.node, advisory, t_s))
        elif signature(previous) != signature(advisory):
            changes.append(Change("changed", advisory.node, advisory, t_s))
    changes.extend(Change("cleared", node, advisory, t_s) for node, advisory in old.items() if node not in seen)
    return changes


def _brake_key(brake: BrakeStatus) -> Hashable:
    return (brake.tripped, brake.scope, brake.under_action, brake.max_nodes, brake.max_fraction, brake.window_s)


def brake_changed(before: ActionsView | None, after: ActionsView | None) -> bool:
    """Return whether the brake's status differs between the two views (a first view's brake is a change)."""
    if after is None:
        return False
    return before is None or _brake_key(before.brake) != _brake_key(after.brake)
