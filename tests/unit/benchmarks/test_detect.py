"""Specification of ``python -m benchmarks detect``: how runs are graded against the
injected faults (hand-made events at a 0.5 s tick), how durations in seconds
become ticks, and one tiny real run through the command line."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.detect import RunResult, fault_runs, grade, ticks_of
from benchmarks.detect.alarms import poisson_upper, rates_by_class
from benchmarks.detect.grading import control
from benchmarks.detect.jobgrading import culprit_found, grade_job_rows
from benchmarks.detect.jobrows import JobRecord, JobRunResult, job_row_runs
from benchmarks.detect.phases import PhaseLog
from benchmarks.detect.running import control_shapes
from rainierd.core.detect import Event
from rainierd.fleet.topology import build_fleet
from rainierd.sim.faults import Fault, FaultKind, fault_ultraservers
from rainierd.sim.profile import PROFILES


def raise_(tick: int, entity: str, id_: int) -> Event:
    return Event(tick, entity, id_, "healthy", "degraded", ("test",), tick)


def clear(tick: int, entity: str, id_: int) -> Event:
    return Event(tick, entity, id_, "degraded", "healthy", (), tick)


# At 0.5 s a tick, the 10 s grace is 20 ticks and the 60 s tail 120.
SAMPLE_TICK_S = 0.5  # the graded runs' sample tick (in-process, no clock): not harness/timing.py's TICK_S
DOWN = Fault(FaultKind.NL_DOWN, 5, 0.0, 100, 340)
FLAPPING = Fault(FaultKind.NL_FLAPPING, 7, 3.0, 100, 200)
PORT_DOWN = Fault(FaultKind.EFA_DOWN, 3, 0.0, 100, 340)
THROTTLE = Fault(FaultKind.CHIP_THROTTLE, 2, 0.7, 100, 340)
EVENTS = [
    raise_(50, "chip", 9),  # no fault there: a false alarm
    raise_(101, "neuronlink", 7),  # the flapping link, found at once ...
    raise_(102, "efa", 3),
    raise_(104, "neuronlink", 5),
    clear(150, "neuronlink", 7),  # ... cleared 50 ticks before the fault ends ...
    raise_(160, "neuronlink", 7),  # ... and raised again: a duplicate
    clear(210, "neuronlink", 7),
    clear(360, "neuronlink", 5),
    # The down port never clears; the throttled chip is never found.
]


def graded_rows() -> list[dict[str, object]]:
    run = RunResult([DOWN, FLAPPING, PORT_DOWN, THROTTLE], EVENTS, chips=64, ticks=460, tick_s=SAMPLE_TICK_S)
    rows: list[dict[str, object]] = grade([run], ultraservers=1)["rows"]
    return rows


def row(**changes: object) -> dict[str, object]:
    """Return a graded row of an undetected fault, with ``changes``."""
    base: dict[str, object] = {
        "faults": 1, "detected": 0, "duplicates": 0, "recall": 0.0, "precision": 1.0, "f1": 0.0,
        "ttd_median_ticks": None, "ttd_p95_ticks": None, "ttd_median_s": None, "ttd_p95_s": None,
        "ttc_median_s": None, "ttc_p95_s": None, "cleared_early": 0, "not_cleared": 0,
    }
    return base | changes


class TestGrade:
    def test_rows_at_half_second_ticks(self) -> None:
        """Detection, duplicates, false alarms, early and missing clears, with times in ticks and seconds."""
        link_precision = 2 / 3  # two links found, one duplicate raise
        assert graded_rows() == [
            # The chip false alarm leaves chips no true positive: precision 0.
            row(kind="chip_throttle", severity=0.7, hard=False, precision=0.0),
            row(kind="efa_down", severity=0.0, hard=True, detected=1, recall=1.0, f1=1.0,
                ttd_median_ticks=2, ttd_p95_ticks=2.0, ttd_median_s=1.0, ttd_p95_s=1.0, not_cleared=1),
            row(kind="nl_down", severity=0.0, hard=True, detected=1, recall=1.0, precision=link_precision,
                f1=pytest.approx(0.8), ttd_median_ticks=4, ttd_p95_ticks=4.0, ttd_median_s=2.0, ttd_p95_s=2.0,
                ttc_median_s=10.0, ttc_p95_s=10.0),
            row(kind="nl_flapping", severity=3.0, hard=False, detected=1, duplicates=1, recall=1.0,
                precision=link_precision, f1=pytest.approx(0.8), ttd_median_ticks=1, ttd_p95_ticks=1.0,
                ttd_median_s=0.5, ttd_p95_s=0.5, ttc_median_s=-25.0, ttc_p95_s=-25.0, cleared_early=1),
        ]

    def test_positives_by_entity(self) -> None:
        """Found faults are true positives; duplicates and unexplained raises are false ones."""
        run = RunResult([DOWN, FLAPPING, PORT_DOWN, THROTTLE], EVENTS, chips=64, ticks=460, tick_s=SAMPLE_TICK_S)
        report = grade([run], ultraservers=1)
        assert (report["true_positives"], report["false_positives"]) == (
            {"neuronlink": 2, "efa": 1}, {"neuronlink": 1, "efa": 0, "chip": 1})

    def test_grace_is_in_seconds(self) -> None:
        """A raise 10 s after the fault's end still detects it at 0.5 s ticks (20 ticks), and 10.5 s does not."""
        fault = Fault(FaultKind.NL_DOWN, 5, 0.0, 100, 340)
        late = [grade([RunResult([fault], [raise_(340 + extra, "neuronlink", 5)], chips=64, ticks=600,
                                 tick_s=SAMPLE_TICK_S)], ultraservers=1)["rows"][0]["detected"] for extra in (20, 21)]
        assert late == [1, 0]


