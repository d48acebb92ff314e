"""Specification of the window join: batches whose columns are read straight
from their payloads (``decode_frame(columns=False)``) give the state, counts
and rejections the decoded batches give, and a batch whose per-node counts do
not add up to its header is refused whole."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from rainierd.core.ingest import Message, Received
from rainierd.core.ingest._window import _Parts
from rainierd.sim.frames import tick_batches
from rainierd.wire import NodeBatch, RawBatch, decode_binary, decode_frame, encode_binary, encode_json
from rainierd.wire.topics import parse_topic
from tests.unit.core.test_core import Fleet


def _state(fleet: Fleet) -> dict[str, np.ndarray]:
    """Return every array of the fleet's node tables, by table and name."""
    arrays = {}
    for kind, table in fleet.state.tables().items():
        for label, group in (("gauge", table.gauges), ("total", table.totals), ("rate", table.rates)):
            arrays |= {f"{kind}.{label}.{name}": values for name, values in group.items()}
        arrays |= {f"{kind}.t_s": table.t_s, f"{kind}.dt_s": table.dt_s, f"{kind}.known": table.known,
                   f"{kind}.samples": table.samples}
    return {name: np.array(values) for name, values in sorted(arrays.items())}


def _same(left: dict[str, np.ndarray], right: dict[str, np.ndarray]) -> bool:
    return left.keys() == right.keys() and all(np.array_equal(left[k], right[k], equal_nan=True) for k in left)


def _tick(fleet: Fleet, nodes_per_batch: int = 4) -> list[tuple[str, bytes]]:
    """Return the fleet's next tick as (topic, binary payload) batches."""
    sample = fleet.model.step(fleet.tick)
    fleet.tick += 1
    return [(topic, encode_binary(frame)) for topic, frame in
            tick_batches(fleet.topo, sample, publisher="agg", nodes_per_batch=nodes_per_batch)]


def _without(payload: bytes, kind: str, name: str) -> bytes:
    """Return a batch payload re-encoded without column ``name`` of ``kind`` (its values unknown)."""
    batch = decode_binary(payload)
    assert isinstance(batch, NodeBatch)
    columns = {k: {n: v for n, v in c.items() if (k, n) != (kind, name)} for k, c in batch.columns.items()}
    return encode_binary(replace(batch, columns=columns))


class TestRawBatches:
    def test_decode_without_columns_returns_the_header_and_leaves_the_columns_in_the_payload(self) -> None:
        """A RawBatch carries the decoded batch's header fields, and its payload unchanged."""
        payload = next(p for t, p in _tick(Fleet()) if "batch" in t)
        raw, batch = decode_binary(payload, columns=False), decode_binary(payload)
        assert isinstance(raw, RawBatch)
        assert isinstance(batch, NodeBatch)
        assert ((raw.publisher, raw.head.seq, raw.head.tick, raw.head.t_s, raw.site, raw.n_nodes, raw.payload)
                == (batch.publisher, batch.seq, batch.tick, batch.t_s, batch.site, batch.n_nodes, payload))

    def test_admitting_payloads_leaves_the_state_applying_decoded_batches_leaves(self) -> None:
        """Three ticks of batches, one with a column left out and a JSON node frame among them, give the same
        tables, counts and rejections whether admitted as payloads or applied decoded."""
        fed, decoded = Fleet(), Fleet()
        for tick in range(3):
            messages = _tick(fed)
            _tick(decoded)
            if tick == 1:
                topic, payload = messages[0]
                messages[0] = (topic, _without(payload, "links", "latency_us"))
            if tick == 2:
                node = decoded.frames()[1][0]  # keeps both fleets' models in step
                fed.frames()
                messages.append((node[0], encode_json(node[1])))
            rx_s = 1_000.0 + tick
            result = fed.ingest.admit([Message(rx_s, topic, payload, rx_s) for topic, payload in messages])
            items = [Received(rx_s, parse_topic(topic), decode_frame(payload, max_bytes=1 << 20)[0], rx_s)
                     for topic, payload in messages]
            expected = decoded.ingest.apply(items)
            assert (result.applied, dict(result.rejected), dict(result.samples)) == (
                expected.applied, dict(expected.rejected), dict(expected.samples))
            assert _same(_state(fed), _state(decoded))

    def test_a_batch_whose_counts_disagree_with_its_header_is_refused_whole(self) -> None:
        """One entry claiming a chip more than the header's total: its batch is one bad_header, none of its
        frames counted as decoded or applied; the other batches of the window are applied."""
        fleet = Fleet()
        messages = _tick(fleet)
        index, (topic, payload) = next((i, m) for i, m in enumerate(messages) if "batch" in m[0])
        raw = decode_binary(payload, columns=False)
        assert isinstance(raw, RawBatch)
        at = raw.head.layout.spans["counts", "chips"][0]
        forged = bytearray(payload)
        forged[at] += 1  # entry 0's chips, little-endian u16
        messages[index] = (topic, bytes(forged))
        result = fleet.ingest.admit([Message(1_000.0, t, p, 1_000.0) for t, p in messages])
        frames = sum(decode_binary(p, columns=False).n_nodes  # type: ignore[union-attr]
                     for t, p in messages if "batch" in t) - raw.n_nodes
        assert (dict(result.rejected), result.frames) == ({"bad_header": 1}, Counter(binary=frames + 1))
        assert result.applied == frames + 1  # every other node frame, and the site's facility frame


class TestCompiledJoin:
    """The compiled passes read a raw batch's columns where its layout puts them, and never longer."""

    def _parts(self) -> tuple[_Parts, list[RawBatch]]:
        fleet = Fleet()
        frames = [decode_frame(payload, max_bytes=1 << 20, columns=False)[0] for topic, payload in _tick(fleet)
                  if "batch" in topic]
        raws = [frame for frame in frames if isinstance(frame, RawBatch)]
        assert len(raws) == len(frames) > 1
        return _Parts([Received(1.0, None, raw, 1.0) for raw in raws]), raws

    def test_a_column_in_node_order_is_the_joined_column_reordered(self) -> None:
        parts, _raws = self._parts()
        entries = parts.entries()
        per = parts.records("links")[0] // entries[0]
        joined = parts.read("links", "tx_bytes_total", parts.records("links"),
                            np.empty(sum(parts.records("links")), np.uint64))
        row = np.random.default_rng(0).permutation(sum(entries))
        out = np.empty((sum(entries), per), np.uint64)
        parts.scatter("links", "tx_bytes_total", entries, row, out)
        assert np.array_equal(out[row], joined.reshape(-1, per))

    def test_a_span_other_than_its_entries_need_is_refused_before_anything_is_read(self) -> None:
        parts, _raws = self._parts()
        entries = parts.entries()
        per = parts.records("links")[0] // entries[0]
        out = np.empty((sum(entries), per + 1), np.uint64)  # one record more a node than the batches carry
        with pytest.raises(ValueError, match="span is not the size"):
            parts.scatter("links", "tx_bytes_total", entries, np.arange(sum(entries)), out)
