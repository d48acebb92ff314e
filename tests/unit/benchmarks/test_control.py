"""Specification of ``python -m benchmarks control``, the control campaign: its
arithmetic (exposure in chip-days, the rate a day per 10,000 chips and its
exact 95 % Poisson bound, raises by class and cause) on hand-made runs, and
its short form: a demo-sized fleet for three simulated minutes in both
profiles at 1 s and 5 s ticks, through the job mix, a monitor restart and a
broker outage, in which a healthy fleet raises nothing."""

from __future__ import annotations

import io
from typing import Any

import pytest

from benchmarks.__main__ import main
from benchmarks._progress import Progress
from benchmarks.control import ControlRun, RunResult, campaign, campaign_mix, plan, run_control
from benchmarks.control.report import summarise
from benchmarks.detect.alarms import poisson_upper
from benchmarks.detect.fleets import present_chips

SHORT_S = 180.0  # long enough for the mix's every phase, a restart and an outage; ~1 s of CPU a 1 s-tick run


def row(entity: str, after: str, reasons: list[str]) -> dict[str, Any]:
    return {"profile": "training", "tick_s": 1.0, "seed": 1, "tick": 5, "t_s": 5.0, "entity": entity,
            "id": "s0/u0/n0", "index": 0, "after": after, "reasons": reasons, "onset_tick": 5, "phase": "running",
            "recent_phases": [], "evidence": {}}


def result(chips: int, ticks: int, tick_s: float, raises: list[dict[str, Any]]) -> RunResult:
    run = ControlRun(profile="training", tick_s=tick_s, ultraservers=1, seed=1, seconds=ticks * tick_s)
    return RunResult(run, chips, ticks, raises=raises, cpu_s=10.0)


class TestTheArithmetic:
    def test_exposure_is_present_chips_times_simulated_days(self) -> None:
        """Two runs, 1,000 chips for a day at 1 s and 3,000 chips for 2 h at 5 s: 1,250 chip-days, and the CPU
        they cost is per chip-day of it."""
        report = summarise([result(1_000, 86_400, 1.0, []), result(3_000, 1_440, 5.0, [])], config={}, wall_s=0.0)
        assert (report["chip_days"], report["cpu_s_per_chip_day"]) == pytest.approx((1_250.0, 20.0 / 1_250.0))

    def test_no_raise_bounds_the_rate_by_three_over_the_exposure(self) -> None:
        """No raise in 10,000 chip-days: rate 0, and the 95 % bound 2.996 a day per 10k chips (3.0 / exposure
        in units of 10k chip-days), in every class."""
        report = summarise([result(10_000, 86_400, 1.0, [])], config={}, wall_s=0.0)
        bounds = {c["upper_95_per_day_per_10k_chips"] for c in report["by_class"].values()}
        assert (report["raises"], report["per_day_per_10k_chips"], report["upper_95_per_day_per_10k_chips"],
                bounds) == (0, 0.0, pytest.approx(2.9957, abs=1e-4), {report["upper_95_per_day_per_10k_chips"]})

    def test_raises_count_by_class_and_cause_with_the_exact_poisson_bound(self) -> None:
        """Three raises in 20,000 chip-days: 1.5 a day per 10k chips, bound 7.754 / 2 (chi-square(0.95, 8) / 2
        over 2 units); two chip stragglers and a node's cooling, each class its own exact bound."""
        raises = [row("chip", "straggler", ["efficiency"]), row("chip", "straggler", ["efficiency"]),
                  row("node", "cooling_degraded", ["temperature"])]
        report = summarise([result(20_000, 86_400, 1.0, raises)], config={}, wall_s=0.0)
        assert (report["per_day_per_10k_chips"], report["upper_95_per_day_per_10k_chips"],
                report["by_class"]["chip"]["upper_95_per_day_per_10k_chips"], report["by_cause"],
                report["by_class"]["cooling"]["false_alarms"], report["by_class"]["node"]["false_alarms"]) == (
            1.5, pytest.approx(7.7537 / 2, abs=1e-3), pytest.approx(poisson_upper(2) / 2),
            {"chip:straggler [efficiency]": 2, "node:cooling_degraded [temperature]": 1}, 1, 0)


