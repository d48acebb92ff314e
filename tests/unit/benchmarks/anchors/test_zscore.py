"""Specification of anchor (d), the per-entity static z-score (benchmarks/anchors/zscore.py): quiet on steady
entities; a chip whose temperature jumps far outside its own history raised at once, and only it."""

from __future__ import annotations

import numpy as np

from benchmarks.anchors.zscore import MIN_HISTORY, ZScore
from tests.unit.benchmarks.anchors._fleet import healthy_state, sample, view


def test_steady_entities_raise_nothing() -> None:
    """200 samples of every entity with small Gaussian noise: no event."""
    state, anchor, rng = healthy_state(), ZScore(), np.random.default_rng(4)
    events = []
    for t in range(200):
        sample(state, float(t), rng)
        events += anchor.observe(view(state, t))
    assert events == []


def test_a_chip_far_from_its_history_is_raised() -> None:
    """Chip 11 at 75 C against a history of 60 +- 0.3 C: raised on that sample, the only raise."""
    state, anchor, rng = healthy_state(), ZScore(), np.random.default_rng(5)
    raised = []
    for t in range(MIN_HISTORY + 20):
        sample(state, float(t), rng)
        if t == MIN_HISTORY + 10:
            state.chips.gauges["temp_c"][11] = 75.0
        raised += [(t, e.entity, e.id) for e in anchor.observe(view(state, t)) if e.raised]
    assert raised == [(MIN_HISTORY + 10, "chip", 11)]
