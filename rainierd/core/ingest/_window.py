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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64, B
from rainierd.core.ingest._values import Received
from rainierd.core.state import Scratch
from rainierd.wire.records import (
    FACILITY_DTYPE,
    RECORD_DTYPES,
    RECORD_KINDS,
    FacilityFrame,
    NodeBatch,
    NodeFrame,
    column_dtypes,
)

__all__ = ["COLUMNS", "Window", "as_batch", "join_nodes", "join_sites"]

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
    part: I64  # the received frame (message) each entry came in
    publishers: list[str]  # the publisher ids the entries name (each part's, and an aggregator's table)
    publisher: I64  # each entry's publisher, an index into ``publishers``
    topic_fits: B  # the topic is of the frame's family (and a batch's names the batch's site)
    want_site: I64  # the site the topic names (-1: no topic)
    want_ultraserver: I64  # the UltraServer a node topic names (-1: none)
    want_node: I64  # the node a node topic names (-1: a batch or no topic)
    want_bucket: I64  # the bucket the topic names (-1: none, or the bucket-less layout)
    counts: dict[str, I64]
    columns: dict[str, dict[str, npt.NDArray[Any]]]
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
        {kind: {name: records[kind][name] for name in COLUMNS[kind]} for kind in RECORD_KINDS},
        known=frame.known,
    )


def _claims(item: Received) -> tuple[bool, int, int, int, int]:
    """Return what a node frame's topic claims: (fits its family, site, UltraServer, node, bucket), -1 for none."""
    address, frame = item.address, item.frame
    if address is None:
        return True, -1, -1, -1, -1
    if isinstance(frame, NodeBatch):
        return address.kind == "batch" and address.site == frame.site, address.site, -1, -1, address.bucket
    return address.kind == "node", address.site, address.ultraserver, address.node, address.bucket


def join_nodes(items: Sequence[Received], scratch: Scratch) -> Window:
    """Join the node frames and batches of a window column by column (one copy of each column).

    The joined columns live in ``scratch`` until its next join.
    """
    parts = [(item, item.frame if isinstance(item.frame, NodeBatch) else as_batch(item.frame))  # type: ignore[arg-type]
             for item in items]

    def cat(arrays: list[npt.NDArray[Any]], dtype: Any, key: str) -> npt.NDArray[Any]:
        out = scratch.get(key, sum(a.size for a in arrays), dtype)
        if arrays:
            np.concatenate(arrays, out=out, casting="same_kind")
        return out

    sizes = [batch.n_nodes for _, batch in parts]

    def per_part(values: list[int] | list[float] | list[bool], dtype: Any) -> npt.NDArray[Any]:
        return np.repeat(np.asarray(values, dtype=dtype), sizes)

    claims = [_claims(item) for item, _ in parts]
    part = per_part(list(range(len(parts))), np.int64)
    publishers, publisher = [b.publisher for _, b in parts], part
    if any(b.node_publisher is not None for _, b in parts):  # an aggregator's batch: each entry its own
        publishers, slots = [], []
        for _, b in parts:
            if b.node_publisher is None:
                slots.append(np.full(b.n_nodes, len(publishers), np.int64))
                publishers.append(b.publisher)
            else:
                slots.append(b.node_publisher.astype(np.int64) + len(publishers))
                publishers += b.publishers
        publisher = np.concatenate(slots) if slots else part
    columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
    known: dict[str, npt.NDArray[np.uint16] | int] = {}
    counts = {kind: cat([b.counts[kind] for _, b in parts], np.int64, f"count.{kind}") for kind in RECORD_KINDS}
    for kind in RECORD_KINDS:
        have = [sum(1 << i for i, name in enumerate(COLUMNS[kind]) if name in b.columns[kind]) for _, b in parts]
        columns[kind] = {}
        for name, dtype in COLUMNS[kind].items():
            pieces = [batch.columns[kind].get(name) for _, batch in parts]
            if any(piece is None for piece in pieces):
                pieces = [np.zeros(int(batch.counts[kind].sum()), dtype) if piece is None else piece
                          for piece, (_, batch) in zip(pieces, parts, strict=True)]
            columns[kind][name] = cat(pieces, dtype, f"{kind}.{name}")  # type: ignore[arg-type]
        full = _ALL_FIELDS[kind]
        per_record = [b.known.get(kind) if b.known else None for _, b in parts]
        if all(h == full for h in have) and all(r is None for r in per_record):
            known[kind] = full
        else:
            masks: list[npt.NDArray[Any]] = [
                np.full(int(b.counts[kind].sum()), h, np.uint16) if r is None else (r & np.uint16(h))
                for (_, b), h, r in zip(parts, have, per_record, strict=True)
            ]
            known[kind] = cat(masks, np.uint16, f"known.{kind}")
    return Window(
        entity=cat([b.node for _, b in parts], np.int64, "node"),
        seq=cat([b.node_seq for _, b in parts], np.uint64, "seq"),
        tick=cat([b.node_tick for _, b in parts], np.uint64, "tick"),
        t_s=cat([b.node_t_s for _, b in parts], np.float64, "t_s"),
        rx_s=per_part([item.rx_s for item, _ in parts], np.float64),
        rx_wall_s=per_part([item.rx_wall_s for item, _ in parts], np.float64),
        shed=per_part([item.shed for item, _ in parts], np.float64),
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
