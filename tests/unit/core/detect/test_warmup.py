"""Specification of how a learned level starts: at the median of an entity's first few accepted samples, so one
outlying first sample (a chip's first interval straddling compute and a collective, issue 38) sets nothing."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect._baseline import Baseline
from rainierd.core.detect._warmup import Warmup
from rainierd.fleet.topology import build_topology
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames


def _baseline(n: int) -> Baseline:
    return Baseline.empty(n, halflife_s=3_600.0, learn_s=30.0, clip=0.02)


def _feed(warmup: Warmup, baseline: Baseline, rows: list[list[float]], *, accept: list[bool] | None = None,
          seconds: float = 1.0) -> list[npt.NDArray[np.bool_]]:
    """Feed one sample a row (one value an entity); return what each call let the baseline fold in itself."""
    kept = []
    for row in rows:
        x = np.asarray(row, np.float32)
        ok = np.ones(x.shape, bool) if accept is None else np.asarray(accept)
        kept.append(warmup.update(baseline, x, ok, np.full(x.shape, seconds, np.float32)))
    return kept


class TestWarmup:
    def test_the_level_is_the_median_of_the_first_samples(self) -> None:
        """An entity whose first of five samples reads 1.24 and the rest about 1.0 starts at their median, 1.0,
        with the five samples' seconds as its history."""
        warmup, baseline = Warmup.of(1, 5), _baseline(1)
        _feed(warmup, baseline, [[1.24], [1.0], [0.999], [1.001], [1.002]], seconds=0.5)
        assert baseline.level[0] == pytest.approx(1.001)
        assert baseline.history_s[0] == pytest.approx(2.5)

    def test_no_level_until_enough_samples(self) -> None:
        """Four samples of five leave no level (judged as an entity without history)."""
        warmup, baseline = Warmup.of(1, 5), _baseline(1)
        _feed(warmup, baseline, [[0.9]] * 4)
        assert np.isnan(baseline.level[0])
        assert baseline.history_s[0] == 0.0

    def test_an_entity_steadily_off_its_peers_starts_at_its_own_level(self) -> None:
        """Samples at 0.91 of the group's median seed a level of 0.91, unclamped."""
        warmup, baseline = Warmup.of(2, 3), _baseline(2)
        _feed(warmup, baseline, [[0.91, 1.0]] * 3)
        assert baseline.level.tolist() == pytest.approx([0.91, 1.0])

    def test_the_baseline_folds_in_only_samples_after_the_level(self) -> None:
        """While warming and at the sample that seeds the level, the baseline takes nothing itself; after, it
        does; samples not accepted, NaN or over no interval count for nothing."""
        warmup, baseline = Warmup.of(1, 2), _baseline(1)
        kept = _feed(warmup, baseline, [[1.0], [float("nan")], [1.0], [1.0]])
        assert [bool(k[0]) for k in kept] == [False, False, False, True]
        kept = _feed(Warmup.of(1, 2), _baseline(1), [[1.0]], accept=[False])
        assert not kept[0][0]

    def test_a_whole_fleet_seeds_at_once_each_at_its_own_median(self) -> None:
        """131,075 entities (two of the warm-up's slices and three more) whose fifth samples all come at one tick:
        each starts at the median of its own five, with their seconds as its history."""
        n = 2 * 65_536 + 3
        rows = np.random.default_rng(0).standard_t(4, (5, n)).astype(np.float32)
        warmup, baseline = Warmup.of(n, 5), _baseline(n)
        _feed(warmup, baseline, [list(row) for row in rows], seconds=0.5)
        assert np.array_equal(baseline.level, np.median(rows, axis=0).astype(np.float32))
        assert set(baseline.history_s.tolist()) == {2.5}

    def test_once_the_fleet_is_seeded_it_holds_rows_only_for_entities_warming(self) -> None:
        """Entities that start warming at different ticks each seed from their own first three samples; once none is
        mid-warm-up the buffer holds no rows (a row for every path for good was 95 MiB at rainier-1m, issue 39),
        and an entity that starts later gets a row of its own until it seeds."""
        n = 6
        warmup, baseline = Warmup.of(n, 3), _baseline(n)
        ticks = [  # entity 4 starts first, then 1 and 5, then 0; 2 only after the others are seeded; 3 never sends
            ([4], [4.0]), ([4, 1, 5], [4.2, 1.0, 5.0]), ([1, 5, 0], [1.2, 5.4, 0.5]),
            ([0, 1, 5, 4], [0.4, 1.1, 5.2, 9.0]), ([0], [0.6]), ([2], [2.0]), ([2], [2.6]), ([2], [2.2]),
        ]
        held = []
        for ids, values in ticks:
            x = np.full(n, np.nan, np.float32)
            x[ids] = values
            accept = np.zeros(n, bool)
            accept[ids] = True
            warmup.update(baseline, x, accept, np.ones(n, np.float32))
            held.append(len(warmup.samples))
        assert held == [6, 6, 6, 6, 0, 1, 1, 0]
        assert baseline.level.tolist()[:3] == [pytest.approx(0.5), pytest.approx(1.1), pytest.approx(2.2)]
        assert np.isnan(baseline.level[3])
        assert baseline.level.tolist()[4:] == [pytest.approx(4.2), pytest.approx(5.2)]
        assert baseline.history_s.tolist() == [3.0, 3.0, 3.0, 0.0, 3.0, 3.0]

    def test_a_count_of_one_is_the_first_sample(self) -> None:
        """With a count of 1 the first sample sets the level, as a plain baseline does."""
        warmup, baseline = Warmup.of(1, 1), _baseline(1)
        _feed(warmup, baseline, [[1.2]])
        assert baseline.level[0] == pytest.approx(1.2)

    def test_a_count_out_of_range_is_refused(self) -> None:
        """A count under 1 or over 255 (the sample count is a byte) is refused."""
        for count in (0, 256):
            with pytest.raises(ValueError, match="count"):
                Warmup.of(1, count)


