"""The blast-radius brake (docs/actions.md, "The brake"): at most ``max_nodes`` nodes, and at most
``max_fraction`` of each site's and of the fleet's present nodes (at least one), proposed for action within
``window_s``.  The policy keeps two, each its own budget: one for the actions that move or fence a job
(``brake_max_nodes``, ``brake_max_fraction``: cordon, drain, replace) and one for resets
(``reset_brake_max_nodes``, ``reset_brake_max_fraction``), both over ``brake_window_s``.

Each analysis hands it the nodes ready to be proposed, most disruptive and costliest first; it admits them in
that order until a bound refuses one, which **trips** it: that node and every later one are refused, and the
brake **latches**: nothing new is admitted until everything waiting fits within every bound at once (the window
freed, or the waiting causes cleared), so a mass event never drips out proposals as the window frees.  Each
trip counts once.  Plain data and arithmetic; the policy (``actions/policy.py``) owns it.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence

import numpy as np

from rainierd.actions.model import BrakeStatus
from rainierd.fleet import Topology


class Brake:
    """The nodes proposed within the window, both bounds, and whether it has tripped."""

    def __init__(self, topology: Topology, *, max_nodes: int, max_fraction: float, window_s: float) -> None:
        self.max_nodes, self.max_fraction, self.window_s = max_nodes, max_fraction, window_s
        self._node_site = topology.node_site
        present = topology.node_present
        self._site_present = np.bincount(self._node_site[present], minlength=topology.n_sites)
        self._fleet_bound = min(max_nodes, max(1, int(max_fraction * int(present.sum()))))
        self._window: deque[tuple[float, int, int]] = deque()  # (proposed at, node, site), oldest first
        self.since_s: float | None = None  # when it tripped (None: not tripped)
        self.scope: str | None = None  # "fleet" or "site:s<id>": the bound that refused
        self.trips = 0

    def _site_bound(self, site: int) -> int:
        return max(1, int(self.max_fraction * self._site_present[site]))

    def admit(self, nodes: Sequence[int], *, t_s: float) -> list[int]:
        """Return which of ``nodes`` (in priority order) may be proposed at ``t_s``, counting them as under
        action; the rest are held back by the brake."""
        window = self._window
        while window and window[0][0] <= t_s - self.window_s:
            window.popleft()
        if not nodes:
            self.since_s = self.scope = None  # nothing waits on it: released
            return []
        fleet = len({n for _, n, _ in window})
        per_site = Counter(site for _, site in {(n, site) for _, n, site in window})
        sites = [int(s) for s in self._node_site[np.asarray(nodes, np.int64)].tolist()]
        if self.since_s is not None:
            wanting = Counter(sites)
            if fleet + len(nodes) <= self._fleet_bound and all(
                    per_site[site] + k <= self._site_bound(site) for site, k in wanting.items()):
                self.since_s = self.scope = None
        admitted = []
        for n, site in zip(nodes, sites, strict=True):
            if self.since_s is None and (fleet + 1 > self._fleet_bound or per_site[site] + 1 > self._site_bound(site)):
                self.since_s, self.trips = t_s, self.trips + 1
                self.scope = "fleet" if fleet + 1 > self._fleet_bound else f"site:s{site}"
            if self.since_s is not None:
                continue
            fleet += 1
            per_site[site] += 1
            window.append((t_s, n, site))
            admitted.append(n)
        return admitted

    def status(self) -> BrakeStatus:
        """Return the brake's bounds, the nodes under action in the window, and whether it has tripped."""
        return BrakeStatus(self.max_nodes, self.max_fraction, self.window_s,
                           len({n for _, n, _ in self._window}), self.since_s is not None, self.scope, self.since_s)
