"""What an unhealthy NeuronLink costs its collectives over its last interval (``LinkDetector.path_fraction``, the
share its paths keep, which the throughput model and the job model price): a link down for part of the interval
rerouted its traffic at half the bandwidth for that part only; a flapping link up between its drops costs nothing;
any other unhealthy link keeps the share of its level it carries."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.core.detect.neuronlink import LinkDetector
from rainierd.core.state import FleetState
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import build_fleet

LINK = 5


def priced(*, ratio: float, lanes: int, dropped: bool, drops: float = 0.0) -> float:
    """Return the path fraction of one unhealthy link in the state given."""
    detector = LinkDetector(FleetState(build_fleet(1, 1)))
    detector.tracker.state[LINK] = 1  # degraded (or down): only unhealthy links are priced
    detector.now_ratio[LINK] = ratio
    detector.state.links.gauges["lanes_up"][:] = TRN2.neuronlink_lanes
    detector.state.links.gauges["lanes_up"][LINK] = lanes
    detector.was_dropped[LINK] = dropped
    detector.drops[LINK] = drops
    fractions = detector.path_fraction()
    assert (np.delete(fractions, LINK) == 1.0).all()  # every healthy link keeps its whole path
    return float(fractions[LINK])


@pytest.mark.parametrize(("ratio", "expected"), [(0.0, 0.5), (0.4, 0.7), (0.9, 0.95)])
def test_a_link_that_dropped_rerouted_at_half_for_the_part_it_was_down(ratio: float, expected: float) -> None:
    """Down at the interval's end (no lane up) after carrying ``ratio`` of its level for part of it, or back up
    after a drop (a retraining dip): 0.5 + 0.5 x ratio, 0.5 for a whole interval down."""
    assert priced(ratio=ratio, lanes=0, dropped=True, drops=1.0) == pytest.approx(expected)
    assert priced(ratio=ratio, lanes=TRN2.neuronlink_lanes, dropped=True, drops=1.0) == pytest.approx(expected)


def test_a_flapping_link_up_between_its_drops_costs_nothing() -> None:
    """Held unhealthy for its episode, every lane up and no drop in its last interval: its noisy ratio (0.97)
    is not a slow path."""
    assert priced(ratio=0.97, lanes=TRN2.neuronlink_lanes, dropped=False, drops=1.5) == 1.0


@pytest.mark.parametrize(("ratio", "lanes"), [(0.7, TRN2.neuronlink_lanes), (0.5, TRN2.neuronlink_lanes // 2)])
def test_a_degraded_link_keeps_the_share_it_carries(ratio: float, lanes: int) -> None:
    """Slow without dropping (lanes lost, or a bandwidth fault): the share of its level it carries, even if it
    flapped before, once a lane is missing."""
    assert priced(ratio=ratio, lanes=lanes, dropped=False) == pytest.approx(ratio)
    if lanes < TRN2.neuronlink_lanes:
        assert priced(ratio=ratio, lanes=lanes, dropped=False, drops=1.5) == pytest.approx(ratio)
