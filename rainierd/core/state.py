"""The monitor's picture of the fleet: for every chip, link, EFA port, node and
site, its latest record and the one before it, as numpy arrays updated in place.

Keeping the previous record beside the current one is what lets the core turn
counters into rates (FLOP/s, errors/s) without any per-entity history object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rainierd.topology import Topology
from rainierd.wire.records import CHIP_DTYPE, COOLING_DTYPE, EFA_DTYPE, FACILITY_DTYPE, LINK_DTYPE

__all__ = ["EntityTable", "FleetState", "concat_records"]


@dataclass(eq=False)
class EntityTable:
    """Latest and previous records of one kind of entity, indexed by id."""

    cur: npt.NDArray[np.void]
    prev: npt.NDArray[np.void]
    t_s: npt.NDArray[np.float64]
    prev_t_s: npt.NDArray[np.float64]
    tick: npt.NDArray[np.int64]

    @classmethod
    def empty(cls, n: int, dtype: np.dtype[np.void]) -> EntityTable:
        """Return a table of ``n`` entities that have never reported."""
        return cls(
            np.zeros(n, dtype), np.zeros(n, dtype),
            np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int64),
        )

    def scatter(
        self,
        ids: npt.NDArray[np.int64],
        records: npt.NDArray[np.void],
        t_s: npt.NDArray[np.float64],
        tick: npt.NDArray[np.int64],
    ) -> None:
        """Store ``records`` as the latest of ``ids``; ids must be unique."""
        # Copying records as rows of raw bytes is several times faster than
        # numpy's field-by-field copy of structured arrays.
        cur, prev = _rows(self.cur), _rows(self.prev)
        prev[ids] = cur[ids]
        self.prev_t_s[ids] = self.t_s[ids]
        cur[ids] = _rows(np.ascontiguousarray(records, dtype=self.cur.dtype))
        self.t_s[ids] = t_s
        self.tick[ids] = tick

    def reported(self) -> npt.NDArray[np.bool_]:
        """Return which entities have reported at least once."""
        return self.tick >= 0


def _rows(records: npt.NDArray[np.void]) -> npt.NDArray[np.uint8]:
    return records.view(np.uint8).reshape(records.size, records.dtype.itemsize)


def concat_records(parts: list[npt.NDArray[np.void]], dtype: np.dtype[np.void]) -> npt.NDArray[np.void]:
    """Return the records of ``parts`` in one array (fast for many small parts)."""
    # np.concatenate promotes structured dtypes field by field for every part;
    # as opaque void items the same join is a plain copy.
    void = np.dtype((np.void, dtype.itemsize))
    if not parts:
        return np.zeros(0, dtype)
    joined = np.concatenate([np.ascontiguousarray(p, dtype=dtype).view(void) for p in parts])
    return joined.view(dtype)


@dataclass(eq=False)
class FleetState:
    """All entity tables of a fleet, sized by its topology."""

    topology: Topology
    chips: EntityTable = field(init=False)
    links: EntityTable = field(init=False)
    efa: EntityTable = field(init=False)
    cooling: EntityTable = field(init=False)
    facility: EntityTable = field(init=False)
    latest_tick: int = -1  # newest telemetry tick applied
    latest_t_s: float = float("nan")  # its sample time
    # The tick the monitor believes it is: it runs ahead of latest_tick when
    # telemetry stops arriving, so silence still makes chips stale.
    clock_tick: int = -1

    @property
    def now_tick(self) -> int:
        """Return the tick staleness is judged against."""
        return max(self.latest_tick, self.clock_tick)

    def stale_chips(self, stale_after_ticks: int) -> npt.NDArray[np.bool_]:
        """Return chips that reported once but not in the last ``stale_after_ticks`` ticks."""
        ticks = self.chips.tick
        return (ticks >= 0) & (self.now_tick - ticks >= stale_after_ticks)

    def __post_init__(self) -> None:
        topo = self.topology
        self.chips = EntityTable.empty(topo.n_chips, CHIP_DTYPE)
        self.links = EntityTable.empty(topo.n_links, LINK_DTYPE)
        self.efa = EntityTable.empty(topo.n_efa, EFA_DTYPE)
        self.cooling = EntityTable.empty(topo.n_nodes, COOLING_DTYPE)
        self.facility = EntityTable.empty(topo.n_sites, FACILITY_DTYPE)
