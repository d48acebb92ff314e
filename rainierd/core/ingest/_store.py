"""The store: a window's good records into the fleet state's tables.

Only frames that passed every rule and their stream's accounting get here,
one frame a node at a time (a generation), so each table sees at most one
sample per entity per store.  The usual window (every node's whole
complement, in id order) is stored through slices, with no id arrays at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd._types import I64
from rainierd.core.ingest._window import COLUMNS, Columns, Window
from rainierd.core.state import FleetState, Scratch, Table
from rainierd.wire import ID_FIELDS, RECORD_KINDS, FacilityFrame


class Store:
    """Stores records in one fleet state's tables, reusing its work arrays from one window to the next."""

    def __init__(self, state: FleetState) -> None:
        self.state = state
        self._scratch = Scratch()
        self._apply_scratch = Scratch()
        self._parts_scratch = Scratch()  # a generation's columns, read from its messages alone

    def forget_rates(self, nodes: I64) -> None:
        """Make the counter rates of ``nodes``' entities unknown: their publisher counts from a new start."""
        topo = self.state.topology
        per_node = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node,
                    "cooling": 1}
        for kind, table in self.state.tables().items():
            per = per_node[kind]
            table.forget_rates((nodes[:, None] * per + np.arange(per)).ravel())

    def nodes(self, w: Window, frames: I64, samples: Counter[str], refused: Counter[tuple[str, str, str]]) -> None:
        """Store the records of ``frames`` (good, one per node) in the state tables; count them in ``samples``,
        and the counters refused over their bounds in ``refused`` by (kind, field, reason)."""
        if not frames.size:
            return
        tables = self.state.tables()
        everything = frames.size == w.size
        node = w.entity
        # Consecutive ascending nodes (an aggregator's batches, in order), or the same nodes in another order:
        # the simulator's batches hold one topic bucket each (every 256th UltraServer of a site), so a whole
        # fleet's window is a permutation of one run.  Its records are put in node order once, column by column,
        # and stored through slices: at rainier, indexing 1.5M links' counters by id array instead (a gather
        # and two scatters a column) cost ~0.1 s a tick.
        run = everything and bool(w.size) and int(node[-1]) - int(node[0]) == w.size - 1 and bool(
            (np.diff(node) == 1).all())
        order: I64 | None = None
        if everything and not run and w.size > 1 and int(node.max()) - int(node.min()) == w.size - 1:
            order = np.argsort(node)  # unique nodes (one generation) spanning exactly w.size ids
        row = np.zeros(0, np.int64) if order is None else _rows(order)  # one inverse for every kind
        if not everything:
            chosen = np.zeros(w.size, dtype=bool)
            chosen[frames] = True
            parts = _whole_parts(w, frames)
        for kind in RECORD_KINDS:
            counts = w.counts[kind]
            columns = w.columns[kind]
            known = w.known[kind]
            id_field = ID_FIELDS[kind]
            table: Table = tables[kind]
            if everything and kind in w.complete and (run or order is not None):
                # The usual window: consecutive nodes, each with its whole
                # complement in order, so the records are one run of ids.
                per = int(counts[0])
                first = int(node.min()) * per
                t_s, rx_s = w.t_s, w.rx_s
                if order is not None:
                    assert isinstance(columns, Columns)  # a node window's (join_nodes)
                    columns = _InOrder(columns, per, row, self._scratch)
                    if not isinstance(known, int):
                        known = _in_order(known, per, order, self._scratch.get(f"known.{kind}", known.size,
                                                                               known.dtype))
                    t_s, rx_s = t_s[order], rx_s[order]
                _count(kind, table.apply(slice(first, first + w.size * per), columns, t_s=t_s, rx_s=rx_s,
                                         known=known, scratch=self._apply_scratch, per_frame=per), refused)
                samples[kind] += w.size * per
                continue
            if everything:
                if not counts.any():
                    continue
                ids = columns[id_field].astype(np.int64) if id_field else np.repeat(node, counts)
                t_s, rx_s = np.repeat(w.t_s, counts), np.repeat(w.rx_s, counts)
            else:
                frame_of = np.repeat(np.arange(w.size), counts)
                take = chosen[frame_of]
                if not take.any():
                    continue
                frame_of = frame_of[take]
                columns = (columns.of_parts(parts, self._parts_scratch)
                           if parts is not None and isinstance(columns, Columns)
                           else {name: values[take] for name, values in columns.items()})
                if not isinstance(known, int):
                    known = known[take]
                ids = columns[id_field].astype(np.int64) if id_field else node[frame_of]
                t_s, rx_s = w.t_s[frame_of], w.rx_s[frame_of]
            _count(kind, table.apply(ids, columns, t_s=t_s, rx_s=rx_s, known=known, scratch=self._apply_scratch),
                   refused)
            samples[kind] += int(ids.size)

    def site(self, frame: FacilityFrame, rx_s: float, *, rebased: bool, refused: Counter[tuple[str, str, str]]) -> None:
        """Store one site's facility record; a rebased stream's counter rates start again; count the counters
        refused over their bounds in ``refused``."""
        site = np.array([frame.site], np.int64)
        record = frame.facility
        _count("facility", self.state.facility.apply(
            site, {name: record[name] for name in record.dtype.names or ()},
            t_s=np.array([frame.t_s]), rx_s=np.array([rx_s]), known=(1 << len(record.dtype.names or ())) - 1,
        ), refused)
        if rebased:
            self.state.facility.forget_rates(site)


