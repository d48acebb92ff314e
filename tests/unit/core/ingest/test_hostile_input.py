"""Hostile or broken payloads never crash the monitor's core and never change
what it believes of anyone else: real frames (batch, node, JSON) bit-flipped,
truncated, padded or given absurd integers (ticks and sequence numbers up to
2**64 - 1), fed through the same path the daemon uses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.core.analysis import MonitorCore
from rainierd.core.ingest import Message
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches, tick_frames
from rainierd.wire import encode_binary, encode_json

TOPO = build_topology("demo")
START_S = 1_800_000_000.0


def corpus() -> list[tuple[str, bytes]]:
    model = FleetModel(TOPO, np.random.default_rng(0), tick_s=1.0, start_s=START_S)
    sample = model.step(0)
    return ([(t, encode_binary(f)) for t, f in tick_batches(TOPO, sample, publisher="p", nodes_per_batch=3)]
            + [(t, encode_binary(f)) for t, f in tick_frames(TOPO, sample, publisher="p")]
            + [(t, encode_json(f)) for t, f in tick_frames(TOPO, sample, publisher="p")])


CORPUS = corpus()
GOOD = [(t, p) for t, p in CORPUS if "/batch/" in t]  # the batches: every node


def mutate(payload: bytes, data: st.DataObject) -> bytes:
    b = bytearray(payload)
    how = data.draw(st.sampled_from(["flip", "truncate", "pad", "integer"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 6))):
            b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    elif how == "truncate":
        b = b[: data.draw(st.integers(0, len(b) - 1))]
    elif how == "pad":
        b += data.draw(st.binary(min_size=1, max_size=32))
    else:
        at = data.draw(st.integers(0, max(0, len(b) - 8)))
        value = data.draw(st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 0, 1 << 40]))
        b[at:at + 8] = value.to_bytes(8, "little")
    return bytes(b)


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_a_hostile_payload_neither_crashes_nor_changes_anyone_else(data: st.DataObject) -> None:
    """After a good tick, a mangled payload is applied only if still valid, and never touches other nodes."""
    core = MonitorCore(TOPO)
    core.analyse([Message(START_S, t, p, START_S) for t, p in GOOD], now_s=START_S)
    before = {name: values.copy() for name, values in core.state.chips.gauges.items()}
    topic, payload = CORPUS[data.draw(st.integers(0, len(CORPUS) - 1))]
    hostile = mutate(payload, data)
    analysis = core.analyse([Message(START_S + 1, topic, hostile, START_S + 1)], now_s=START_S + 1)
    touched = {int(n) for n in np.flatnonzero(core.state.chips.samples > 1) // TOPO.chips_per_node}
    for name, values in core.state.chips.gauges.items():
        untouched = np.ones(TOPO.n_chips, bool)
        for node in touched:
            untouched[node * 16:(node + 1) * 16] = False
        assert np.array_equal(values[untouched], before[name][untouched], equal_nan=True), name
    assert analysis.flush.applied + sum(analysis.flush.rejected.values()) >= 1  # counted, one way or the other
