"""Specification of anchor (c), Page's CUSUM on each chip's throughput (benchmarks/anchors/cusum.py): quiet on
steady chips; a chip 10 % slower raised within a few samples, and only it; cleared when it recovers."""

from __future__ import annotations

import numpy as np

from benchmarks.anchors.cusum import PHASE_I, Cusum
from tests.unit.benchmarks.anchors._fleet import PEAK, healthy_state, sample, view


def run(slow_from: int | None, ticks: int, back_at: int | None = None) -> list[tuple[int, str, int, str]]:
    """Run the CUSUM over chips whose throughput alternates 0.2 % above and below its mean (one sigma each
    way: deterministic, so the quiet case cannot be a lucky draw), chip 7 slowed to 0.9 from ``slow_from``."""
    state, anchor, rng = healthy_state(), Cusum(), np.random.default_rng(3)
    out = []
    for t in range(ticks):
        sample(state, float(t), rng)
        state.chips.rates["fp8_flop_total"][:] = PEAK * (1 + 0.002 * (-1) ** t)
        if slow_from is not None and t >= slow_from and (back_at is None or t < back_at):
            state.chips.rates["fp8_flop_total"][7] *= 0.9
        out += [(t, e.entity, e.id, e.after) for e in anchor.observe(view(state, t))]
    return out


def test_steady_chips_raise_nothing() -> None:
    """300 samples of chips whose throughput wobbles one sigma either way: no event (a CUSUM without its
    reference value k would drift up on the wobble; note that a Phase I of 30 noisy samples mis-estimates the
    mean and sigma, so on Gaussian noise this CUSUM does raise now and then: a limit of the method as set)."""
    assert run(None, 300) == []


def test_a_slower_chip_is_raised_then_cleared() -> None:
    """Chip 7 at 0.9 of its Phase I mean from sample 60 is raised within five samples, the only raise, and cleared
    once it is back."""
    events = run(60, 200, back_at=100)
    raises = [e for e in events if e[3] == "straggler"]
    assert PHASE_I < 60
    assert [(e[1], e[2]) for e in raises] == [("chip", 7)]
    assert 60 <= raises[0][0] <= 65
    assert [(e[1], e[2], e[3]) for e in events if e[3] == "healthy"] == [("chip", 7, "healthy")]
