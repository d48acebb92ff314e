"""Specification of anchor (a), the node agents' threshold rules (benchmarks/anchors/thresholds.py): quiet on a
healthy fleet; a chip with an uncorrectable ECC error, a NeuronLink with lanes down, an EFA port whose remote
went unresponsive and a node unheard past Kubernetes' grace each raised, and nothing else."""

from __future__ import annotations

import numpy as np

from benchmarks.anchors.thresholds import NOT_READY_S, Thresholds
from tests.unit.benchmarks.anchors._fleet import healthy_state, sample, view


def test_a_healthy_fleet_raises_nothing() -> None:
    """Sixty healthy samples of every entity: no event."""
    state, anchor, rng = healthy_state(), Thresholds(), np.random.default_rng(1)
    events = []
    for t in range(60):
        sample(state, float(t), rng)
        events += anchor.observe(view(state, t))
    assert events == []


def test_each_rule_raises_its_entity_once() -> None:
    """An ECC error on chip 3, link 5 at 4 lanes, port 7's remote unresponsive, node 2 silent for longer than the
    grace: one raise each, of that entity, and no other."""
    state, anchor, rng = healthy_state(), Thresholds(), np.random.default_rng(2)
    raised = []
    silent_from = 10
    for t in range(silent_from + int(NOT_READY_S) + 5):
        sample(state, float(t), rng)
        if t >= silent_from:  # node 2 stops reporting: its cooling record keeps its last receive time
            state.cooling.rx_s[2] = float(silent_from - 1)
        if t == 20:
            state.chips.rates["ecc_uncorrected_total"][3] = 1.0
            state.links.gauges["lanes_up"][5] = 4
            state.efa.rates["unresponsive_remote_events_total"][7] = 2.0
        if t > 20:
            state.links.gauges["lanes_up"][5] = 4
        raised += [(e.entity, e.id, e.after) for e in anchor.observe(view(state, t)) if e.raised]
    assert sorted(raised) == [("chip", 3, "failed"), ("efa", 7, "down"), ("neuronlink", 5, "degraded"),
                              ("node", 2, "not_ready")]
