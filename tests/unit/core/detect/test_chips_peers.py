"""Specification of the chip detector on what every publisher reports, a clock or not (issue 33): a chip
judged against its peers (its job's chips, else its UltraServer's) by its efficiency, its utilisation and its
execution latency; and the peers themselves (``_peers.py``).

The feed is crafted (``ChipFeed``): every chip busy at 70 % with a little Gaussian noise, its FLOP counter at
the chip's peak times its utilisation, sampled every second straight into the state, as
``test_detect_chips_learning`` feeds it.  What a simulated fleet does end to end, with job phases and agents out
of phase, is ``test_bench_realnode``'s.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from rainierd._types import F64, I64
from rainierd.core.detect._peers import ChipPeers
from rainierd.core.detect._stats import group_nanmedian
from rainierd.core.detect.chips import FAILED, HEALTHY, STRAGGLER, ChipDetector
from rainierd.core.state import FleetState
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import build_fleet

PEAK = TRN2.fp8_dense_flops
CHIP = 70  # UltraServer 1, node 4, chip 6
BUSY = 0.7


class ChipFeed:
    """Healthy busy chips of ``ultraservers`` UltraServers, one sample a second (module docstring)."""

    def __init__(self, ultraservers: int = 2, *, clock: bool = True, seed: int = 0) -> None:
        self.topo = build_fleet(1, ultraservers)
        self.state = FleetState(self.topo)
        self.detector = ChipDetector(self.state, PEAK)
        self.rng = np.random.default_rng(seed)
        self.clock = clock
        n = self.topo.n_chips
        self.flop = np.zeros(n)
        self.counters = {name: np.zeros(n, np.uint64) for name in (
            "ecc_uncorrected_total", "sram_ecc_uncorrected_total", "exec_errors_total", "exec_timeouts_total")}
        self.t = 0
        self.raised: list[tuple[int, int, str, tuple[str, ...]]] = []  # (second, chip, state, reasons)
        self.cleared: list[tuple[int, int]] = []

    def second(
        self, *, util: F64 | None = None, work: F64 | None = None, clock: F64 | None = None,
        reported_clock: F64 | None = None, latency: F64 | None = None, present: F64 | None = None,
        add: Mapping[str, F64] | None = None, node_group: I64 | None = None, silent: F64 | None = None,
    ) -> None:
        """Feed one second: ``util`` (default busy), FLOP at ``work`` times the peak for that utilisation (1) at
        ``clock`` (1), reported as ``reported_clock`` (``clock``; left out without one), ``latency`` and
        ``present`` (left out by default), and counter increments ``add``; chips where ``silent`` is non-zero
        send nothing."""
        n = self.topo.n_chips
        util = BUSY + self.rng.normal(0.0, 0.002, n) if util is None else util
        clock = np.ones(n) if clock is None else clock
        self.flop += PEAK * util * clock * (1.0 if work is None else work)
        for name, increment in (add or {}).items():
            self.counters[name] += increment.astype(np.uint64)
        columns: dict[str, np.ndarray] = {"util": util.astype(np.float32), "fp8_flop_total": self.flop.copy(),
                                          "throttled": np.zeros(n, np.uint8), **self.counters}
        if self.clock:
            columns["clock_ratio"] = (clock if reported_clock is None else reported_clock).astype(np.float32)
        if latency is not None:
            columns["exec_latency_us"] = latency.astype(np.float32)
        if present is not None:
            columns["present"] = present.astype(np.uint8)
        table = self.state.chips
        ids = np.arange(n, dtype=np.int64) if silent is None else np.flatnonzero(silent == 0).astype(np.int64)
        t_s = np.full(ids.size, float(self.t))
        table.apply(ids, {name: column[ids] for name, column in columns.items()}, t_s=t_s, rx_s=t_s,
                    known=sum(table.bit(name) for name in columns))
        self.state.now_s = float(self.t)
        changes = self.detector.update(self.t, node_group=node_group)
        names = ("healthy", "straggler", "throttled", "stale", "failed")
        for chip, after in zip(changes.ids.tolist(), changes.after.tolist(), strict=True):
            if after == HEALTHY:
                self.cleared.append((self.t, chip))
            else:
                reasons = _reasons(int(self.detector.tracker.reason[chip]))
                self.raised.append((self.t, chip, names[after], reasons))
        self.t += 1

    def run(self, seconds: int, **kwargs: object) -> None:
        """Feed ``seconds`` seconds with the same arguments (arrays re-read each second)."""
        for _ in range(seconds):
            self.second(**kwargs)  # type: ignore[arg-type]


def _reasons(mask: int) -> tuple[str, ...]:
    from rainierd.core.detect._common import reason_names  # noqa: PLC0415 - the names the events carry

    return tuple(reason_names(mask))


def one(n: int, chip: int, value: float, rest: float = 1.0) -> F64:
    """Return ``n`` values of ``rest``, ``chip``'s ``value``."""
    out = np.full(n, rest)
    out[chip] = value
    return out


