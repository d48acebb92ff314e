"""Specification of how the EFA detector (rainierd/core/detect/efa.py) judges
retransmits when they follow traffic, as the EFA driver's counters do
(issue 38): a healthy port retransmits a small share of the packets it
sends, so its retransmits a second swing with its job's step, rise when a
job starts on it and vanish while it is idle.  Judged per packet sent, none
of that is loss; a port that really loses packets is still found."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.fleet.topology import build_fleet
from rainierd.sim import FleetParams
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.profile import PROFILES
from rainierd.sim.workload import JobSpec

ULTRASERVERS = 5  # 320 EFA ports: the 300 healthy ports, and a few more
SECONDS = 1_500  # past the loss test's learning (600 s) and well past its first judgement (120 s)


def efa_raises(*, retrans_per_s: float, job_start_s: int = 0, faults: tuple[Fault, ...] = (),
               seed: int = 0) -> list[tuple[int, int, tuple[str, ...]]]:
    """Run the training profile's traffic (a step cycle swinging x16) on one job over every UltraServer, from
    ``job_start_s`` (idle before: no traffic), healthy ports retransmitting ``retrans_per_s`` at full traffic
    and in proportion to what they send; return every EFA raise as (tick, port, reasons)."""
    topo = build_fleet(1, ULTRASERVERS)
    job = JobSpec(id="t/train", ultraservers=tuple(range(ULTRASERVERS)), start_tick=job_start_s)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0, profile=PROFILES["training"],
                       params=FleetParams(efa_retrans_pkts_per_s=retrans_per_s), faults=list(faults), jobs=[job])
    core = MonitorCore(topo)
    raised = []
    for tick in range(SECONDS):
        frames = [f for _t, f in tick_frames(topo, model.step(tick), publisher="t")]
        events = core.step(frames, now_s=float(tick)).events
        raised += [(e.tick, e.id, e.reasons) for e in events if e.entity == "efa" and e.raised]
    return raised


class TestRetransmitsThatFollowTraffic:
    """Healthy ports whose retransmits follow the packets they send are healthy, whatever their traffic does."""

    @pytest.mark.parametrize("retrans_per_s", [1.0, 2.0, 4.0])
    def test_healthy_ports_retransmitting_in_proportion_to_their_traffic_raise_nothing(
        self, retrans_per_s: float,
    ) -> None:
        """320 ports of a training job, each retransmitting 1, 2 or 4 packets a second at full traffic and a
        share of that as its step's traffic swings: no port raised in 25 minutes (rates learned per second
        raised 7, 108 and 219 of 300 such ports)."""
        assert efa_raises(retrans_per_s=retrans_per_s) == []

    def test_a_job_starting_on_idle_ports_raises_nothing(self) -> None:
        """Ports idle for 15 minutes (no traffic, no retransmits) then carrying a job that retransmits 2 packets
        a second at full traffic: the jump from nothing is traffic, not loss (a rate learned per second while
        idle raised 43 ports of such a start)."""
        assert efa_raises(retrans_per_s=2.0, job_start_s=900) == []


class TestLossStillFound:
    def test_a_port_losing_packets_is_raised_among_ports_whose_retransmits_follow_traffic(self) -> None:
        """Among the same 320 ports at 2 retransmits a second, one port losing 3e-5 of its packets from minute 10
        (~15 retransmits a second more at full traffic) is raised, within a minute, and it alone."""
        loss = Fault(FaultKind.EFA_LOSS, 37, 3e-5, 600, SECONDS)
        raised = efa_raises(retrans_per_s=2.0, faults=(loss,))
        assert {port for _tick, port, _reasons in raised} == {37}
        assert 600 < raised[0][0] <= 660
