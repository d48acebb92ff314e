"""Specification of the simulator's Poisson counts by cumulative means (``Noise.add_poisson_means``): each
entity gets exactly the draws that fall on its stretch of the means laid end to end, however many there are."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.fleet.topology import build_fleet
from rainierd.sim.fleet import FleetParams
from rainierd.sim.noise import Noise
from rainierd.sim.profile import PROFILES


def _noise(seed: int) -> Noise:
    topo = build_fleet(1, 1)
    return Noise(topo, np.random.default_rng(seed), tick_s=1.0, params=FleetParams(), profile=PROFILES["ideal"],
                 node_phase_s=np.zeros(topo.n_nodes))


def _placed_one_by_one(mean: np.ndarray, seed: int) -> np.ndarray:
    """The counts as each draw placed alone would give them (the same generator, the same draws)."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(np.fmax(mean, 0.0))
    total = float(cumulative[-1])
    events = int(rng.poisson(total))
    hits = np.minimum(np.searchsorted(cumulative, rng.uniform(0.0, total, events), side="right"), mean.size - 1)
    return np.bincount(hits, minlength=mean.size).astype(np.uint64)


@pytest.mark.parametrize("events_each", [0.001, 0.05, 3.0])  # few draws (placed alone) to many (counted in order)
@pytest.mark.parametrize("seed", [0, 1])
def test_each_entity_gets_the_draws_on_its_stretch_of_the_means(events_each: float, seed: int) -> None:
    mean = np.random.default_rng(seed + 10).gamma(0.5, 2 * events_each, 20_000)
    mean[::7] = 0.0  # entities with no mean get nothing, and share their edge with the next
    mean[5] = -1.0  # a negative mean counts as none
    counter = np.full(mean.size, 7, np.uint64)
    _noise(seed).add_poisson_means(counter, mean)
    assert np.array_equal(counter - np.uint64(7), _placed_one_by_one(mean, seed))
    assert not (counter[::7] - np.uint64(7)).any()


class _Draws:
    """A generator that returns chosen draws: the edges no random draw lands on."""

    def __init__(self, draws: np.ndarray) -> None:
        self.draws = draws

    def poisson(self, _mean: float) -> int:
        return int(self.draws.size)

    def uniform(self, _low: float, _high: float, size: int) -> np.ndarray:
        assert size == self.draws.size
        return self.draws.copy()


@pytest.mark.parametrize("copies", [1, 200])  # placed alone, and counted in order
def test_a_draw_on_an_edge_is_the_next_entitys_and_one_at_the_total_the_last_ones(copies: int) -> None:
    # 200 entities with no mean first (so 7 draws are few and 1,400 many), then cumulative 1, 1, 3, 3.5, 3.5, 5.
    mean = np.concatenate([np.zeros(200), [1.0, 0.0, 2.0, 0.5, 0.0, 1.5]])
    draws = np.tile(np.array([0.0, 1.0, 2.999, 3.0, 3.5, 4.0, 5.0]), copies)
    noise = _noise(0)
    noise.rng = _Draws(draws)  # type: ignore[assignment]
    counter = np.zeros(mean.size, np.uint64)
    noise.add_poisson_means(counter, mean)
    # 0.0 -> the first with a mean; 1.0 -> the third (the second has no stretch); 2.999 -> the third; 3.0 -> the
    # fourth; 3.5 and 4.0 -> the last (the fifth has no stretch); 5.0, the total -> the last.
    assert not counter[:200].any()
    assert counter[200:].tolist() == [copies, 0, 2 * copies, copies, 0, 3 * copies]
