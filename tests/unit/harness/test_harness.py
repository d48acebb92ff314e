"""Specification of the process harness and the benchmarks' progress: a
scrape is read with prometheus_client's parser and keyed as the exposition
writes each series, histograms become Prometheus's quantiles, a missing
program is named with how to install it, and progress is a bar on a
terminal and a line per step elsewhere."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from benchmarks._progress import Progress
from harness.procs import MissingBinaryError, require_binary
from harness.scrape import histogram_buckets, histogram_delta, histogram_quantile, sample_values, series_key

GOLDEN = Path(__file__).parents[2] / "golden" / "scrape-demo.prom"
TEXT = """\
# HELP rainier_lag_seconds Lag.
# TYPE rainier_lag_seconds histogram
rainier_lag_seconds_bucket{le="0.1"} 5.0
rainier_lag_seconds_bucket{le="1.0"} 9.0
rainier_lag_seconds_bucket{le="+Inf"} 10.0
rainier_lag_seconds_count 10.0
rainier_lag_seconds_sum 3.5
# TYPE rainier_events_total counter
rainier_events_total{entity="chip",why="a \\"quoted\\" reason"} 2.0
# TYPE other_gauge gauge
other_gauge 7.0
"""


class TestSamples:
    def test_keys_are_the_series_as_written(self) -> None:
        """Every sample is keyed by its series exactly as the exposition writes it, escapes included."""
        assert sample_values(TEXT) == {
            'rainier_lag_seconds_bucket{le="0.1"}': 5.0, 'rainier_lag_seconds_bucket{le="1.0"}': 9.0,
            'rainier_lag_seconds_bucket{le="+Inf"}': 10.0, "rainier_lag_seconds_count": 10.0,
            "rainier_lag_seconds_sum": 3.5, 'rainier_events_total{entity="chip",why="a \\"quoted\\" reason"}': 2.0,
            "other_gauge": 7.0,
        }

    def test_the_golden_scrape_reads_line_for_line(self) -> None:
        """Each sample line of the golden scrape is one key, the line's own series text."""
        lines = [line for line in GOLDEN.read_text().splitlines() if line and not line.startswith("#")]
        keys = sample_values(GOLDEN.read_text())
        assert (len(keys), [line for line in lines if not any(line.startswith(f"{k} ") for k in keys)]) == (
            len(lines), [])

    def test_only_keeps_the_named_families(self) -> None:
        """With ``only``, just the samples whose names start with those prefixes are parsed."""
        assert sample_values(TEXT, only=("other_", "rainier_lag_seconds_count")) == {
            "other_gauge": 7.0, "rainier_lag_seconds_count": 10.0}

    def test_series_key_without_labels(self) -> None:
        """A series without labels is its bare name."""
        assert series_key("up", {}) == "up"


class TestHistograms:
    def test_buckets_and_quantiles(self) -> None:
        """Buckets come back sorted by bound, and quantiles interpolate inside a bucket as Prometheus does."""
        values = sample_values(TEXT)
        buckets = histogram_buckets(values, "rainier_lag_seconds")
        assert buckets == [(0.1, 5.0), (1.0, 9.0), (float("inf"), 10.0)]
        assert (histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)) == (0.1, 1.0)

    def test_delta_of_two_scrapes(self) -> None:
        """The buckets counted between two scrapes are the differences, bucket by bucket; none counted is None."""
        values = sample_values(TEXT)
        delta = histogram_delta(values, values, "rainier_lag_seconds")
        assert (delta, histogram_quantile(0.5, delta)) == ([(0.1, 0.0), (1.0, 0.0), (float("inf"), 0.0)], None)


class TestPrograms:
    def test_a_missing_program_says_how_to_install_it(self) -> None:
        """A program neither on PATH nor at a given path raises, naming its package and scripts/install-tools."""
        with pytest.raises(MissingBinaryError, match=r"no-such-tool is missing: sudo apt-get install pkg-x "
                                                     r"\(or sudo scripts/install-tools pkg-x\)"):
            require_binary("no-such-tool", package="pkg-x", also=["/nonexistent/no-such-tool"])


class TestProgress:
    def test_a_line_per_step_off_a_terminal(self) -> None:
        """Off a terminal each step and note is a line of its own, with the prefix and the time left."""
        out = io.StringIO()
        progress = Progress(2, prefix="bench x: ", stream=out, tty=False)
        progress.note("starting")
        progress.step("run 1 of 2", left_fraction=0.5)
        progress.step("run 2 of 2")
        progress.close()
        lines = out.getvalue().splitlines()
        assert [lines[0], lines[1].split(", elapsed")[0], lines[2]] == [
            "bench x: starting", "bench x: run 1 of 2", "bench x: run 2 of 2"]
        assert "s left" in lines[1]

    def test_a_bar_redrawn_on_a_terminal(self) -> None:
        """On a terminal the steps redraw one bar in place, and closing ends its line."""
        out = io.StringIO()
        progress = Progress(4, stream=out, tty=True)
        progress.step("one")
        progress.step("two")
        progress.close()
        text = out.getvalue()
        assert (text.count("\r"), text.count("\n"), text.endswith("\n")) == (2, 1, True)
        assert "[" + "#" * 12 + "." * 12 + "] two" in text
