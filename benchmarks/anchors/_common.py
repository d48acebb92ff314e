"""What every anchor detector shares: the telemetry it may read (the monitor
core's admitted arrays, never the simulator's truth), which samples are new
this tick, per-node means, and turning a per-entity flag into raise and clear
events the detection benchmark's grading reads as it reads rainierd's.

Why the admitted arrays: the anchors must see exactly the frames rainierd
sees, decoded and bounded the same way (a counter's per-second rate, NaN for
unknown), so that a difference in the side-by-side table is the method's,
not the plumbing's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from rainierd.core.detect import Event
from rainierd.core.state import FleetState, Table
from rainierd.fleet.topology import Topology

__all__ = ["HEALTHY", "Anchor", "Fresh", "Latch", "View", "node_mean"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
HEALTHY: Final = "healthy"


@dataclass(frozen=True, slots=True)
class View:
    """What an anchor reads at one tick: the fleet's admitted telemetry and, per node, its group (its job as the
    job documents say, else its UltraServer): the only peers a task-level method such as Minder compares."""

    tick: int
    state: FleetState
    node_group: npt.NDArray[np.int64]

    @property
    def topology(self) -> Topology:
        """Return the fleet's topology."""
        return self.state.topology


class Anchor(Protocol):
    """An anchor detector: given each tick's view, it returns its events (raises and clears)."""

    name: str

    def observe(self, view: View) -> list[Event]: ...


@dataclass(eq=False)
class Fresh:
    """Which entities of a table carry a sample newer than the last tick's (by the publisher's sample time, which
    survives a monitor restart; NaN: never sampled)."""

    last: F64 = field(default_factory=lambda: np.empty(0))

    def of(self, table: Table) -> B:
        """Return the entities of ``table`` whose latest sample is new since the last call."""
        if self.last.size != table.n:
            self.last = np.full(table.n, np.nan)
        t = table.t_s
        new = np.isfinite(t) & ~(t == self.last)
        self.last = t.copy()
        return np.asarray(new, dtype=bool)


@dataclass(eq=False)
class Latch:
    """One entity kind's health as an anchor holds it: a raise when an entity's flag goes up, a clear when it
    comes down, as rainierd's events are (``before`` healthy for a raise, ``after`` healthy for a clear)."""

    entity: str
    after: str
    on: B = field(default_factory=lambda: np.zeros(0, bool))
    onset: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))

    def on_or_empty(self, n: int) -> B:
        """Return which of ``n`` entities are raised (none before the first update)."""
        return self.on if self.on.size == n else np.zeros(n, bool)

    def update(self, tick: int, flagged: B, reason: str, *, clear: B | None = None) -> list[Event]:
        """Raise every entity ``flagged`` that was healthy; clear every raised one that ``clear`` says is well again
        (default: every raised one no longer ``flagged``).  Return the events."""
        if self.on.size != flagged.size:
            self.on = np.zeros(flagged.size, bool)
            self.onset = np.zeros(flagged.size, np.int64)
        ends = (self.on & ~flagged) if clear is None else (self.on & clear & ~flagged)
        starts = flagged & ~self.on
        events = [Event(tick, self.entity, int(i), HEALTHY, self.after, (reason,), tick)
                  for i in np.flatnonzero(starts)]
        events += [Event(tick, self.entity, int(i), self.after, HEALTHY, (reason,), int(self.onset[i]))
                   for i in np.flatnonzero(ends)]
        self.onset[starts] = tick
        self.on = (self.on | starts) & ~ends
        return events


def node_mean(values: npt.NDArray[np.floating], node_of: npt.NDArray[np.int64], n_nodes: int) -> F64:
    """Return, per node, the mean of ``values`` over its entities that are known (NaN for a node with none)."""
    v = np.asarray(values, dtype=np.float64)
    known = np.isfinite(v)
    count = np.bincount(node_of[known], minlength=n_nodes).astype(np.float64)
    total = np.bincount(node_of[known], weights=v[known], minlength=n_nodes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1.0), np.nan)