LINK, PORT = 100, 20  # a NeuronLink and an EFA port of the demo fleet


def _latency_raises(*, first_reading: float, faults: list[Fault] | None = None, ticks: int = 120,
                    seed: int = 0) -> set[tuple[str, int, int]]:
    """Run the demo fleet at 5 s ticks for ``ticks``; ``LINK``'s and ``PORT``'s latency read ``first_reading`` times
    their own at the second tick (their first accepted sample); return (entity, index, tick) of every raise."""
    topo = build_topology("demo")
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=5.0, start_s=1.8e9, faults=faults or [])
    core = MonitorCore(topo)
    raised = set()
    for tick in range(ticks):
        sample = model.step(tick)
        if tick == 1:
            sample.links["latency_us"][LINK] *= first_reading
            sample.efa["latency_us"][PORT] *= first_reading
        for event in core.step([f for _t, f in tick_frames(topo, sample, publisher="warmup")]).events:
            if event.raised:
                raised.add((event.entity, event.id, tick))
    return raised


class TestPathLatency:
    """A path's latency is a gauge with heavy tails: a link of the control campaign whose first sample read 0.913 us
    among samples of 1.45 was learned at 1.341 (the learning clip walking it up) and raised 77 times in 90 minutes
    (issue 38).  A path's latency level starts at the median of its first five samples."""

    @pytest.mark.parametrize("first_reading", [0.63, 1.6])
    @pytest.mark.parametrize("seed", [0, 1])
    def test_an_outlying_first_latency_raises_nothing(self, first_reading: float, seed: int) -> None:
        """A NeuronLink and an EFA port whose first accepted latency reads 37 % low (or 60 % high): nothing in the
        fleet is raised in 10 minutes at 5 s ticks."""
        assert _latency_raises(first_reading=first_reading, seed=seed) == set()

    def test_a_path_slowing_after_such_a_start_is_still_found(self) -> None:
        """After that start, an EFA port answering 2x slower from 5 minutes in is raised within a minute, alone."""
        slow = [Fault(FaultKind.EFA_SLOW, PORT, 2.0, 60, 200)]
        raised = _latency_raises(first_reading=0.63, faults=slow)
        assert {(entity, index) for entity, index, _tick in raised} == {("efa", PORT)}
        assert min(tick for _e, _i, tick in raised) - 60 <= 12