def _count(kind: str, table_refused: Counter[tuple[str, str]], refused: Counter[tuple[str, str, str]]) -> None:
    """Add a table's refusals, by (field, reason), to ``refused`` under its record ``kind``."""
    for (name, reason), count in table_refused.items():
        refused[kind, name, reason] += count


def _whole_parts(w: Window, frames: I64) -> list[int] | None:
    """Return the messages ``frames`` come in if they are every entry of those messages, else None.

    A window holding two ticks of the same batches is a generation a tick, each of whole messages: their
    columns are then read from those messages alone, not joined for the whole window and then filtered,
    once a generation (a monitor behind its input did twice the work a tick, and fell further behind).
    """
    parts = np.unique(w.part[frames])
    entries = np.bincount(w.part, minlength=int(w.part.max(initial=-1)) + 1)
    return parts.tolist() if int(entries[parts].sum()) == frames.size else None


def _rows(order: I64) -> I64:
    """Return the row each entry goes to when entries are put in ``order`` (its inverse permutation)."""
    row = np.empty_like(order)
    row[order] = np.arange(order.size)
    return row


def _in_order(values: npt.NDArray[Any], per: int, order: I64, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return ``values`` (``per`` records a frame) with its frames in ``order``, written to ``out``."""
    np.take(values.reshape(-1, per), order, axis=0, out=out.reshape(-1, per))
    return out


class _InOrder(Mapping[str, npt.NDArray[Any]]):
    """A kind's window columns with their frames put in node order as each is read, all in one buffer per item size.

    ``Table.apply`` reads each column once and is done with it before it reads
    the next, so a column needs to be in order only while it is stored: at a
    million chips, one reordered copy of every column at once was 217 MiB of
    the monitor's peak; one buffer per item size is 38 MiB.  Each column goes
    from the messages straight to its place in node order (``Columns.scatter``),
    not joined and then reordered.  A column read from here is valid until the
    next column of its item size is.
    """

    def __init__(self, columns: Columns, per: int, row: I64, scratch: Scratch) -> None:
        self._columns, self._per, self._row, self._scratch = columns, per, row, scratch  # entry e to row row[e]

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        dtype = COLUMNS[self._columns.kind][name]
        out = self._scratch.shared("ordered", self._row.size * self._per, dtype)
        return self._columns.scatter(name, self._row, out.reshape(-1, self._per)).reshape(-1)

    def into(self, name: str, out: npt.NDArray[Any]) -> bool:
        """Write column ``name`` in node order straight into ``out`` (the table's own, a run of whole frames'
        records, contiguous) if it is the column's wire dtype, with no buffer between; else write nothing and
        return False (the column is read from here, and cast where it is stored)."""
        if out.dtype != COLUMNS[self._columns.kind][name] or not out.flags.c_contiguous \
                or out.size != self._row.size * self._per:
            return False
        self._columns.scatter(name, self._row, out.reshape(-1, self._per))
        return True

    def __contains__(self, name: object) -> bool:
        return name in self._columns  # Mapping's own would put the column in order to find it

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)