class TestPeers:
    def test_group_nanmedian_is_each_groups_median_of_its_finite_values(self) -> None:
        """Groups of unequal size, NaN left out, a value in no group (-1) ignored, an empty group NaN."""
        values = np.array([3.0, 1.0, 2.0, np.nan, 10.0, 20.0, 99.0, 5.0])
        group = np.array([0, 0, 0, 0, 1, 1, -1, 3])
        assert group_nanmedian(values, group, 4).tolist() == pytest.approx([2.0, 15.0, np.nan, 5.0], nan_ok=True)

    def test_without_jobs_a_chips_peers_are_its_ultraservers_64(self) -> None:
        """With no job known, each chip's median is its UltraServer's, exactly."""
        topo = build_fleet(1, 2)
        values = np.arange(topo.n_chips, dtype=np.float32)
        peers = ChipPeers.of(topo, np.full(topo.n_nodes, -1, np.int64))
        assert peers.node_group is None
        assert np.unique(peers.median(values)).tolist() == [31.5, 95.5]

    def test_with_jobs_a_chips_peers_are_its_jobs_nodes(self) -> None:
        """A job of nodes 0, 1 and 5 gives its chips the median of those nodes' medians; the nodes in no job
        are grouped by UltraServer, and the two of UltraServer 0 are no group (the median of two is either's to
        move): each has its own node's; any() reaches the whole group."""
        topo = build_fleet(1, 2)
        values = np.repeat(np.arange(topo.n_nodes, dtype=np.float32), topo.chips_per_node)
        node_job = np.full(topo.n_nodes, -1, np.int64)
        node_job[[0, 1, 5]] = 0
        peers = ChipPeers.of(topo, node_job)
        per_node = peers.median(values)[::topo.chips_per_node].tolist()
        assert per_node == [1.0, 1.0, 2.0, 3.0, 6.0, 1.0, 6.0, 6.0]
        mask = np.zeros(topo.n_chips, dtype=bool)
        mask[5 * topo.chips_per_node] = True
        assert peers.any(mask)[::topo.chips_per_node].tolist() == [True, True, False, False, False, True, False, False]


class TestEfficiencyWithoutAClock:
    def test_a_chip_doing_30_percent_less_flop_at_the_same_utilisation_is_a_straggler(self) -> None:
        """Without any clock, a chip executing 30 % fewer FLOP than its peers at the same utilisation is raised a
        straggler by efficiency within 10 s, and nothing else raises."""
        feed = ChipFeed(clock=False)
        feed.run(60)
        feed.run(30, work=one(feed.topo.n_chips, CHIP, 0.7))
        assert [(chip, state, reasons) for _t, chip, state, reasons in feed.raised] == [
            (CHIP, "straggler", ("efficiency",))]
        assert feed.raised[0][0] - 60 <= 10

    def test_a_clock_the_group_shares_is_absorbed_by_the_peers(self) -> None:
        """Without a clock, every chip at 85 % of its clock together (a site's heat) raises nothing."""
        feed = ChipFeed(clock=False)
        feed.run(60)
        feed.run(60, clock=np.full(feed.topo.n_chips, 0.85))
        assert feed.raised == []

    def test_with_a_clock_a_throttled_chip_is_not_a_straggler(self) -> None:
        """With every chip's clock known the clock divides the efficiency as before: a chip at 80 % of its clock,
        busy as long for 20 % fewer FLOP, is not slow for its clock (its low clock is the throttle judgement's);
        without clocks the same chip is a straggler by efficiency (the two cannot be told apart)."""
        verdicts = {}
        for clock in (True, False):
            feed = ChipFeed(clock=clock)
            feed.run(60)
            feed.run(30, clock=one(feed.topo.n_chips, CHIP, 0.8))
            verdicts[clock] = sorted({(chip, state, reasons) for _t, chip, state, reasons in feed.raised})
        assert verdicts == {True: [(CHIP, "throttled", ("clock",))], False: [(CHIP, "straggler", ("efficiency",))]}

    def test_a_group_with_one_chip_without_a_clock_is_judged_without_one(self) -> None:
        """Every chip at 80 % of its clock, one of them never reporting it: its group is judged on FLOP per busy
        second alone, so that chip is judged and reads as efficient as its peers (with the clock dividing the
        others' efficiency it would read 20 % slow, under the 90 % band; judged only with a clock, never), and
        nothing raises."""
        feed = ChipFeed()
        n = feed.topo.n_chips
        feed.run(90, clock=np.full(n, 0.8), reported_clock=one(n, CHIP, np.nan, 0.8))
        assert feed.raised == []
        assert abs(float(feed.detector.efficiency[CHIP]) - 1.0) < 0.005


