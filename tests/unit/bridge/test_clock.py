"""Specification of the bridge's sample clock (rainierd/bridge/_clock.py):
time from the reports' own periods, never ahead of the wall clock, stepped
(and said so) when it cannot follow them."""

from __future__ import annotations

import pytest

from rainierd.bridge import SampleClock, Tick


def clock() -> SampleClock:
    return SampleClock(max_lag_s=30.0, clamp_ratio=0.02)


class TestSampleClock:
    def test_it_starts_at_the_first_lines_wall_time(self) -> None:
        """The first report is stamped with the wall time it was read at."""
        assert clock().advance(1.0, wall_s=1_000.0) == Tick(1_000.0, 0.0, first=True)

    def test_a_backlog_read_at_once_keeps_its_periods(self) -> None:
        """After a 5 s stall, five queued reports read 6 ms apart are stamped a period apart, lagging the wall."""
        c = clock()
        c.advance(1.0, wall_s=1_000.0)
        ticks = [c.advance(1.0, wall_s=1_006.0 + 0.006 * k) for k in range(5)]
        assert [(t.t_s, t.step) for t in ticks] == [(1_001.0 + k, None) for k in range(5)]
        assert [t.lag_s for t in ticks] == pytest.approx([5.0 - 0.994 * k for k in range(5)])
        assert [t.excess_s for t in ticks] == pytest.approx([5.0 - 0.994 * k - 0.06 for k in range(5)], abs=1e-3)

    def test_a_steady_drift_is_no_excess(self) -> None:
        """Reports written every 1.005 s with a period of 1.000 s: the lag grows, its floor with it, no excess."""
        c = clock()
        ticks = [c.advance(1.0, wall_s=1_000.0 + 1.005 * k) for k in range(100)]
        assert (ticks[-1].lag_s, max(t.excess_s for t in ticks)) == (pytest.approx(0.495), 0.0)

    def test_it_is_never_ahead_of_the_wall_clock(self) -> None:
        """A late start (the first line had waited): the next report is pulled back to the wall and the step said."""
        c = clock()
        c.advance(1.0, wall_s=1_000.0)
        assert c.advance(1.0, wall_s=1_000.01) == Tick(1_000.01, 0.0, step="ahead")

    def test_a_pull_within_the_clamp_is_quiet(self) -> None:
        """Read 10 ms early against a 1 s period: pulled back to the wall without a step (a rate off by 1 %)."""
        c = clock()
        c.advance(1.0, wall_s=1_000.0)
        assert c.advance(1.0, wall_s=1_000.99) == Tick(1_000.99, 0.0)

    def test_too_far_behind_it_steps_to_the_wall(self) -> None:
        """More than max_lag_s behind the wall clock: stepped to it, said."""
        c = clock()
        c.advance(1.0, wall_s=1_000.0)
        assert c.advance(1.0, wall_s=1_040.0) == Tick(1_040.0, 0.0, step="behind")

    def test_a_report_without_a_period_is_stamped_now(self) -> None:
        """No usable period: the wall time, said as a step."""
        c = clock()
        c.advance(1.0, wall_s=1_000.0)
        assert c.advance(None, wall_s=1_002.5) == Tick(1_002.5, 0.0, step="no_period")

    def test_it_never_goes_backwards(self) -> None:
        """A wall clock stepped back by NTP does not take the sample clock back with it."""
        c = clock()
        c.advance(1.0, wall_s=1_000.0)
        assert c.advance(1.0, wall_s=990.0).t_s == 1_000.0
