"""Specification of a batch's columns made from its entries (``rainierd.aggregate._columns``): a chunk of
binary frames of one shape, read as rows of whole frames, gives exactly the columns its record blocks give."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rainierd.aggregate._batcher import _BINARY, _entry
from rainierd.aggregate._columns import Columns, Entry, _by_block, columns_of
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import RECORD_DTYPES, NodeFrame, encode_binary

TOPO = build_topology("sites=2,ultraservers=4")


def frames() -> list[NodeFrame]:
    """One tick of the fleet's node frames, all under one publisher id."""
    sample = FleetModel(TOPO, np.random.default_rng(1), tick_s=1.0, start_s=1_000.0).step(0)
    return [f for _, f in tick_frames(TOPO, sample, publisher="agent") if isinstance(f, NodeFrame)]


def entries_of(nodes: list[NodeFrame]) -> list[Entry]:
    return [_entry(encode_binary(frame))[0] for frame in nodes]


def flat(columns: Columns) -> dict[str, Any]:
    """Return every column as a plain list, by name, with its dtype."""
    out: dict[str, Any] = {name: (a.dtype.str, a.tolist()) for name, a in
                           (("node", columns.node), ("seq", columns.seq), ("tick", columns.tick), ("t_s", columns.t_s))}
    out |= {f"counts.{kind}": (a.dtype.str, a.tolist()) for kind, a in columns.counts.items()}
    out |= {f"{kind}.{name}": (a.dtype.str, a.tolist()) for kind, table in columns.columns.items()
            for name, a in table.items()}
    return out


class TestColumns:
    def test_frames_of_one_shape_read_as_rows_give_the_blocks_columns(self) -> None:
        """Thirty-two frames of one shape: the columns read as rows of whole frames are the block-joined ones,
        value for value and dtype for dtype."""
        chunk = entries_of(frames())
        assert flat(columns_of(chunk, _BINARY, binary=True)) == flat(_by_block(chunk, _BINARY, binary=True))

    def test_frames_of_mixed_shapes_are_joined_block_by_block(self) -> None:
        """A frame with fewer chips and one with a longer publisher id among them: each entry's records stay its
        own (eight chips, then sixteen), in entry order."""
        nodes = frames()
        nodes[1] = dataclasses.replace(nodes[1], chips=nodes[1].chips[:8])
        nodes[2] = dataclasses.replace(nodes[2], publisher="agent-with-a-longer-id")
        made = columns_of(entries_of(nodes), _BINARY, binary=True)
        assert made.counts["chips"].tolist()[:3] == [16, 8, 16]
        assert made.columns["chips"]["chip"].tolist() == np.concatenate([f.chips["chip"] for f in nodes]).tolist()
        assert made.node.tolist() == [f.node for f in nodes]

    def test_a_mask_keeps_only_the_fields_it_names(self) -> None:
        """A kind's mask without a field leaves that column out, as block by block."""
        chunk = entries_of(frames())
        masks = (_BINARY[0] & ~0b10, *_BINARY[1:])  # chips without their second field
        made = columns_of(chunk, masks, binary=True)
        assert flat(made) == flat(_by_block(chunk, masks, binary=True))
        assert sorted(made.columns["chips"]) == sorted(set((RECORD_DTYPES["chips"].names or ())[:10]) - {"util"})
