"""The tour (docs/tour.md, issue 37 item 4): ``rainierd run --scenario scenarios/demo-tour.toml`` shows a job
hurt, its culprit and an advisory proposed as a dry run, read where the tour reads them (``/api/v1/jobs/…``
and ``/api/v1/actions``).

The tour keeps production's 300 s hold, so its advisory comes at about 5 minutes and clears at about 8; this
test runs the same file with the hold at 5 s, so the story's first half takes half a minute.  The second half
(the advisory expiring once its cause clears) is the policy's, pinned in tests/unit/actions/test_policy.py
(``TestExpiry``) and tests/unit/actions/test_cost.py; that the tour's faults outlast the hold and clear within
its eight minutes is tests/unit/docs/test_tour.py's."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from harness.procs import free_port
from harness.waits import poll_until
from tests.conftest import Daemon

TOUR = Path(__file__).parents[2] / "scenarios" / "demo-tour.toml"


def read(port: int, path: str) -> Any:
    """Return the monitor's JSON answer at ``path``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.load(response)


def test_the_tour_shows_a_job_hurt_its_culprit_and_a_dry_run_advisory(start_rainierd: object) -> None:
    """Within 45 s of its start: lab/pretrain loses FP8 to thermal throttling, its costliest culprit is chip 10,
    and node n0 is proposed a dry-run drain protecting lab/pretrain, with its cost (about 24 % of the job) in
    the advisory and its reason."""
    port = free_port()
    daemon: Daemon = start_rainierd(  # type: ignore[operator]
        "run", "--scenario", str(TOUR), "--metrics-addr", f"127.0.0.1:{port}", "--actions-hold", "5")
    found: dict[str, Any] = {}

    def proposed() -> bool:
        try:
            found.update(read(port, "/api/v1/actions?node=n0"))
        except OSError:
            return False
        return any(a["state"] == "proposed" for a in found.get("actions", []))

    poll_until(proposed, 45.0, f"n0's advisory proposed ({daemon.log()[-2000:]})")
    [advisory] = found["actions"]
    assert (advisory["action"], found["dry_run"]) == ("drain", True)
    assert [p["job"] for p in advisory["protects"]] == ["lab/pretrain"]
    assert advisory["causes"][0]["state"] == "throttled"
    assert 0.2 < advisory["cost"]["share"] < 0.3
    assert "costs lab/pretrain 2" in advisory["reason"]
    job = read(port, "/api/v1/jobs/lab/pretrain")
    assert job["job"]["lost_by_cause"]["thermal_throttle"] > 0
    assert job["culprits"][0]["entity"] == "chip"
    assert str(job["culprits"][0]["id"]) in {"10", "s0/u0/n0/chip10"}  # as the metrics spell it
    assert daemon.interrupt()[0] == 0, daemon.log()