class TestThePlan:
    def test_chip_days_ask_for_enough_seeds_in_every_section(self) -> None:
        """100 chip-days over two profiles and two ticks of 2 UltraServers for 5 minutes: every section holds a
        quarter of it, in whole runs of the same seeds."""
        runs = plan(profiles=["training", "realistic"], ticks_s=[1.0, 5.0], ultraservers=2, seconds=300.0,
                    seeds=None, chip_days=100.0, restart_down_s=5.0, outage_s=30.0, noise=1.0)
        per_run = {p: present_chips(p, 2) * 300.0 / 86_400.0 for p in ("training", "realistic")}
        sections = {(r.profile, r.tick_s): 0.0 for r in runs}
        for r in runs:
            sections[r.profile, r.tick_s] += per_run[r.profile]
        assert (min(sections.values()) >= 25.0, {r.seed for r in runs if r.tick_s == 1.0} ==
                {r.seed for r in runs if r.tick_s == 5.0}) == (True, True)

    def test_a_run_too_short_for_its_disturbances_is_refused(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A minute at 5 s ticks ends inside the broker outage: one line on stderr, exit 2, nothing run."""
        code = main(["control", "--ultraservers", "2", "--seconds", "60", "--tick", "5"])
        assert (code, capsys.readouterr().err) == (
            2, "benchmarks control: runs of 60 s at 5 s ticks end before the restart and the outage do: give more "
               "--seconds\n")

    def test_the_mix_scales_its_gaps_to_the_run(self) -> None:
        """A 90-minute run's jobs last 45 minutes, checkpoint every 15 to 30 and keep the mix's own phase
        lengths; a 3-minute run's phases shrink to fit."""
        long, short = campaign_mix(5_400.0), campaign_mix(180.0)
        assert ((long.median_duration_s, long.checkpoint_every_s, long.checkpoint_s, long.restart_s),
                (short.checkpoint_s, short.eval_s)) == (
            (2_700.0, (900.0, 1_800.0), (20.0, 90.0), (120.0, 540.0)), ((6.0, 12.0), (9.0, 18.0)))


@pytest.fixture(scope="module")
def short_form() -> dict[str, Any]:
    """The campaign's short form: both profiles at 1 s and 5 s ticks, 2 UltraServers for three minutes."""
    runs = plan(profiles=["training", "realistic"], ticks_s=[1.0, 5.0], ultraservers=2, seconds=SHORT_S, seeds=1,
                chip_days=None, restart_down_s=5.0, outage_s=30.0, noise=1.0)
    return campaign(runs, progress=Progress(len(runs), stream=io.StringIO()))


class TestTheShortForm:
    def test_exposure_is_each_runs_present_chips_times_its_days(self, short_form: dict[str, Any]) -> None:
        """Each section's exposure is its fleet's present chips times three minutes; the whole is their sum,
        and its bound the exact Poisson bound of its count over it."""
        expected = [present_chips(p, 2) * SHORT_S / 86_400.0 for p in ("training", "training", "realistic",
                                                                        "realistic")]
        units = sum(expected) / 1e4
        got = [*(s["chip_days"] for s in short_form["sections"]), short_form["upper_95_per_day_per_10k_chips"]]
        assert got == pytest.approx([*expected, poisson_upper(short_form["raises"]) / units])

    def test_every_run_went_through_the_disturbances_and_the_mix(self, short_form: dict[str, Any]) -> None:
        """Every run restarted its monitor from both checkpoints, lost frames to the restart and the outage
        (counted by sequence), and held jobs that started, checkpointed, evaluated, restarted and ended; the
        campaign's UltraServers were idle between jobs (a small fleet's mix fills it at the start)."""
        seen = [(s["restarts"] == s["runs"], s["frames_lost"] > 0,
                 {"start", "checkpoint", "eval", "restarting", "ended"} <= s["phase_entries"].keys())
                for s in short_form["sections"]]
        idle = sum(s["ultraserver_seconds_by_phase"].get("idle", 0.0) for s in short_form["sections"])
        assert (seen, idle > 0) == ([(True, True, True)] * 4, True)

    def test_a_healthy_fleet_raises_nothing(self, short_form: dict[str, Any]) -> None:
        """No raise in any section: every one would be a false alarm, listed with its evidence."""
        assert short_form["raises_list"] == []


class TestAfterTheOutage:
    def test_the_first_analysis_after_an_outage_raises_nothing(self) -> None:
        """Five minutes of the demo-sized training fleet at 5 s ticks, a 30 s broker outage 3.5 minutes in:
        nothing is raised when the frames come back (a node's first NeuronLink pace after the gap is one
        interval's, not the gap's: test_nodepaths.py, TestTheFirstSampleAfterAGap)."""
        raised = run_control(ControlRun(profile="training", tick_s=5.0, ultraservers=2, seed=700_000,
                                        seconds=300.0)).raises
        assert [(r["tick"], r["id"], r["after"], r["reasons"]) for r in raised] == []
