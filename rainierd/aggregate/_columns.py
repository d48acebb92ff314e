"""A batch's columns made from its entries' records: the part of a tick
whose work grows with the records, kept apart from the judging and grouping
of messages (``_batcher``).

A chunk of binary node frames of one shape (the same publisher length and
record counts: a fleet's nodes, tick after tick) is read as one numpy array
of whole frames, each frame a row: its header fields and each kind's records
are fields of that row, so every column is one strided copy, and nothing is
done per entry in Python.  Joining each kind's record blocks entry by entry,
and the node columns by ``np.fromiter``, cost 2.3 µs a frame (issue 39).
Any other chunk (JSON frames, frames of mixed shapes) is joined block by
block.  Both read the same bytes in the same layout, so a batch is byte for
byte the same whichever way its columns were made.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from rainierd.wire import NODE_FRAME_DTYPES, RECORD_DTYPES, RECORD_KINDS, node_frame_dtype

_COLUMNS: Final = {kind: RECORD_DTYPES[kind].names or () for kind in RECORD_KINDS}
_SIZES: Final = {binary: tuple((NODE_FRAME_DTYPES if binary else RECORD_DTYPES)[kind].itemsize
                               for kind in RECORD_KINDS) for binary in (False, True)}


# Where a binary node frame's header holds each entry column (``node_frame_dtype`` names HEADER's fields).
_HEADER_FIELDS: Final[Mapping[str, tuple[np.dtype[Any], int]]] = {
    name: (field[0], field[1]) for name, field in (node_frame_dtype(0, 0, 0, 0).fields or {}).items()}
_HEAD: Final = tuple((column, _HEADER_FIELDS[field][0], _HEADER_FIELDS[field][1]) for column, field in (
    ("node_seq", "seq"), ("node_tick", "tick"), ("node_t_s", "t_s"), ("node", "entity")))


class Entry(NamedTuple):
    """One node frame as the batcher moves it: its header, and its records of each kind packed one kind after
    another in ``records`` from ``offset`` on (a binary frame's payload itself; a JSON frame's, re-packed).

    A named tuple made with ``tuple.__new__`` (``new_entry``): a frozen
    dataclass cost 1.9 µs a frame to make, a tenth of the tick's work.
    """

    node: int
    publisher: str
    seq: int
    tick: int
    t_s: float
    counts: tuple[int, ...]
    records: bytes
    offset: int
    masks: tuple[int, ...]  # the fields every record of each kind carries
    binary: bool  # records in a binary node frame's layout (NODE_FRAME_DTYPES), else RECORD_DTYPES'
    size: int  # about how many bytes the entry adds to a batch


new_entry: Final = tuple.__new__


class Columns(NamedTuple):
    """A batch's entry columns, its record counts per kind, and each kind's record columns."""

    node: npt.NDArray[np.uint32]
    seq: npt.NDArray[np.uint64]
    tick: npt.NDArray[np.uint64]
    t_s: npt.NDArray[np.float64]
    counts: dict[str, npt.NDArray[np.uint16]]
    columns: dict[str, dict[str, npt.NDArray[Any]]]


def columns_of(entries: Sequence[Entry], masks: tuple[int, ...], *, binary: bool) -> Columns:
    """Return the columns of ``entries`` (one group's: the same masks, all binary or all JSON), keeping of each
    kind the fields its mask names."""
    first = entries[0]
    shape = (first.offset, first.counts, len(first.records))
    if binary and all((e.offset, e.counts, len(e.records)) == shape for e in entries):
        return _as_rows(entries, masks, shape)
    return _by_block(entries, masks, binary=binary)


@functools.lru_cache(maxsize=64)
def _frame_dtype(offset: int, counts: tuple[int, ...], size: int) -> np.dtype[np.void]:
    """Return a dtype whose item is one whole binary node frame of this shape: its header's entry fields, and
    each kind's records as a field of ``count`` records."""
    names, formats, offsets = [], [], []
    for name, dtype, at in _HEAD:
        names.append(name)
        formats.append(dtype)
        offsets.append(at)
    at = offset
    for kind, count in zip(RECORD_KINDS, counts, strict=True):
        layout = NODE_FRAME_DTYPES[kind]
        names.append(kind)
        formats.append(np.dtype((layout, (count,))))
        offsets.append(at)
        at += count * layout.itemsize
    assert at == size, (at, size)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


def _as_rows(entries: Sequence[Entry], masks: tuple[int, ...], shape: tuple[int, tuple[int, ...], int]) -> Columns:
    offset, counts, size = shape
    n = len(entries)
    rows = np.frombuffer(b"".join([e.records for e in entries]), _frame_dtype(offset, counts, size))
    columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
    for kind, mask, count in zip(RECORD_KINDS, masks, counts, strict=True):
        records = rows[kind]
        columns[kind] = {name: records[name].reshape(n * count) for bit, name in enumerate(_COLUMNS[kind])
                         if mask >> bit & 1}
    return Columns(rows["node"].copy(), rows["node_seq"].copy(), rows["node_tick"].copy(), rows["node_t_s"].copy(),
                   {kind: np.full(n, count, np.uint16) for kind, count in zip(RECORD_KINDS, counts, strict=True)},
                   columns)


def _by_block(entries: Sequence[Entry], masks: tuple[int, ...], *, binary: bool) -> Columns:
    n = len(entries)
    sizes = _SIZES[binary]
    counts: dict[str, npt.NDArray[np.uint16]] = {}
    columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
    starts = [e.offset for e in entries]
    for k, (kind, mask) in enumerate(zip(RECORD_KINDS, masks, strict=True)):
        counts[kind] = np.fromiter((e.counts[k] for e in entries), np.uint16, n)
        blocks = []
        for i, e in enumerate(entries):
            end = starts[i] + e.counts[k] * sizes[k]
            blocks.append(memoryview(e.records)[starts[i]:end])
            starts[i] = end
        layout = (NODE_FRAME_DTYPES if binary else RECORD_DTYPES)[kind]
        joined = np.frombuffer(b"".join(blocks), layout)
        columns[kind] = {name: joined[name] for bit, name in enumerate(_COLUMNS[kind]) if mask >> bit & 1}
    return Columns(np.fromiter((e.node for e in entries), np.uint32, n), np.fromiter((e.seq for e in entries),
                   np.uint64, n), np.fromiter((e.tick for e in entries), np.uint64, n),
                   np.fromiter((e.t_s for e in entries), np.float64, n), counts, columns)
