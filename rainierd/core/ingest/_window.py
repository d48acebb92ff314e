"""The window join: a window's frames as one set of columns, whatever frames
they came in.

Node frames and batches are joined column by column into one ``Window`` with
one entry per node frame (a node frame is a batch of one), so every rule and
every store runs as a fixed number of numpy passes however many frames the
window holds.  A window's facility frames are joined the same way, one entry
per site frame, so the same rules judge them.  Each entry also carries what its
topic claims (site, UltraServer, node): a rule compares the claim with the
frame.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd import native
from rainierd._types import F64, I64, B
from rainierd.core.ingest._values import Received
from rainierd.core.state import Scratch
from rainierd.errors import FrameError
from rainierd.wire import (
    COUNT_DTYPES,
    ENTRY_DTYPES,
    FACILITY_DTYPE,
    ID_FIELDS,
    MAX_NODE_COUNTS,
    RECORD_DTYPES,
    RECORD_KINDS,
    BatchLayout,
    FacilityFrame,
    NodeBatch,
    NodeFrame,
    RawBatch,
    check_known,
    column_dtypes,
)

COLUMNS: Final = {kind: column_dtypes(dtype) for kind, dtype in (*RECORD_DTYPES.items(), ("facility", FACILITY_DTYPE))}
"""Every record kind's columns and their dtypes (node kinds, and a site's ``facility``)."""
_ALL_FIELDS: Final = {kind: (1 << len(columns)) - 1 for kind, columns in COLUMNS.items()}


@dataclass(eq=False)
class Window:
    """A window's frames of one family (node frames, or site frames), joined: one entry per frame.

    ``entity`` is the node (or the site) a frame is about; records are by kind,
    ``counts[kind][i]`` of them for entry ``i``, consecutive in entry order.
    """

    entity: I64
    seq: npt.NDArray[np.uint64]
    tick: npt.NDArray[np.uint64]
    t_s: F64
    rx_s: F64
    rx_wall_s: F64
    shed: F64  # frames of its stream the monitor refused before decoding since the last it kept (Message.shed)
    period_s: F64  # the report period the frame declares (a JSON node frame's ``period_s``; NaN: none)
    part: I64  # the received frame (message) each entry came in
    publishers: list[str]  # the publisher ids the entries name (each part's, and an aggregator's table)
    publisher: I64  # each entry's publisher, an index into ``publishers``
    topic_fits: B  # the topic is of the frame's family (and a batch's names the batch's site)
    want_site: I64  # the site the topic names (-1: no topic)
    want_ultraserver: I64  # the UltraServer a node topic names (-1: none)
    want_node: I64  # the node a node topic names (-1: a batch or no topic)
    want_bucket: I64  # the bucket the topic names (-1: none, or the bucket-less layout)
    counts: dict[str, I64]
    columns: dict[str, Mapping[str, npt.NDArray[Any]]]  # a node window's are ``Columns``: read each once
    known: dict[str, npt.NDArray[np.uint16] | int]
    # Kinds whose records are every frame's whole complement, in id order (found by the rules).
    complete: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        return int(self.entity.size)


def as_batch(frame: NodeFrame) -> NodeBatch:
    """Return a node frame as a batch of one (its record fields as columns)."""
    records = {"chips": frame.chips, "links": frame.links, "efa": frame.efa, "cooling": frame.cooling}
    return NodeBatch(
        frame.publisher, frame.seq, frame.tick, frame.t_s, -1,
        np.array([frame.node], np.uint32), np.array([frame.seq], np.uint64), np.array([frame.tick], np.uint64),
        np.array([frame.t_s], np.float64),
        {kind: np.array([len(records[kind])], np.uint16) for kind in RECORD_KINDS},
        # A binary node frame's records lack the fields added since its layout was fixed: those are unknown.
        {kind: {name: records[kind][name] for name in COLUMNS[kind] if name in (records[kind].dtype.names or ())}
         for kind in RECORD_KINDS},
        known=frame.known,
    )


def _claims(item: Received) -> tuple[bool, int, int, int, int]:
    """Return what a node frame's topic claims: (fits its family, site, UltraServer, node, bucket), -1 for none."""
    address, frame = item.address, item.frame
    if address is None:
        return True, -1, -1, -1, -1
    if isinstance(frame, NodeBatch | RawBatch):
        return address.kind == "batch" and address.site == frame.site, address.site, -1, -1, address.bucket
    return address.kind == "node", address.site, address.ultraserver, address.node, address.bucket


