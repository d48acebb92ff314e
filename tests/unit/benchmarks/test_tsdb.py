"""Specification of ``python -m benchmarks tsdb``'s pure parts: reading a TSDB's own
counters, counting a step's scrapes, the sustained rule, the ramp, and the
window's phase.  No timings are asserted; the measurement itself needs a real
Prometheus and VictoriaMetrics and is run by hand (docs/scaling.md)."""

from __future__ import annotations

import pytest

from benchmarks.tsdb_rule import Scrapes, metric_sum, next_targets, quiet_phase, scrape_counts, shortfalls

# As the two engines expose them (Prometheus 2.42 labels its counter by sample type).
PROMETHEUS = {
    'prometheus_tsdb_head_samples_appended_total{type="float"}': 603064.0,
    'prometheus_tsdb_head_samples_appended_total{type="histogram"}': 0.0,
    "prometheus_tsdb_head_samples_appended_total_other": 9.0,
    "prometheus_tsdb_head_series": 150766.0,
}
VICTORIA = {
    "vm_rows_added_to_storage_total": 603068.0,
    'vm_rows_inserted_total{type="promscrape"}': 603068.0,
    'vm_rows_inserted_total{type="influx"}': 0.0,
}


def clean(expected: int = 30) -> Scrapes:
    return Scrapes(expected=expected, ok=expected, failed=0, missed=0, overrun=0, duration_p50_s=0.2,
                   duration_p99_s=0.3, duration_max_s=0.3)


class TestMetricSum:
    def test_sums_a_family_over_its_label_sets(self) -> None:
        """A labelled counter is the sum of its label sets; a longer name sharing the prefix is not part of it."""
        assert metric_sum(PROMETHEUS, "prometheus_tsdb_head_samples_appended_total") == 603064.0

    def test_reads_an_unlabelled_counter(self) -> None:
        """VictoriaMetrics's rows added to storage is one unlabelled series."""
        assert metric_sum(VICTORIA, "vm_rows_added_to_storage_total") == 603068.0

    def test_an_absent_family_is_zero(self) -> None:
        """A family the engine does not expose sums to 0, not an error."""
        assert metric_sum(VICTORIA, "prometheus_tsdb_head_samples_appended_total") == 0.0


class TestScrapeCounts:
    def test_every_scrape_recorded(self) -> None:
        """Two targets scraped three times each, all up: none missed, failed or overran; durations pooled."""
        up = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0]}
        durations = {"a": [0.1, 0.2, 0.2], "b": [0.2, 0.2, 0.2]}
        assert scrape_counts(up, durations, targets=["a", "b"], per_target=3, interval_s=1.0) == Scrapes(
            expected=6, ok=6, failed=0, missed=0, overrun=0, duration_p50_s=0.2, duration_p99_s=0.2,
            duration_max_s=0.2)

    def test_missing_failed_and_overrunning_scrapes(self) -> None:
        """A target never recorded misses all its scrapes; up 0 is a failure; a scrape of a whole interval
        overran."""
        up = {"a": [1.0, 0.0], "ignored": [1.0]}
        durations = {"a": [0.5, 1.0]}
        counts = scrape_counts(up, durations, targets=["a", "b"], per_target=3, interval_s=1.0)
        assert (counts.expected, counts.ok, counts.failed, counts.missed, counts.overrun, counts.duration_max_s) == (
            6, 1, 1, 4, 1, 1.0)

    def test_nothing_recorded(self) -> None:
        """With no scrape recorded every one is missed and there are no durations."""
        assert scrape_counts({}, {}, targets=["a"], per_target=2, interval_s=1.0) == Scrapes(
            expected=2, ok=0, failed=0, missed=2, overrun=0, duration_p50_s=None, duration_p99_s=None,
            duration_max_s=None)


class TestSustainedRule:
    def test_a_clean_step_at_the_offered_rate_is_sustained(self) -> None:
        """Every scrape in time and 99 % of the offered samples appended: no shortfall."""
        assert shortfalls(clean(), offered_per_s=100_000, appended_per_s=99_000) == ()

    def test_appending_less_than_99_percent_is_not(self) -> None:
        """Clean scrapes but 98.9 % appended is a shortfall."""
        assert shortfalls(clean(), offered_per_s=100_000, appended_per_s=98_900) == ("appended 0.989 of offered",)

    def test_each_scrape_problem_is_named(self) -> None:
        """Missed, failed and overrunning scrapes each make a step unsustained, whatever was appended."""
        scrapes = Scrapes(expected=30, ok=27, failed=1, missed=2, overrun=3, duration_p50_s=0.9,
                          duration_p99_s=1.2, duration_max_s=1.3)
        assert shortfalls(scrapes, offered_per_s=100_000, appended_per_s=100_000) == (
            "2 of 30 scrapes missed", "1 scrapes failed", "3 scrapes took the whole interval")


class TestRamp:
    def ramp(self, history: list[tuple[int, bool]], *, refine: int = 1, max_targets: int = 16) -> int | None:
        return next_targets(history, start=1, factor=2.0, max_targets=max_targets, refine=refine)

    def test_doubles_while_sustained(self) -> None:
        """1, 2, 4, 8, 16 while every step holds, and stops at the most targets there are."""
        assert [self.ramp([(k, True) for k in done]) for done in ([], [1], [1, 2], [1, 2, 4], [1, 2, 4, 8])] == [
            1, 2, 4, 8, 16]
        assert self.ramp([(k, True) for k in (1, 2, 4, 8, 16)]) is None

    def test_caps_the_last_step_at_the_targets_there_are(self) -> None:
        """With 12 targets, 8 is followed by 12, not 16."""
        assert self.ramp([(1, True), (2, True), (4, True), (8, True)], max_targets=12) == 12

    def test_tries_the_middle_once_after_the_first_failure(self) -> None:
        """4 held and 8 did not: try 6, then stop whatever 6 did."""
        history = [(1, True), (2, True), (4, True), (8, False)]
        assert self.ramp(history) == 6
        assert self.ramp([*history, (6, True)]) is None
        assert self.ramp([*history, (6, False)]) is None

    def test_bisects_as_often_as_asked(self) -> None:
        """With two refinements: 8 failed, 6 held, so 7."""
        assert self.ramp([(1, True), (2, True), (4, True), (8, False), (6, True)], refine=2) == 7

    def test_nothing_between_adjacent_counts(self) -> None:
        """1 held and 2 did not: there is nothing to try between them."""
        assert self.ramp([(1, True), (2, False)]) is None

    def test_a_failing_first_step_ends_the_ramp(self) -> None:
        """If one target is already too many there is no smaller step."""
        assert self.ramp([(1, False)]) is None


class TestQuietPhase:
    def test_middle_of_the_longest_unchanged_run(self) -> None:
        """A counter that rose at 10.2 and 10.4 (period 1 s) is quiet longest from 10.4 to 11.1: phase 0.75."""
        samples = [(10.0 + i / 10, 0.0 if i < 2 else 5.0 if i < 4 else 9.0) for i in range(12)]
        assert quiet_phase(samples, 1.0) == pytest.approx(0.75)

    def test_a_counter_that_never_moves(self) -> None:
        """Nothing appended: the whole run is quiet, and its middle is the phase."""
        assert quiet_phase([(20.0, 1.0), (20.5, 1.0), (21.0, 1.0)], 1.0) == pytest.approx(0.5)
