"""Specification of ``python -m benchmarks anchors`` in short form (benchmarks/anchors/running.py): a chip
failure in each of the two placements of a one-UltraServer fleet, a minute of fault-free control and a
two-and-a-half-minute campaign run at 5 s ticks, every detector graded side by side by the detection benchmark's
code: rainierd and the threshold rules both find the failed chip, every detector has a cell on the row and a
false-alarm figure, and the tables print."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

from benchmarks._progress import Progress
from benchmarks.anchors.report import print_table
from benchmarks.anchors.running import ANCHORS, RAINIERD, bench_anchors
from rainierd.sim.faults import FaultKind


def test_a_short_comparison_grades_every_detector_on_the_same_runs() -> None:
    """The chip_failed row has a cell for rainierd and each anchor; rainierd and the threshold anchor (an
    uncorrectable ECC error is its rule) both have recall 1; each detector has a false-alarm rate over the
    control's and the campaign's exposure; Minder's machine-level recall covers the row; the table names every
    detector."""
    report = bench_anchors(
        profiles=["training"], seeds=1, ultraservers=1, control_seeds=1, control_ultraservers=1,
        control_seconds=60.0, campaign_seeds=1, campaign_ultraservers=1, campaign_seconds=150.0,
        campaign_ticks_s=[5.0], kinds={FaultKind.CHIP_FAILED}, jobs=1,
        progress=Progress(stream=io.StringIO()),
    )
    section = report["profiles"]["training"]
    row = section["rows"]["chip_failed@0"]
    assert sorted(row) == sorted([RAINIERD, *ANCHORS])
    assert (row[RAINIERD]["recall"], row["thresholds"]["recall"]) == (1.0, 1.0)
    assert set(section["minder_machine_recall"]) == {"chip_failed@0"}
    assert section["campaign"]["chip_days"] > 0
    assert all(section["control"][d]["false_alarms_per_day_per_10k_chips"] is not None
               for d in (RAINIERD, *ANCHORS))
    assert all(section["campaign"]["detectors"][d]["per_day_per_10k_chips"] is not None
               for d in (RAINIERD, *ANCHORS))
    out = io.StringIO()
    with redirect_stdout(out):
        print_table(report)
    assert all(d in out.getvalue() for d in (RAINIERD, *ANCHORS))
