"""Specification of ``python -m benchmarks detect``: how runs are graded against the
injected faults (hand-made events at a 0.5 s tick), how durations in seconds
become ticks, and one tiny real run through the command line."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.detect import RunResult, fault_runs, grade, ticks_of
from benchmarks.detect.phases import PhaseLog
from rainierd.core.detect import Event
from rainierd.sim.faults import Fault, FaultKind
from rainierd.topology import build_fleet


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