_Part = NodeBatch | RawBatch


def _wire_dtype(group: str, name: str) -> np.dtype[Any]:
    if group == "node":
        return ENTRY_DTYPES[name]
    if group == "counts":
        return COUNT_DTYPES[name]
    return COLUMNS[group][name]


class _Parts:
    """A window's node frames and batches, each a part, and how to read one column of all of them at once.

    A batch still in its payload (``RawBatch``) gives each column as a span
    of the payload's bytes, found in its layout; batches of one shape share
    a layout, so a column's spans are looked up once a shape, not once a
    batch.  A window of such batches (every fleet's, at scale) has each
    column copied by one compiled pass from the payloads (``rainierd.native``):
    into one array in arrival order (``read``), or straight into node order
    (``scatter``).  A column joined from ~1,300 messages cost ~0.9 us of
    Python a message in numpy's join (issue 39); issue 20 had already stopped
    decoding ~40 column views a batch.  A window holding decoded frames (JSON
    node frames, and binary node frames, as batches of one) gives typed
    arrays, joined by numpy: a handful of values a frame, where a compiled
    call's set-up per frame cost more than the copy (the unit tier's small
    fleets of decoded frames ran 23 % slower through the kernels).
    """

    def __init__(self, items: Sequence[Received]) -> None:
        self.items = items
        self.batches: list[_Part] = [
            item.frame if isinstance(item.frame, NodeBatch | RawBatch) else as_batch(item.frame)  # type: ignore[arg-type]
            for item in items
        ]
        self.raw = all(isinstance(b, RawBatch) for b in self.batches)
        self._entries = [b.n_nodes for b in self.batches]  # read by every column scattered: listed once
        layouts: dict[int, int] = {}
        self._layouts: list[BatchLayout] = []
        layout_of = []
        for b in self.batches:
            if isinstance(b, RawBatch):
                at = layouts.setdefault(id(b.head.layout), len(layouts))
                if at == len(self._layouts):
                    self._layouts.append(b.head.layout)
                layout_of.append(at)
            else:
                layout_of.append(-1)
        self._layout_of = np.array(layout_of, np.int64)
        # The payloads' addresses, for the compiled passes; ``_held`` keeps them valid.
        self._base, self._held = native.addresses([b.payload for b in self.batches if isinstance(b, RawBatch)]
                                                  if self.raw else [])

    def entries(self) -> list[int]:
        """Return each part's node entries."""
        return self._entries

    def records(self, kind: str) -> list[int]:
        """Return each part's records of ``kind`` (a raw batch's header total: its counts are checked first)."""
        at = RECORD_KINDS.index(kind)
        return [b.head.totals[at] if isinstance(b, RawBatch) else int(b.counts[kind].sum()) for b in self.batches]

    def present(self, kind: str) -> list[int]:
        """Return each part's field mask of ``kind`` (bit i: the kind's i-th column is in it)."""
        at = RECORD_KINDS.index(kind)
        return [b.head.masks[at] if isinstance(b, RawBatch)
                else sum(1 << i for i, name in enumerate(COLUMNS[kind]) if name in b.columns[kind])
                for b in self.batches]

    def read(self, group: str, name: str, sizes: list[int], out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Fill ``out`` (the column's wire dtype) with column ``name`` of ``group`` of every part in order (zeros
        where a part lacks it); ``sizes`` is each part's element count, ``out`` their sum."""
        dtype = self._dtype(group, name, out)
        if self.raw:
            nbytes = np.asarray(sizes, np.int64) * dtype.itemsize
            native.join(self._base, self._starts(group, name, nbytes), nbytes, out)
            return out
        typed = [self._typed(batch, group, name, size, dtype) for batch, size in zip(self.batches, sizes, strict=True)]
        if typed:
            np.concatenate(typed, out=out, casting="same_kind")
        return out

    def scatter(self, group: str, name: str, entries: list[int], row: I64, out: npt.NDArray[Any]) -> None:
        """Write column ``name`` of ``group`` into the rows of ``out`` (2-D, the column's wire dtype): the
        window's ``e``-th entry's records (``out``'s row length of them) to ``out[row[e]]``; ``entries`` is
        each part's entry count."""
        dtype = self._dtype(group, name, out)
        if self.raw:
            counts = np.asarray(entries, np.int64)
            starts = self._starts(group, name, counts * out.shape[1] * dtype.itemsize)
            native.scatter_rows(self._base, starts, counts, row, out)
            return
        joined = self.read(group, name, [n * out.shape[1] for n in entries], np.empty(out.size, dtype))
        out[row] = joined.reshape(out.shape)

    @staticmethod
    def _dtype(group: str, name: str, out: npt.NDArray[Any]) -> np.dtype[Any]:
        dtype = _wire_dtype(group, name)
        if out.dtype != dtype:
            raise TypeError(f"column {group}.{name} is {dtype}, read into {out.dtype}")
        return dtype

    def _starts(self, group: str, name: str, nbytes: I64) -> I64:
        """Return where column ``name`` of ``group`` starts in each raw part's payload (-1: the part lacks it),
        having checked that each part's span is ``nbytes`` long: the compiled passes read what they are told
        to, so a span is never taken for longer than its layout (within the payload, which decoding checked)."""
        spans = np.array([layout.spans.get((group, name), (-1, -1)) for layout in self._layouts], np.int64)
        spans = spans.reshape(-1, 2)[self._layout_of]
        held = spans[:, 0] >= 0
        if not np.array_equal(spans[held, 1] - spans[held, 0], nbytes[held]):
            raise ValueError(f"column {group}.{name}: a batch's span is not the size its entries need")
        start: I64 = spans[:, 0]
        return start

    @staticmethod
    def _typed(batch: _Part, group: str, name: str, size: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        if isinstance(batch, RawBatch):
            span = batch.head.layout.spans.get((group, name))
            if span is None:
                return np.zeros(size, dtype)
            return np.frombuffer(batch.payload, dtype, count=size, offset=span[0])
        if group == "node":
            values: npt.NDArray[Any] = getattr(batch, name)
            return values
        if group == "counts":
            return batch.counts[name]
        column = batch.columns[group].get(name)
        return np.zeros(size, dtype) if column is None else column


class Columns(Mapping[str, npt.NDArray[Any]]):
    """One record kind's columns of a node window, each joined from the parts when it is read.

    The id column is joined once and kept: the rules read it more than once.
    Every other column is joined into one buffer per item size as it is read,
    valid until the next column of its item size is: the rules (``non_finite``)
    and the store (``Table.apply``) each read a column and are done with it,
    so the window never holds all its columns at once.  At a million chips
    they were 223 MiB of the monitor's peak; the buffers are 38 MiB.
    """

    def __init__(self, parts: _Parts, kind: str, sizes: list[int], scratch: Scratch) -> None:
        self._parts, self._kind, self._sizes, self._scratch = parts, kind, sizes, scratch
        self._dtypes = COLUMNS[kind]
        self._kept: dict[str, npt.NDArray[Any]] = {}
        if (name := ID_FIELDS.get(kind)) is not None:
            self._kept[name] = parts.read(kind, name, sizes, scratch.get(f"{kind}.{name}", sum(sizes),
                                                                          self._dtypes[name]))

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        if name in self._kept:
            return self._kept[name]
        dtype = self._dtypes[name]
        return self._parts.read(self._kind, name, self._sizes,
                                self._scratch.shared("column", sum(self._sizes), dtype))

    @property
    def kind(self) -> str:
        """Return the record kind whose columns these are."""
        return self._kind

    def of_parts(self, parts: Sequence[int], scratch: Scratch) -> Columns:
        """Return these columns for the window's ``parts`` alone (ascending), joined into ``scratch``'s buffers:
        the records of those parts' entries, in entry order, with no column of the others read."""
        sub = _Parts([self._parts.items[p] for p in parts])
        return Columns(sub, self._kind, [self._sizes[p] for p in parts], scratch)

    def scatter(self, name: str, row: I64, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Write column ``name`` into the rows of ``out`` (2-D, a row an entry's records), the window's ``e``-th
        entry's to ``out[row[e]]``, straight from the parts: the join and a reorder in one pass."""
        self._parts.scatter(self._kind, name, self._parts.entries(), row, out)
        return out

    def __contains__(self, name: object) -> bool:
        return name in self._dtypes  # Mapping's own would join the column to find it

    def __iter__(self) -> Iterator[str]:
        return iter(self._dtypes)

    def __len__(self) -> int:
        return len(self._dtypes)


def counted(items: Sequence[Received], scratch: Scratch) -> tuple[list[Received], int]:
    """Return the items whose per-node record counts add up to their headers' totals, and how many did not.

    Only a ``RawBatch``'s counts (and per-record known bits) are unchecked
    (``decode_binary(columns=False)``); one that does not add up, names more
    records for a node than a node may carry, or whose known bits name a
    column it lacks or leave a record's id unknown, is a ``bad_header`` message, refused whole before any of its
    entries is joined.  Checked for every raw batch of the window at once.
    """
    raw = [item for item in items if isinstance(item.frame, RawBatch)]
    if not raw:
        return list(items), 0
    parts = _Parts(raw)
    sizes = parts.entries()
    part = np.repeat(np.arange(len(raw)), sizes)
    bad = np.zeros(len(raw), dtype=bool)
    for kind in RECORD_KINDS:
        counts = parts.read("counts", kind, sizes, scratch.get(f"check.{kind}", sum(sizes), COUNT_DTYPES[kind]))
        totals = np.array(parts.records(kind), np.int64)
        sums = np.bincount(part, weights=counts, minlength=len(raw))  # float64: exact below 2**53
        over = np.bincount(part, weights=counts > MAX_NODE_COUNTS[kind], minlength=len(raw))
        bad |= (sums != totals) | (over > 0)
    for at, item in enumerate(raw):  # per message, not per record: each batch's known bits in one pass a kind
        batch: RawBatch = item.frame  # type: ignore[assignment]
        for kind, mask in zip(RECORD_KINDS, batch.head.masks, strict=True):
            known = batch.known(kind)
            if known is None:
                break
            try:
                check_known(kind, known, mask)
            except FrameError:
                bad[at] = True
                break
    if not bad.any():
        return list(items), 0
    refused = {id(item) for item, b in zip(raw, bad.tolist(), strict=True) if b}
    return [item for item in items if id(item) not in refused], len(refused)


def join_nodes(items: Sequence[Received], scratch: Scratch) -> Window:
    """Join the node frames and batches of a window column by column.

    A ``RawBatch``'s counts must have been checked (``counted``).  The
    entries, counts and ids are joined here and live in ``scratch`` until its
    next join; the other record columns are joined as they are read (``Columns``).
    """
    parts = _Parts(items)
    sizes = parts.entries()
    total_entries = sum(sizes)

    def per_part(values: list[int] | list[float] | list[bool], dtype: Any) -> npt.NDArray[Any]:
        return np.repeat(np.asarray(values, dtype=dtype), sizes)

    def entry(group: str, name: str, dtype: Any) -> npt.NDArray[Any]:
        wire = _wire_dtype(group, name)
        out = scratch.get(f"{group}.{name}", total_entries, dtype)
        if wire == out.dtype:
            return parts.read(group, name, sizes, out)
        # Widened from its wire dtype (ids and counts to int64): read the bytes, then cast.
        out[:] = parts.read(group, name, sizes, scratch.get(f"wire.{group}.{name}", total_entries, wire))
        return out

    claims = [_claims(item) for item in items]
    part = per_part(list(range(len(items))), np.int64)
    publishers, publisher = [b.publisher for b in parts.batches], part
    if any(b.node_publisher is not None for b in parts.batches):  # an aggregator's batch: each entry its own
        publishers, slots = [], []
        for b in parts.batches:
            named = b.node_publisher
            if named is None:
                slots.append(np.full(b.n_nodes, len(publishers), np.int64))
                publishers.append(b.publisher)
            else:
                slots.append(named.astype(np.int64) + len(publishers))
                publishers += b.publishers
        publisher = np.concatenate(slots) if slots else part
    columns: dict[str, Mapping[str, npt.NDArray[Any]]] = {}
    known: dict[str, npt.NDArray[np.uint16] | int] = {}
    counts = {kind: entry("counts", kind, np.int64) for kind in RECORD_KINDS}
    for kind in RECORD_KINDS:
        records = parts.records(kind)
        total = sum(records)
        have = parts.present(kind)
        columns[kind] = Columns(parts, kind, records, scratch)
        full = _ALL_FIELDS[kind]
        per_record = [b.known(kind) if isinstance(b, RawBatch)
                      else b.known.get(kind) if b.known else None for b in parts.batches]
        if all(r is None for r in per_record) and all(h == have[0] for h in have[1:]):
            # Every part carries the same columns and no record says more: one mask for the whole window, so
            # the store tests a bit a column instead of a fleet-sized array a column (the simulator's batches
            # lack every field added to a record since the binary node frame's layout was fixed).
            known[kind] = have[0] if have else full
        else:
            masks: list[npt.NDArray[Any]] = [
                np.full(n, h, np.uint16) if r is None else (r & np.uint16(h))
                for n, h, r in zip(records, have, per_record, strict=True)
            ]
            out = scratch.get(f"known.{kind}", total, np.uint16)
            if masks:
                np.concatenate(masks, out=out, casting="same_kind")
            known[kind] = out
    return Window(
        entity=entry("node", "node", np.int64),
        seq=entry("node", "node_seq", np.uint64),
        tick=entry("node", "node_tick", np.uint64),
        t_s=entry("node", "node_t_s", np.float64),
        rx_s=per_part([item.rx_s for item in items], np.float64),
        rx_wall_s=per_part([item.rx_wall_s for item in items], np.float64),
        shed=per_part([item.shed for item in items], np.float64),
        # Only a node frame declares its period; a batch's entries have none (their period is learned).
        period_s=per_part([item.frame.period_s if isinstance(item.frame, NodeFrame) else np.nan for item in items],
                          np.float64),
        part=part,
        publishers=publishers,
        publisher=publisher,
        topic_fits=per_part([c[0] for c in claims], bool),
        want_site=per_part([c[1] for c in claims], np.int64),
        want_ultraserver=per_part([c[2] for c in claims], np.int64),
        want_node=per_part([c[3] for c in claims], np.int64),
        want_bucket=per_part([c[4] for c in claims], np.int64),
        counts=counts, columns=columns, known=known,
    )


def join_sites(items: Sequence[Received]) -> Window:
    """Join a window's facility frames (a handful): one entry per frame, its records under ``facility``."""
    frames: list[FacilityFrame] = [item.frame for item in items]  # type: ignore[misc]
    addresses = [item.address for item in items]
    records = [frame.facility for frame in frames]
    return Window(
        entity=np.array([frame.site for frame in frames], np.int64),
        seq=np.array([frame.seq for frame in frames], np.uint64),
        tick=np.array([frame.tick for frame in frames], np.uint64),
        t_s=np.array([frame.t_s for frame in frames], np.float64),
        rx_s=np.array([item.rx_s for item in items], np.float64),
        rx_wall_s=np.array([item.rx_wall_s for item in items], np.float64),
        shed=np.array([item.shed for item in items], np.float64),
        period_s=np.full(len(items), np.nan),  # learned from the site's cadence
        part=np.arange(len(items), dtype=np.int64),
        publishers=[frame.publisher for frame in frames],
        publisher=np.arange(len(items), dtype=np.int64),
        topic_fits=np.array([a is None or a.is_facility for a in addresses], bool),
        want_site=np.array([-1 if a is None else a.site for a in addresses], np.int64),
        want_ultraserver=np.full(len(items), -1, np.int64),
        want_node=np.full(len(items), -1, np.int64),
        want_bucket=np.full(len(items), -1, np.int64),
        counts={"facility": np.array([len(r) for r in records], np.int64)},
        columns={"facility": {name: np.concatenate([r[name] for r in records]) if records
                              else np.zeros(0, dtype) for name, dtype in COLUMNS["facility"].items()}},
        known={"facility": _ALL_FIELDS["facility"]},
    )
