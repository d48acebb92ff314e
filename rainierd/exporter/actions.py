"""The advisories as metrics (docs/actions.md, docs/metrics.md "Actions"): how many nodes are advised each
action in each state, the proposals and brake trips so far, whether the brake holds, how many nodes are
under action within its window, the lemons, and whether the advisories are dry-run.  A fixed, small set of
series (5 actions x 4 states, and a few scalars): the advisories themselves are ``/api/v1/actions``', never
one series per node.  Absent until the first analysis.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.actions import ACTIONS, STATES
from rainierd.monitor import MonitorSnapshot


class ActionsCollector(Collector):
    """The rainier_actions* families of the latest snapshot's advisories."""

    def __init__(self, snapshot: Callable[[], MonitorSnapshot | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None or snap.actions is None:
            return
        view = snap.actions
        counts = Counter((a.action, a.state) for a in view.advisories)
        advised = GaugeMetricFamily(
            "rainier_actions", "Nodes advised each action, by the advisory's state (pending, proposed, suppressed, "
            "expired); docs/actions.md.", labels=["action", "state"])
        for action in ACTIONS:
            for state in STATES:
                advised.add_metric([action, state], counts[action, state])
        yield advised
        if snap.action_totals is not None:
            proposed = CounterMetricFamily(
                "rainier_actions_proposed", "Advisories proposed (an escalation of one too), by action, since the "
                "monitor started.", labels=["action"])
            for action in ACTIONS:
                proposed.add_metric([action], snap.action_totals.proposed.get(action, 0))
            yield proposed
            yield CounterMetricFamily("rainier_actions_brake_trips",
                                      "Times a blast-radius brake tripped (the drains' or the resets').",
                                      value=snap.action_totals.brake_trips)
        brake = view.brake
        yield GaugeMetricFamily("rainier_actions_brake_tripped",
                                "1 while the blast-radius brake holds every new proposal back.",
                                value=float(brake.tripped))
        yield GaugeMetricFamily("rainier_actions_brake_under_action",
                                "Nodes proposed for action within the brake's window.", value=brake.under_action)
        yield GaugeMetricFamily("rainier_actions_brake_max_nodes",
                                "The brake's bound: nodes proposed within its window at most.",
                                value=brake.max_nodes)
        yield GaugeMetricFamily("rainier_actions_lemons",
                                "Nodes the repeat-offender ledger marks lemons (proposed K times in D days).",
                                value=len(view.lemons))
        yield GaugeMetricFamily("rainier_actions_dry_run",
                                "1 while advisories are advice only (--actions-dry-run, the default).",
                                value=float(view.dry_run))