class TestUtilisation:
    def test_a_chip_whose_utilisation_collapses_while_its_peers_stay_busy_is_a_straggler(self) -> None:
        """A chip at 5 % while its UltraServer stays at 70 %: a straggler (utilisation) after 10 s, nothing else;
        it clears once it is busy again."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        feed.run(40)
        feed.run(30, util=one(n, CHIP, 0.05, BUSY))
        feed.run(20)
        assert [(t - 40, chip, state, reasons) for t, chip, state, reasons in feed.raised] == [
            (9, CHIP, "straggler", ("utilisation",))]
        assert [chip for _t, chip in feed.cleared] == [CHIP]

    def test_a_checkpoint_where_every_chip_idles_together_raises_nothing(self) -> None:
        """Every chip at 1 % for 30 s, twice, with each node's first and last idle sample a second apart from
        the others' (agents out of phase): nothing raises."""
        feed = ChipFeed(clock=False)
        n, cpn = feed.topo.n_chips, feed.topo.chips_per_node
        for _ in range(2):
            feed.run(40)
            lagging = np.full(n, BUSY)
            lagging[np.repeat(np.arange(feed.topo.n_nodes) % 2 == 0, cpn)] = 0.01
            feed.second(util=lagging)
            feed.run(30, util=np.full(n, 0.01))
            feed.second(util=np.where(lagging < BUSY, BUSY, 0.01))
        assert feed.raised == []

    def test_a_collapsed_chip_stays_raised_through_its_groups_checkpoint(self) -> None:
        """A chip raised for its utilisation is neither cleared nor raised again by a checkpoint of its group."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        feed.run(40)
        feed.run(30, util=one(n, CHIP, 0.05, BUSY))
        feed.run(20, util=np.full(n, 0.01))
        feed.run(20, util=one(n, CHIP, 0.05, BUSY))
        assert ([chip for _t, chip, _s, _r in feed.raised], feed.cleared) == ([CHIP], [])

    def test_an_idle_node_beside_busy_ones_is_no_collapse(self) -> None:
        """A whole node idle in a busy UltraServer is not 16 stragglers, jobs known or not: without jobs it is a
        node without work, and inside a job a node idles together when something else holds it up (a failed
        chip, a lost node: raised on their own), so one fault stays one culprit."""
        raised = {}
        for jobs in (False, True):
            feed = ChipFeed(clock=False)
            topo = feed.topo
            util = np.full(topo.n_chips, BUSY)
            util[4 * topo.chips_per_node:5 * topo.chips_per_node] = 0.01  # node 4: UltraServer 1's first
            node_job = np.where(topo.node_ultraserver == 1, 0, -1).astype(np.int64) if jobs else None
            feed.run(40, node_group=node_job)
            feed.run(30, util=util, node_group=node_job)
            raised[jobs] = sorted({chip for _t, chip, _s, _r in feed.raised})
        assert raised == {False: [], True: []}


class TestLatency:
    def test_a_chip_whose_executions_take_twice_its_peers_is_a_straggler(self) -> None:
        """Executions of 80 ms against its peers' 40 ms: a straggler (latency) after 10 s, nothing else."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        feed.run(40, latency=np.full(n, 40e3))
        feed.run(30, latency=one(n, CHIP, 80e3, 40e3))
        assert [(t - 40, chip, reasons) for t, chip, _s, reasons in feed.raised] == [(9, CHIP, ("latency",))]

    def test_two_jobs_of_different_graphs_in_one_ultraserver_raise_nothing_without_jobs(self) -> None:
        """Nodes 4-5 at 30 ms, nodes 6-7 at 90 ms (two jobs in UltraServer 1) with the jobs unknown: each chip
        is compared with its node's chips, and nothing raises."""
        feed = ChipFeed(clock=False)
        latency = np.full(feed.topo.n_chips, 30e3)
        latency[6 * 16:8 * 16] = 90e3
        feed.run(60, latency=latency)
        assert feed.raised == []

    def test_a_second_long_spike_raises_nothing(self) -> None:
        """A chip's latency three times its peers' for one sample in every ten: nothing."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        for t in range(100):
            feed.second(latency=one(n, CHIP, 120e3, 40e3) if t % 10 == 5 else np.full(n, 40e3))
        assert feed.raised == []


class TestFailures:
    @pytest.mark.parametrize(("counter", "reason"), [("exec_errors_total", "exec_errors"),
                                                     ("exec_timeouts_total", "exec_timeouts")])
    def test_one_transient_error_fails_nothing(self, counter: str, reason: str) -> None:
        """One burst of 50 in one second, then another a minute later: no chip fails."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        for t in range(150):
            feed.second(add={counter: one(n, CHIP, 50.0, 0.0)} if t in (30, 90) else None)
        assert feed.raised == []

    @pytest.mark.parametrize(("counter", "reason"), [("exec_errors_total", "exec_errors"),
                                                     ("exec_timeouts_total", "exec_timeouts")])
    def test_errors_in_three_seconds_running_fail_the_chip_until_a_minute_without(
            self, counter: str, reason: str) -> None:
        """An error a second fails the chip on the third; errors every 10 s keep it failed (no clear between
        them); once they stop it clears 60 s without one plus the 5 clean seconds later."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        for t in range(200):
            errors = (30 <= t < 33) or (33 <= t < 100 and t % 10 == 0)
            feed.second(add={counter: one(n, CHIP, 1.0, 0.0)} if errors else None)
        assert [(t, chip, state, reasons) for t, chip, state, reasons in feed.raised] == [
            (32, CHIP, "failed", (reason,))]
        assert len(feed.cleared) == 1
        assert 90 + 60 <= feed.cleared[0][0] <= 90 + 60 + 8

    @pytest.mark.parametrize(("counter", "reason"), [("sram_ecc_uncorrected_total", "sram_ecc_uncorrected"),
                                                     ("ecc_uncorrected_total", "ecc_uncorrected")])
    def test_an_uncorrectable_ecc_error_fails_the_chip_at_once(self, counter: str, reason: str) -> None:
        """One uncorrectable ECC error, SRAM as HBM: failed on that sample, its own reason."""
        feed = ChipFeed(clock=False)
        for t in range(20):
            feed.second(add={counter: one(feed.topo.n_chips, CHIP, 1.0, 0.0)} if t == 10 else None)
        assert feed.raised == [(10, CHIP, "failed", (reason,))]

    def test_uncorrectable_ecc_errors_minutes_apart_keep_the_chip_failed(self) -> None:
        """Uncorrectable errors 50 s apart: one raise, no clear between them (its replace advisory waits 300 s for
        a cause that stands); it clears once 600 s of its samples pass without one."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        for t in range(700):
            feed.second(add={"ecc_uncorrected_total": one(n, CHIP, 1.0, 0.0)} if t in (10, 60) else None)
        assert feed.raised == [(10, CHIP, "failed", ("ecc_uncorrected",))]
        assert len(feed.cleared) == 1
        assert 60 + 600 <= feed.cleared[0][0] <= 60 + 600 + 6

    def test_a_failed_chip_that_fell_silent_starts_afresh_when_it_reports_again(self) -> None:
        """A chip failed by an uncorrectable error, then silent for 20 s (failed all along), then reporting clean
        samples again (reset, repaired or replaced) clears after its clean seconds, not after the latch's."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        for t in range(60):
            feed.second(add={"ecc_uncorrected_total": one(n, CHIP, 1.0, 0.0)} if t == 10 else None,
                        silent=one(n, CHIP, 1.0, 0.0) if 12 <= t < 32 else None)
        assert feed.raised == [(10, CHIP, "failed", ("ecc_uncorrected",))]
        assert [(t, chip) for t, chip in feed.cleared if t < 45] == [(feed.cleared[0][0], CHIP)]

    def test_a_device_reported_gone_is_failed_at_once_and_clears_when_back(self) -> None:
        """``present`` 0: failed (absent) on that sample; back for 6 s: cleared."""
        feed = ChipFeed(clock=False)
        n = feed.topo.n_chips
        feed.run(10, present=np.ones(n))
        feed.run(10, present=one(n, CHIP, 0.0))
        feed.run(10, present=np.ones(n))
        assert feed.raised == [(10, CHIP, "failed", ("absent",))]
        assert [chip for _t, chip in feed.cleared] == [CHIP]
        assert feed.detector.tracker.state[CHIP] == HEALTHY != FAILED != STRAGGLER
