"""Job phases (core/jobphase.py): a job whose members go quiet together is in a phase, named for the operator
(checkpoint, restarting, stalled), timed, and its stall seconds counted; one quiet chip is not a phase."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest

from rainierd.core.jobphase import PHASE_NAMES, JobPhases, PhaseParams, PhaseTracker
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.wire.jobs import JobDocument

TOPO = build_fleet(1, 4)
BUSY = np.float32(0.6)


def membership(topo: Topology, jobs: dict[str, Iterable[int]], restarting: Iterable[str] = ()) -> JobMembership:
    """Return the membership of jobs holding whole UltraServers, ``restarting`` those whose documents say so."""
    docs = [JobDocument(v=1, id=job, name=job, owner="o", scheduler="static", source="test",
                        ultraservers=[f"u{u}" for u in us], start_s=0.0, restarting=job in set(restarting))
            for job, us in jobs.items()]
    return resolve_jobs(NameIndex.of(topo), docs)


class Fleet:
    """Every chip busy and reporting until a test says otherwise."""

    def __init__(self, jobs: dict[str, Iterable[int]], params: PhaseParams | None = None) -> None:
        self.members = membership(TOPO, jobs)
        self.util = np.full(TOPO.n_chips, BUSY, np.float32)
        self.fresh = np.ones(TOPO.n_chips, dtype=bool)
        self.tracker = PhaseTracker(params)
        self.now_s = 0.0

    def chips_of(self, ultraserver: int) -> np.ndarray:
        return np.flatnonzero(TOPO.chip_ultraserver == ultraserver)

    def tick(self, *, seconds: float = 1.0, stalled: Iterable[str] = ()) -> dict[str, tuple[str, float, float]]:
        self.now_s += seconds
        stall = np.array([i in set(stalled) for i in self.members.ids], dtype=bool)
        phases = self.tracker.update(self.members, util=self.util, chip_fresh=self.fresh, stalled=stall,
                                     now_s=self.now_s)
        return by_id(self.members, phases)


def by_id(members: JobMembership, phases: JobPhases) -> dict[str, tuple[str, float, float]]:
    return {job: (name, float(s), float(stall)) for job, name, s, stall
            in zip(members.ids, phases.names(), phases.phase_s, phases.stall_s, strict=True)}


def test_the_phase_names_are_the_documented_ones() -> None:
    assert PHASE_NAMES == ("running", "checkpoint", "restarting", "stalled")


def test_a_job_whose_chips_go_quiet_together_is_in_a_checkpoint_then_running_again() -> None:
    fleet = Fleet({"a": [0, 1], "b": [2]})
    assert fleet.tick()["a"][0] == "running"
    quiet = np.concatenate([fleet.chips_of(0), fleet.chips_of(1)])
    fleet.util[quiet] = 0.01
    for _ in range(30):
        now = fleet.tick()
    assert now["a"] == ("checkpoint", 29.0, 29.0)  # in it since its first quiet tick; stall counted per interval
    assert now["b"] == ("running", 30.0, 0.0)  # the other job is not in it (running since it was first heard)
    fleet.util[quiet] = BUSY
    now = fleet.tick()
    assert now["a"] == ("running", 0.0, 30.0)  # the interval that ended this tick was still the checkpoint's


def test_one_quiet_chip_or_one_quiet_ultraserver_of_three_is_no_phase() -> None:
    """A failed chip or a dead UltraServer is the detectors' to judge, not a phase of its job."""
    fleet = Fleet({"a": [0, 1, 2]})
    fleet.util[fleet.chips_of(0)[3]] = 0.0
    assert fleet.tick()["a"][0] == "running"
    fleet.util[fleet.chips_of(0)] = 0.0
    assert fleet.tick()["a"][0] == "running"


def test_silent_chips_neither_count_as_quiet_nor_as_busy() -> None:
    """Only reporting chips vote: a job whose quiet chips are all that report is quiet; one reporting nothing
    is not (silence is the job model's stall, from its silent nodes)."""
    fleet = Fleet({"a": [0, 1]})
    fleet.fresh[fleet.chips_of(1)] = False
    fleet.util[fleet.chips_of(0)] = 0.0
    assert fleet.tick()["a"][0] == "checkpoint"
    fleet.fresh[:] = False
    assert fleet.tick()["a"][0] == "running"


def test_a_quiet_spell_longer_than_a_checkpoint_is_a_stall() -> None:
    fleet = Fleet({"a": [0]}, PhaseParams(checkpoint_max_s=60.0))
    fleet.util[fleet.chips_of(0)] = 0.0
    assert fleet.tick(seconds=30.0)["a"][0] == "checkpoint"
    assert fleet.tick(seconds=30.0)["a"][0] == "checkpoint"  # 30 s quiet so far
    now = fleet.tick(seconds=31.0)
    assert now["a"] == ("stalled", 0.0, 61.0)


def test_a_failed_or_silent_member_stalls_the_job_at_once() -> None:
    """The job model's stall is a fault, never a checkpoint, even while the job does not look quiet yet."""
    fleet = Fleet({"a": [0], "b": [1]})
    assert fleet.tick(stalled=["a"])["a"][0] == "stalled"
    fleet.util[fleet.chips_of(1)] = 0.0
    assert fleet.tick(stalled=["b"])["b"][0] == "stalled"


def test_a_quiet_job_its_scheduler_restarts_is_restarting() -> None:
    """The job document's ``restarting`` names the quiet spell, however long; a job said to restart whose chips
    are busy has resumed."""
    fleet = Fleet({"a": [0], "b": [1]}, PhaseParams(checkpoint_max_s=60.0))
    fleet.members = membership(TOPO, {"a": [0], "b": [1]}, restarting=["a", "b"])
    fleet.util[fleet.chips_of(0)] = 0.0
    assert fleet.tick()["a"][0] == "restarting"
    now = fleet.tick(seconds=600.0)
    assert now["a"] == ("restarting", 600.0, 600.0)
    assert now["b"][0] == "running"


def test_state_follows_the_job_when_the_numbering_moves() -> None:
    """Jobs are numbered by id; a new job sorting first must not hand its neighbour's phase or stall seconds."""
    fleet = Fleet({"m": [1]})
    fleet.util[fleet.chips_of(1)] = 0.0
    fleet.tick()
    fleet.tick(seconds=5.0)
    fleet.members = membership(TOPO, {"a": [0], "m": [1]})
    now = fleet.tick(seconds=5.0)
    assert now["m"] == ("checkpoint", 10.0, 10.0)
    assert now["a"] == ("running", 0.0, 0.0)
    fleet.members = membership(TOPO, {"a": [0]})
    assert fleet.tick()["a"] == ("running", 1.0, 0.0)


def test_no_jobs() -> None:
    phases = PhaseTracker().update(membership(TOPO, {}), util=np.zeros(TOPO.n_chips, np.float32),
                                   chip_fresh=np.ones(TOPO.n_chips, dtype=bool), stalled=np.zeros(0, dtype=bool),
                                   now_s=1.0)
    assert phases.n_jobs == 0


@pytest.mark.parametrize("share", [0.85, 0.95])
def test_together_means_that_share_of_the_reporting_chips(share: float) -> None:
    fleet = Fleet({"a": [0]}, PhaseParams(together=0.9))
    chips = fleet.chips_of(0)
    fleet.util[chips[: round(share * chips.size)]] = 0.0
    assert fleet.tick()["a"][0] == ("checkpoint" if share >= 0.9 else "running")
