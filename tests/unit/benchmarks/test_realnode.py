"""The chip detector on what a real node reports, graded against injected truth (``benchmarks/realnode.py``):
the simulator's training profile (agents out of phase, skews, heavy tails, partial UltraServers) with job phases
and the diurnal swing, shown to the monitor as AWS neuron-monitor shows a node (no clock, temperature or power;
execution errors, latency and presence), each fault found on its chip with its reason, and healthy fleets
raising nothing, over several seeds, with the jobs known and not, with clocks and without, at a 1 s and a 5 s
period.  The larger runs quoted in docs/detection.md are ``python -m benchmarks realnode``."""

from __future__ import annotations

import functools

import pytest

from benchmarks.realnode import KINDS, Run, grade, run_fleet

SEEDS = (0, 1, 2)
CLOCK_SEEDS = (3, 4)  # a fleet with clocks is today's, judged as before: fewer seeds (the unit tier's time)


@functools.cache
def runs(*, faults: bool, clock: bool, jobs_known: bool, tick_s: float = 1.0) -> list[Run]:
    """Return the runs of every seed of one configuration (computed once for the module)."""
    return [run_fleet(seed=seed, faults=faults, clock=clock, jobs_known=jobs_known, tick_s=tick_s)
            for seed in (CLOCK_SEEDS if clock else SEEDS)]


class TestFaults:
    @pytest.mark.parametrize("jobs_known", [True, False])
    def test_every_kind_is_found_on_its_chip_without_a_clock(self, jobs_known: bool) -> None:
        """Without a clock every injected fault (30 % low FLOP, the simulator's 30 % straggler, a utilisation
        collapse, executions twice as slow, execution errors, timeouts, an SRAM ECC error, a device gone) is
        found on its chip, in its state and with its reason, within 30 s, and nothing else raises."""
        graded = grade(runs(faults=True, clock=False, jobs_known=jobs_known))
        assert {kind: (k["found"], k["injected"]) for kind, k in graded["kinds"].items()} == {
            kind: (len(SEEDS), len(SEEDS)) for kind in KINDS}
        assert max(k["ttd_max_s"] for k in graded["kinds"].values()) <= 30
        assert (graded["false_alarms"], graded["duplicates"]) == ({}, 0)

    def test_at_neuron_monitors_default_5_s_period_every_kind_is_found(self) -> None:
        """At a 5 s period, without a clock and the jobs known, every fault is found within 90 s (six agreeing
        samples, and a utilisation collapse waits out its group's checkpoints) and nothing else raises."""
        graded = grade(runs(faults=True, clock=False, jobs_known=True, tick_s=5.0))
        assert {kind: k["found"] for kind, k in graded["kinds"].items()} == dict.fromkeys(KINDS, len(SEEDS))
        assert max(k["ttd_max_s"] for k in graded["kinds"].values()) <= 90
        assert graded["false_alarms"] == {}


class TestHealthyFleets:
    @pytest.mark.parametrize(("clock", "jobs_known", "tick_s"), [
        (False, True, 1.0), (False, False, 1.0), (True, True, 1.0), (True, False, 1.0), (False, True, 5.0),
        (False, False, 5.0),
    ])
    def test_nothing_raises(self, clock: bool, jobs_known: bool, tick_s: float) -> None:
        """Healthy fleets whose jobs checkpoint, evaluate and restart together, with transient execution errors
        and latency spikes, raise nothing, with clocks and without, the jobs known or not."""
        assert grade(runs(faults=False, clock=clock, jobs_known=jobs_known, tick_s=tick_s))["false_alarms"] == {}