class TestSeconds:
    def test_rounds_up(self) -> None:
        """Durations become whole ticks, rounded up, with float error in the quotient ignored."""
        assert [ticks_of(10, 0.3), ticks_of(60, 0.5), ticks_of(0.3, 0.1), ticks_of(60, 7)] == [34, 120, 3, 9]

    def test_faults_paired_across_tick_lengths(self) -> None:
        """Every tick length gets the same faults, lasting the same seconds (flapping aside) and starting at
        the same second, rounded up to a whole tick."""
        def shape(tick_s: float) -> list[tuple[str, int, float, float]]:
            return [(str(f.kind), f.target, f.start_tick * tick_s,
                     0.0 if f.kind is FaultKind.NL_FLAPPING else (f.end_tick - f.start_tick) * tick_s)
                    for _us, faults, _seed, _ticks in fault_runs(1, 4, tick_s=tick_s) for f in faults]

        second = shape(1.0)
        assert shape(0.5) == second
        assert shape(5.0) == [(kind, target, 5.0 * -(-start // 5.0), length)
                              for kind, target, start, length in second]


class TestCommandLine:
    def test_tiny_run(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A quick run prints only the JSON report on stdout, a section per profile and tick, and its
        progress on stderr."""
        code = main(["detect", "--quick", "--ultraservers", "2", "--control-ultraservers", "2",
                     "--control-seconds", "120", "--kinds", "nl_down", "--profile", "ideal", "--tick", "1", "0.5",
                     "--jobs", "2", "--json"])
        out, err = capsys.readouterr()
        report = json.loads(out)
        ideal = report["profiles"]["ideal"]
        assert (code, report["headline"], list(ideal["ticks"])) == (0, {"profile": "ideal", "tick_s": 1.0},
                                                                    ["1.0", "0.5"])
        half = ideal["ticks"]["0.5"]
        assert [(r["kind"], r["faults"]) for r in half["rows"]] == [("nl_down", 2)]
        assert half["comparison"]["baseline_tick_s"] == 1.0
        assert list(half["comparison"]["rows"][0]) == ["kind", "severity", "f1", "f1_diff", "ttd_median_s",
                                                       "ttd_median_s_diff"]
        assert "comparison" not in ideal["ticks"]["1.0"]
        assert report["rows"] == ideal["rows"] == ideal["ticks"]["1.0"]["rows"]
        assert (half["control"]["runs"], half["control"]["ticks"]) == (1, 240)
        progress = err.splitlines()
        assert progress[-1].startswith("run 6 of 6 (profile ideal, tick ")
        assert all(line.startswith("run ") for line in progress)

    def test_job_rows(self, capsys: pytest.CaptureFixture[str]) -> None:
        """With --job-rows the report carries the job rows of each section: a down link inside a job of two or
        three UltraServers, its loss by cause against truth and its culprit."""
        code = main(["detect", "--quick", "--ultraservers", "2", "--control-ultraservers", "2",
                     "--control-seconds", "60", "--kinds", "nl_down", "--profile", "ideal", "--job-rows",
                     "--job-row-seeds", "1", "--jobs", "1", "--json"])
        report = json.loads(capsys.readouterr().out)
        rows = report["job_rows"]
        (job,) = rows["jobs"]
        assert (code, rows["runs"], rows["seeds"], [r["kind"] for r in rows["rows"]], report["config"]["job_rows"],
                job["kind"], job["ultraservers"] >= 2, job["culprit"]) == (
            0, 1, 1, ["nl_down"], True, "nl_down", True, ["neuronlink", job["target"]])

    def test_unknown_profile(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown profile is refused before anything runs, on stderr, with exit code 2."""
        code = main(["detect", "--profile", "nonesuch", "--json"])
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        assert "unknown profile nonesuch" in err


def _truth(*jobs: tuple[str, tuple[int, ...], str]) -> Any:
    """A tick's truth as PhaseLog reads it: only the jobs' ids, UltraServers and phases."""
    return SimpleNamespace(jobs=[SimpleNamespace(id=i, ultraservers=us, phase=ph) for i, us, ph in jobs])


class TestJobPhases:
    TOPO = build_fleet(1, 3)

    def log(self) -> PhaseLog:
        """Three UltraServers at 1 s ticks: job a on 0 and 1 checkpoints at tick 2 and ends at tick 4; 2 is idle."""
        log = PhaseLog(3)
        for phase in ("running", "running", "checkpoint", "running"):
            log.record(_truth(("a", (0, 1), phase)))
        log.record(_truth())
        return log

    def test_event_takes_its_ultraservers_phase(self) -> None:
        """An event is attributed to its entity's UltraServer's phase at its tick, with the phases just before."""
        log = self.log()
        node_of_us1 = int(np.flatnonzero(self.TOPO.node_ultraserver == 1)[0])
        rows = [log.attribute(Event(t, "node", node_of_us1, "healthy", "cooling_degraded", ("temperature",), t),
                              self.TOPO, 1.0) for t in (2, 3, 4)]
        assert [(r["phase"], r["recent"]) for r in rows] == [
            ("checkpoint", ["running"]), ("running", ["checkpoint"]), ("ended", ["checkpoint", "running"])]

    def test_idle_and_fleet(self) -> None:
        """An UltraServer no job held is idle; the feed belongs to no UltraServer."""
        log = self.log()
        chip_of_us2 = int(np.flatnonzero(self.TOPO.chip_ultraserver == 2)[0])
        idle = log.attribute(Event(1, "chip", chip_of_us2, "healthy", "throttled", (), 1), self.TOPO, 1.0)
        feed = log.attribute(Event(1, "feed", 0, "healthy", "lost", (), 1), self.TOPO, 1.0)
        assert (idle["phase"], feed["phase"]) == ("idle", "fleet")

    def test_entries_counted(self) -> None:
        """Each job's entries into a phase, and its end, are counted with the UltraServers it held."""
        log = self.log()
        assert (dict(log.entries), dict(log.entered_ultraservers)) == (
            {"checkpoint": 1, "running": 1, "ended": 1}, {"checkpoint": 2, "running": 2, "ended": 2})


def _record(job_id: str, fault: Fault | None, truth: dict[str, float], estimate: dict[str, float],
            culprits: dict[tuple[str, int], float], *, peak: float = 1e4) -> JobRecord:
    record = JobRecord(job_id, (0, 1), fault, peak=peak)
    record.truth.update(truth)
    record.estimate.update(estimate)
    record.culprits.update(culprits)
    record.phases["running"] = 10
    return record


class TestJobRows:
    TOPO = build_fleet(1, 2)
    LINK = Fault(FaultKind.NL_DEGRADED, 5, 0.5, 10, 20)
    CHIP = Fault(FaultKind.CHIP_THROTTLE, 70, 0.7, 10, 20)
    FAN = Fault(FaultKind.COOLING_FAN, 1, 0.6, 10, 20, scope="ultraserver")

    def graded(self, link_estimate: float) -> dict[str, Any]:
        """One run: a link fault charged ``link_estimate`` of a true 100; a throttled chip whose loss the monitor
        splits over two causes and pins on its neighbour; a fan fault that cost nothing; one job with no fault,
        charged 2 of its peak of 10,000."""
        jobs = [
            _record("a", self.LINK, {"degraded_neuronlink": 100.0}, {"degraded_neuronlink": link_estimate},
                    {("neuronlink", 5): link_estimate, ("chip", 3): 1.0}),
            _record("b", self.CHIP, {"thermal_throttle": 100.0}, {"thermal_throttle": 80.0, "straggler": 25.0},
                    {("chip", 71): 105.0}),
            _record("c", self.FAN, {}, {"thermal_throttle": 0.5}, {}),
            _record("d", None, {}, {"straggler": 2.0}, {("chip", 9): 2.0}),
        ]
        return grade_job_rows([JobRunResult(7, "ideal", 1.0, 30, 20, jobs, draw=1)], self.TOPO)

    def test_ratio_and_error(self) -> None:
        """A job charged 95 of a true 100 of one cause has ratio 0.95, a by-cause error of 5 % and is within
        10 %; a job charged 80 + 25 of a true 100 of one cause has ratio 1.05 but a by-cause error of 45 %."""
        jobs = {j["job"]: j for j in self.graded(95.0)["jobs"]}
        assert {k: (j["ratio"], j["cause_ratio"], j["by_cause_error"], j["within"], j["culprit_found"])
                for k, j in jobs.items()} == {
            "a": (0.95, 0.95, pytest.approx(0.05), True, True),
            "b": (1.05, 0.8, pytest.approx(0.45), False, False),
            "c": (None, None, None, None, False),
        }

    def test_wrong_ratio_fails(self) -> None:
        """A job charged 112 of a true 100 misses the 10 % tolerance, and its row says so."""
        graded = self.graded(112.0)
        row = next(r for r in graded["rows"] if r["kind"] == "nl_degraded")
        assert (row["within"], row["graded"], row["ratio_median"], row["by_cause_error_max"]) == (
            0, 1, 1.12, pytest.approx(0.12))

    def test_totals_and_clean_jobs(self) -> None:
        """The totals count graded jobs (the fan fault that cost nothing is not one), and a job with no fault
        charged 2 is a leak of 2 against the faulted jobs' true 200 and its own peak of 10,000."""
        graded = self.graded(95.0)
        fan = next(r for r in graded["rows"] if r["kind"] == "cooling_fan")
        assert {k: graded[k] for k in ("runs", "seeds", "faulted_jobs", "graded_jobs", "within", "culprit_found",
                                       "interrupted")} == {
            "runs": 1, "seeds": 1, "faulted_jobs": 3, "graded_jobs": 2, "within": 1, "culprit_found": 1,
            "interrupted": 0}
        assert (fan["no_loss"], fan["no_loss_estimate_of_peak_max"]) == (1, 0.5 / 1e4)
        assert graded["clean"] == {"jobs": 1, "charged": 1, "estimate_flops_ticks": 2.0, "truth_flops_ticks": 0.0,
                                   "estimate_of_faulted_truth": 0.01, "estimate_of_peak": 2e-4,
                                   "estimate_of_peak_max": 2e-4, "charged_jobs": [{
                                       "seed": 1, "model_seed": 7, "job": "d", "ultraservers": [0, 1],
                                       "estimate_of_peak": 2e-4, "estimate_by_cause": {"straggler": 2.0},
                                       "culprits": [["chip", 9, 2.0]], "culprits_in_own_job": True,
                                       "faults_in_run": ["nl_degraded 0.5 link 5", "chip_throttle 0.7 chip 70",
                                                         "cooling_fan 0.6 ultraserver 1"]}]}

    def test_culprit_inside_the_target(self) -> None:
        """For an UltraServer's fault a chip inside it is the culprit found; a chip of the other one is not;
        for a chip's fault only that chip is."""
        inside, outside = int(np.flatnonzero(self.TOPO.chip_ultraserver == 1)[0]), 0
        assert [culprit_found(("chip", inside), self.FAN, self.TOPO),
                culprit_found(("chip", outside), self.FAN, self.TOPO),
                culprit_found(("chip", 70), self.CHIP, self.TOPO),
                culprit_found(("node", int(self.TOPO.chip_node[70])), self.CHIP, self.TOPO),
                culprit_found(None, self.CHIP, self.TOPO)] == [True, False, True, False, False]

    def test_faults_inside_multi_ultraserver_jobs(self) -> None:
        """Every job-row fault sits in a job of two or more UltraServers, one fault a job, and each seed draws
        different jobs."""
        runs = job_row_runs(2)
        topo = build_fleet(1, 12)
        for jobs, faults, _seed, _ticks, _draw in runs:
            held = [next(j for j in jobs if int(fault_ultraservers(topo, f)[0]) in j.ultraservers) for f in faults]
            assert (len({j.id for j in held}), min(len(j.ultraservers) for j in held)) == (len(faults), 2)
        assert runs[0][0] != runs[len(runs) // 2][0]
        assert {draw for *_, draw in runs} == {0, 1}

    def test_checkpoints_cross_the_fault(self) -> None:
        """With checkpoints every job checkpoints 30 s every 90 s, at 0.5 s ticks too (two begin during the first
        run's first fault); the same jobs and faults are drawn as without."""
        plain, with_checkpoints = job_row_runs(1, tick_s=0.5), job_row_runs(1, tick_s=0.5, checkpoints=True)
        jobs, faults, *_ = with_checkpoints[0]
        fault = faults[0]
        phases = [jobs[0].phase(t) for t in range(fault.start_tick, fault.end_tick)]
        starts = sum(1 for a, b in itertools.pairwise(phases) if (a, b) == (0, 1))
        assert ({(j.checkpoint_every_ticks, j.checkpoint_ticks) for j in jobs}, starts) == ({(180, 60)}, 2)
        assert [(f, [j.ultraservers for j in js]) for js, f, *_ in plain] == [
            (f, [j.ultraservers for j in js]) for js, f, *_ in with_checkpoints]


class TestFalseAlarmReporting:
    """False alarms per day per 10k chips, per entity class, with exact Poisson upper bounds (issue 22 item 8)."""

    @pytest.mark.parametrize(("count", "bound"), [(0, 2.995732), (1, 4.743865), (2, 6.295794), (5, 10.51303),
                                                  (10, 16.96222), (50, 63.28741)])
    def test_upper_bound_matches_the_chi_square_table(self, count: int, bound: float) -> None:
        """The 95 % upper bound is chi2(0.95, 2k + 2) / 2, as tabulated (Garwood's exact interval)."""
        assert poisson_upper(count) == pytest.approx(bound, rel=1e-5)

    def test_upper_bound_refuses_nonsense(self) -> None:
        """A negative count or a confidence of 1 has no bound."""
        with pytest.raises(ValueError, match="Poisson"):
            poisson_upper(-1)
        with pytest.raises(ValueError, match="Poisson"):
            poisson_upper(3, confidence=1.0)

    def test_rates_per_class(self) -> None:
        """Raised events count under their entity's class, a node's cooling state under cooling, clears
        never; every class is listed, with its rate and bound over the control's chip-days."""
        events = [raise_(1, "chip", 3), raise_(2, "chip", 4), raise_(3, "efa", 1), clear(4, "efa", 1),
                  Event(5, "node", 2, "healthy", "cooling_degraded", ("temperature",), 5),
                  Event(6, "feed", 0, "healthy", "lost", (), 6)]
        rates = rates_by_class(events, chip_days=5_000.0)  # half a unit of 10k chip-days
        assert {k: v["false_alarms"] for k, v in rates.items()} == {
            "chip": 2, "neuronlink": 0, "efa": 1, "cooling": 1, "node": 0, "ultraserver": 0, "feed": 1}
        assert (rates["chip"]["per_day_per_10k_chips"], rates["node"]["upper_95_per_day_per_10k_chips"]) == (
            4.0, pytest.approx(2 * 2.995732, rel=1e-5))

    def test_control_reports_classes_and_composition(self) -> None:
        """The control's totals, its exact bound and its classes; a big short run and a small long one are
        listed apart in its composition."""
        big = RunResult([], [raise_(10, "efa", 5)], chips=4_096, ticks=3_600, tick_s=1.0)
        small = RunResult([], [], chips=1_024, ticks=21_600, tick_s=1.0)
        c = control([big, small], 3_600.0)
        days = (4_096 * 3_600 + 1_024 * 21_600) / 86_400
        assert (c["chip_days"], c["false_alarms"], c["upper_95_per_day_per_10k_chips"],
                c["by_class"]["efa"]["false_alarms"], c["composition"]) == (
            pytest.approx(days), 1, pytest.approx(4.743865 / (days / 1e4), rel=1e-5), 1,
            [{"runs": 1, "chips": 1_024, "seconds": 21_600.0, "chip_days": 256.0},
             {"runs": 1, "chips": 4_096, "seconds": 3_600.0, "chip_days": pytest.approx(4_096 / 24)}])

    def test_control_shapes_reach_the_chip_days(self) -> None:
        """1,000 chip-days: half from 64 UltraServers for an hour (3 runs), half from 16 for 6 h (2 runs)."""
        shapes = control_shapes(1_000.0, ultraservers=64, seconds=3_600.0)
        assert shapes == [(64, 3_600.0)] * 3 + [(16, 21_600.0)] * 2
        assert sum(us * 64 * secs for us, secs in shapes) / 86_400 >= 1_000.0

    def test_control_shapes_count_present_chips(self) -> None:
        """With partial UltraServers (the training profile's), more runs reach the same present chip-days."""
        training = PROFILES["training"]
        shapes = control_shapes(1_000.0, ultraservers=64, seconds=3_600.0,
                                chips_of=lambda n: training.fleet(n, name="t").n_present_chips)
        assert shapes == [(64, 3_600.0)] * 4 + [(16, 21_600.0)] * 3
        days = sum(training.fleet(us, name="t").n_present_chips * secs for us, secs in shapes) / 86_400
        assert days >= 1_000.0


class TestTimesPerKind:
    def test_every_severity_of_a_kind_together(self) -> None:
        """Per fault kind, times to detect and to clear pool every severity: two nl_down faults found after
        2 s and 4 s, cleared 10 s and 20 s after their ends."""
        first = Fault(FaultKind.NL_DOWN, 5, 0.0, 100, 200)
        second = Fault(FaultKind.NL_DEGRADED, 9, 0.5, 100, 200)
        events = [raise_(102, "neuronlink", 5), raise_(104, "neuronlink", 9), clear(210, "neuronlink", 5),
                  clear(220, "neuronlink", 9)]
        again = Fault(FaultKind.NL_DEGRADED, 9, 0.7, 300, 400)
        later = [raise_(306, "neuronlink", 9), clear(430, "neuronlink", 9)]
        by_kind = grade([RunResult([first, second, again], events + later, chips=64, ticks=500)],
                        ultraservers=1)["by_kind"]
        assert by_kind == [
            {"kind": "nl_degraded", "faults": 2, "detected": 2, "ttd_median_s": 5.0, "ttd_p95_s": pytest.approx(5.9),
             "ttc_median_s": 25.0, "ttc_p95_s": pytest.approx(29.5), "not_cleared": 0},
            {"kind": "nl_down", "faults": 1, "detected": 1, "ttd_median_s": 2.0, "ttd_p95_s": 2.0,
             "ttc_median_s": 10.0, "ttc_p95_s": 10.0, "not_cleared": 0},
        ]
