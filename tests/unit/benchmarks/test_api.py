"""``python -m benchmarks api --tick-pairs N --follow-command CMD``: the
figures it derives (per window, on against off, a follower's CPU share) and
how it finds and reads a follower's processes, on given data."""

from __future__ import annotations

import pytest

from benchmarks._apitick import Tick, compare, window_report
from benchmarks._follow import cpu_shares, follower_command, process_tree, tree_cpu_s


def _tick(analysis_s: float, *, worst_s: float = 0.002, backlog: int = 0, overloaded: bool = False) -> Tick:
    return Tick(t_s=0.0, analysis_s=analysis_s, lag_s=0.5, loop_lag_worst_s=worst_s, backlog_messages=backlog,
                overloaded=overloaded)


def _stat(pid: int, name: str, times: tuple[int, int, int, int]) -> str:
    """A /proc/<pid>/stat line: state, ppid, pgrp, session, tty, tpgid, flags, four fault counts, then ``times``
    (utime, stime, cutime, cstime)."""
    return f"{pid} ({name}) S 1 {pid} {pid} 0 -1 4194304 100 0 0 0 {' '.join(map(str, times))} 20 0 1 0\n"


class TestWindowReport:
    def test_a_window_reports_its_analyses_and_its_sampled_loop_lag(self) -> None:
        """Medians, p99 and max of the analyses' times and of the loop lag, the monitor's own worst lag, the
        largest backlog and how many ticks were overloaded."""
        ticks = [_tick(0.3), _tick(0.5, worst_s=0.004, backlog=7, overloaded=True), _tick(0.4)]
        report = window_report("on", ticks, [0.001, 0.003])
        assert report == {
            "kind": "on", "ticks": 3,
            "analysis_s": {"median": 0.4, "p99": pytest.approx(0.498), "max": 0.5},
            "loop_lag_s": {"median": 0.002, "p99": pytest.approx(0.00298), "max": 0.003},
            "monitor_loop_lag_worst_s": {"median": 0.002, "p99": pytest.approx(0.00396), "max": 0.004},
            "lag_s": {"median": 0.5, "p99": 0.5, "max": 0.5},
            "backlog_messages_max": 7, "overloaded_ticks": 1,
        }

    def test_an_empty_window_reports_none(self) -> None:
        """A window no analysis finished in has no figures rather than zeros."""
        report = window_report("off", [], [])
        assert (report["ticks"], report["analysis_s"], report["backlog_messages_max"]) == (
            0, {"median": None, "p99": None, "max": None}, None)


class TestCompare:
    def test_on_against_off_pools_each_kind_and_pairs_the_windows_in_order(self) -> None:
        """The ratios are of the pooled medians and p99; each pair's is window 2i+1 (on) over window 2i (off)."""
        ticks = {"off": [_tick(0.2), _tick(0.2), _tick(0.4), _tick(0.4)],
                 "on": [_tick(0.3), _tick(0.3), _tick(0.4), _tick(0.4)]}
        lags = {"off": [0.001, 0.001], "on": [0.002, 0.002]}
        windows = [window_report("off", ticks["off"][:2], lags["off"][:1]),
                   window_report("on", ticks["on"][:2], lags["on"][:1]),
                   window_report("off", ticks["off"][2:], lags["off"][1:]),
                   window_report("on", ticks["on"][2:], lags["on"][1:])]
        result = compare(windows, ticks, lags)
        assert result["on_over_off"] == {"analysis_s_median": pytest.approx(0.35 / 0.3),
                                         "analysis_s_p99": pytest.approx(1.0),
                                         "loop_lag_s_median": pytest.approx(2.0), "loop_lag_s_p99": pytest.approx(2.0)}
        assert result["pairs_on_over_off_median"] == [{"analysis_s": pytest.approx(1.5), "loop_lag_s": 2.0},
                                                      {"analysis_s": 1.0, "loop_lag_s": 2.0}]

    def test_no_windows_no_ratio(self) -> None:
        """A run that only follows (no pairs) compares nothing: every ratio is None."""
        result = compare([], {"follow": [_tick(0.3)]}, {"follow": [0.001]})
        assert set(result["on_over_off"].values()) == {None}
        assert result["pairs_on_over_off_median"] == []


class TestFollower:
    def test_the_url_goes_where_the_command_asks_for_it(self) -> None:
        """Every ``{url}`` becomes the monitor's URL; nothing else in the command changes."""
        assert follower_command("top --url {url} --title '{url}'", "http://127.0.0.1:9") == (
            "top --url http://127.0.0.1:9 --title 'http://127.0.0.1:9'")

    def test_a_command_without_url_is_refused(self) -> None:
        """A follower that is not told where the monitor is would follow nothing: ValueError."""
        with pytest.raises(ValueError, match="no \\{url\\}"):
            follower_command("top", "http://127.0.0.1:9")

    def test_the_tree_is_the_root_and_its_descendants_once_parents_first(self) -> None:
        """Children of children are found; a pid listed twice, and processes outside the tree, are not counted."""
        children = {10: [11, 12], 11: [13], 12: [13], 13: [], 99: [100]}
        assert process_tree(10, lambda pid: children.get(pid, [])) == [10, 11, 12, 13]

    def test_cpu_counts_own_and_reaped_children_time_of_each_process(self) -> None:
        """utime + stime + cutime + cstime of each line, in clock ticks; a name with spaces and a parenthesis
        does not shift the fields."""
        stats = [_stat(10, "bash", (100, 50, 30, 20)), _stat(11, "tmux: a) b", (7, 3, 0, 0))]
        assert tree_cpu_s(stats, 100) == pytest.approx(2.1)

    def test_cpu_share_over_the_run_and_once_settled(self) -> None:
        """The share is CPU seconds over wall seconds between the first and last sample; settled, from the first
        sample at or after the settling time; None from fewer than two samples."""
        samples = [(0.0, 1.0, 10), (5.0, 2.0, 20), (10.0, 2.5, 30), (20.0, 3.5, 30)]
        assert cpu_shares(samples, settle_s=10.0) == {"cpu_share_of_one_core": pytest.approx(0.125),
                                                      "cpu_share_of_one_core_settled": pytest.approx(0.1)}
        assert cpu_shares(samples[:1], settle_s=0.0) == {"cpu_share_of_one_core": None,
                                                          "cpu_share_of_one_core_settled": None}
