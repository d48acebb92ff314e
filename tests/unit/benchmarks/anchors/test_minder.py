"""Specification of anchor (b), the Minder-style detector (benchmarks/anchors/minder.py), on four UltraServers
(each a group of four nodes): quiet on alike nodes; a node whose chips all run 20 % slower than its peers'
raised once it has stayed the farthest for the continuity requirement, not before, and only it."""

from __future__ import annotations

import numpy as np

from benchmarks.anchors.minder import CONTINUITY, WINDOW, Minder
from tests.unit.benchmarks.anchors._fleet import healthy_state, sample, view


def run(slow_from: int | None, ticks: int) -> list[tuple[int, str, int]]:
    state, anchor, rng = healthy_state(4), Minder(), np.random.default_rng(6)
    chips_of_2 = state.topology.chip_node == 2
    raised = []
    for t in range(ticks):
        sample(state, float(t), rng)
        if slow_from is not None and t >= slow_from:
            state.chips.rates["fp8_flop_total"][chips_of_2] *= 0.8
        raised += [(t, e.entity, e.id) for e in anchor.observe(view(state, t)) if e.raised]
    return raised


def test_alike_nodes_raise_nothing() -> None:
    """Sixteen alike nodes for 200 samples: no raise."""
    assert run(None, 200) == []


def test_a_slow_node_is_raised_after_the_continuity() -> None:
    """Node 2 slowed at sample 50 is raised, alone, no sooner than the continuity allows and within the window
    plus the continuity."""
    raised = run(50, 120)
    assert [(e, i) for _, e, i in raised] == [("node", 2)]
    assert 50 + CONTINUITY - 1 <= raised[0][0] <= 50 + WINDOW + CONTINUITY
