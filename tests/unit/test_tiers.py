"""The test suite's own tiers and timing (pyproject.toml's markers, tests/conftest.py, harness/timing.py)."""

from __future__ import annotations

import subprocess

import pytest

from harness import timing


class TestUnitTier:
    def test_a_unit_test_cannot_start_a_process(self) -> None:
        """Outside the integration tier, starting a process fails, saying how to move the test."""
        with pytest.raises(AssertionError, match="mark it integration"):
            subprocess.run(["true"], check=False)

    def test_this_test_is_in_the_unit_tier(self, request: pytest.FixtureRequest) -> None:
        """A test using no process fixture, outside tests/integration/, carries no tier or tool marker."""
        assert {m.name for m in request.node.iter_markers()} == set()


class TestSlack:
    def test_within_scales_by_the_one_slack_factor(self) -> None:
        """within(s) is s times SLACK."""
        assert timing.within(10.0) == 10.0 * timing.SLACK

    @pytest.mark.parametrize("raw", ["0.5", "fast", "nan"])
    def test_a_slack_below_one_or_not_a_number_is_refused(self, raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """RAINIERD_TEST_SLACK must be a number >= 1: a slack cannot make waits shorter than on a quiet machine."""
        monkeypatch.setenv("RAINIERD_TEST_SLACK", raw)
        with pytest.raises(ValueError, match="RAINIERD_TEST_SLACK must be a number >= 1"):
            timing._slack()

    def test_the_fast_tick_is_half_the_tick(self) -> None:
        """The one deliberately different tick is named as a fraction of the harness tick."""
        assert (timing.TICK_S, timing.FAST_TICK_S) == (0.5, 0.25)
