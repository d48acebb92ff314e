"""Specification of the jobs a health event carries (rainierd/core/eventjobs.py): the jobs whose nodes hold
its entity, each with the FLOP/s the job model charges the entity, never another job's; none for an entity in
no job, for a clear, or for the monitor's feed; and, through ``MonitorCore``, on the events of a real tick."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import Event, JobCost
from rainierd.core.detect.chips import FAILED, STALE, THROTTLED
from rainierd.core.eventjobs import with_jobs
from rainierd.core.jobmodel import TOP_CULPRITS, JobLoss
from rainierd.core.jobs import JobMembership
from rainierd.fleet.topology import build_fleet
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from tests.unit.core.test_jobmodel import Fleet, membership, nodes, ultraservers

DEGRADED, DOWN = 1, 2  # a path's tracker states
COOLING_DEGRADED = 1  # a node's and an UltraServer's


def raised(entity: str, id_: int, after: str = "degraded") -> Event:
    return Event(7, entity, id_, "healthy", after, ("test",), 6)


def carried(fleet: Fleet, members: JobMembership, *events: Event) -> list[tuple[JobCost, ...]]:
    """Return the jobs each event carries once priced on the fleet's state as it is."""
    loss = fleet.loss(members)
    return [e.jobs for e in with_jobs(events, membership=members, loss=loss, topology=fleet.topo)]


def culprit_flops(loss: JobLoss, job: int, kind: str, id_: int) -> float:
    """Return what job ``job``'s culprit list says entity (kind, id) costs it (it must be listed)."""
    return next(f for k, i, f in loss.culprits(job) if (k, i) == (kind, id_))


def throttle(fleet: Fleet, chips: list[int], clock: float) -> None:
    fleet.detector.state.chips.gauges["clock_ratio"][chips] = clock
    fleet.detector.chips.tracker.state[chips] = THROTTLED


class TestAJobOverSeveralUltraServers:
    """Job ``wide`` holds UltraServers 0 to 2, job ``solo`` UltraServer 3; each fault is in ``wide``'s middle."""

    @pytest.fixture
    def fleet(self) -> Fleet:
        return Fleet(4)

    @pytest.fixture
    def members(self, fleet: Fleet) -> JobMembership:
        return membership(fleet.topo, {"wide": ultraservers(0, 1, 2), "solo": ultraservers(3)})

    def test_a_degraded_efa_port_carries_its_job_at_its_culprit_cost(self, fleet: Fleet,
                                                                     members: JobMembership) -> None:
        """A degraded EFA port on a node of UltraServer 1 names job ``wide`` alone, at the FLOP/s the job's
        culprit list charges the port."""
        port = 5 * fleet.topo.efa_ports_per_node + 3
        fleet.detector.efa.tracker.state[port] = DOWN
        loss = fleet.loss(members)
        flops = culprit_flops(loss, members.ids.index("wide"), "efa", port)
        assert flops > 0
        assert carried(fleet, members, raised("efa", port, "down")) == [(JobCost("wide", flops),)]

    def test_a_degraded_neuronlink_carries_its_job_at_the_worked_example_s_cost(self, fleet: Fleet,
                                                                                members: JobMembership) -> None:
        """The worked example (docs/throughput-model.md): a NeuronLink at 70 % in the middle UltraServer of a
        192-chip job costs it 9.340246e15 FLOP/s, and its event says so."""
        wide = members.ids.index("wide")
        fleet.slow_job(fleet.job_chips(members, wide), 0.75 + 0.15 / 0.7 + 0.10)
        link = fleet.link(1)
        fleet.degrade_link(link, 0.7)
        loss = fleet.loss(members)
        assert carried(fleet, members, raised("neuronlink", link)) == [
            (JobCost("wide", culprit_flops(loss, wide, "neuronlink", link)),)]
        assert carried(fleet, members, raised("neuronlink", link))[0][0].flops == pytest.approx(9.340246e15,
                                                                                               rel=1e-6)

    def test_a_throttled_chip_carries_its_job_at_its_culprit_cost(self, fleet: Fleet,
                                                                  members: JobMembership) -> None:
        """A throttled chip in UltraServer 1 names job ``wide`` at its culprit cost; ``solo`` is not named."""
        chip = 64 + 16 * 2 + 5
        throttle(fleet, [chip], 0.8)
        loss = fleet.loss(members)
        flops = culprit_flops(loss, members.ids.index("wide"), "chip", chip)
        assert carried(fleet, members, raised("chip", chip, "throttled")) == [(JobCost("wide", flops),)]

    def test_an_entity_beyond_its_job_s_top_culprits_still_carries_the_job(self, fleet: Fleet,
                                                                          members: JobMembership) -> None:
        """Of seven degraded links in one job only five are its culprits; the least costly one's event still
        names the job, at what the model charges it: what it adds over healthy."""
        ratios = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.95]
        links = [fleet.link(us, node, 3) for us, node in [(0, 0), (0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (0, 3)]]
        for link, ratio in zip(links, ratios, strict=True):
            fleet.degrade_link(link, ratio)
        loss = fleet.loss(members)
        wide = members.ids.index("wide")
        assert len(loss.culprits(wide)) == TOP_CULPRITS
        assert links[-1] not in [i for _, i, _ in loss.culprits(wide)]
        expected = loss.effective[wide] * 0.15 * (1 / np.float32(0.95) - 1)
        [jobs] = carried(fleet, members, raised("neuronlink", links[-1]))
        assert jobs == (JobCost("wide", pytest.approx(expected, rel=1e-6)),)

    def test_an_unhealthy_entity_its_job_does_not_pay_for_is_listed_at_0(self, fleet: Fleet,
                                                                          members: JobMembership) -> None:
        """A degraded link in a job a failed chip stalls costs the job nothing more (the stall is the failed
        chip's): its event names the job with 0 FLOP/s."""
        link = fleet.link(2)
        fleet.degrade_link(link, 0.5)
        fleet.detector.chips.tracker.state[9] = FAILED
        fleet.effective[fleet.job_chips(members, members.ids.index("wide"))] = 0.0
        assert carried(fleet, members, raised("neuronlink", link)) == [(JobCost("wide", 0.0),)]

    def test_a_stale_chip_carries_its_node_s_stall(self, fleet: Fleet, members: JobMembership) -> None:
        """A stale chip stalls its job through its node, which the model charges: its event carries that."""
        chip = 2 * 64 + 3
        fleet.detector.chips.tracker.state[chip] = STALE
        fleet.effective[fleet.job_chips(members, members.ids.index("wide"))] = 0.0
        loss = fleet.loss(members)
        stall = culprit_flops(loss, members.ids.index("wide"), "node", int(fleet.topo.chip_node[chip]))
        assert stall == pytest.approx(loss.lost["stale_telemetry"][members.ids.index("wide")])
        assert carried(fleet, members, raised("chip", chip, "stale")) == [(JobCost("wide", stall),)]


class TestNoJob:
    def test_an_entity_in_no_job_carries_none(self) -> None:
        """A degraded link, port and chip on an UltraServer no job holds slow no job: empty lists."""
        fleet = Fleet(2)
        members = membership(fleet.topo, {"a": ultraservers(0)})
        link, port, chip = fleet.link(1), 6 * fleet.topo.efa_ports_per_node, 100
        fleet.degrade_link(link, 0.5)
        fleet.detector.efa.tracker.state[port] = DOWN
        throttle(fleet, [chip], 0.7)
        assert carried(fleet, members, raised("neuronlink", link), raised("efa", port, "down"),
                       raised("chip", chip, "throttled")) == [(), (), ()]

    def test_a_fleet_without_jobs_leaves_events_as_they_are(self) -> None:
        """Without jobs every event carries none."""
        fleet = Fleet(1)
        fleet.degrade_link(fleet.link(0), 0.5)
        assert carried(fleet, JobMembership.empty(fleet.topo.n_nodes), raised("neuronlink", fleet.link(0))) == [()]

    def test_a_clear_and_the_feed_carry_none(self) -> None:
        """A clear (back to healthy) and the monitor's own feed name no job, though the entity is in one."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": ultraservers(0)})
        cleared = Event(7, "neuronlink", fleet.link(0), "degraded", "healthy", (), 7)
        assert carried(fleet, members, cleared, raised("feed", 0, "lost")) == [(), ()]


class TestBlastRadius:
    def test_a_job_s_cost_is_never_charged_to_another_job_in_the_same_ultraserver(self) -> None:
        """Jobs a (nodes 0, 1) and b (nodes 2, 3) share an UltraServer: a link and a chip on b's nodes name b
        alone, a chip on a's names a alone, and a ring link between a's and b's nodes names neither."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": nodes(0, 1), "b": nodes(2, 3)})
        link_b = fleet.link(0, node_in_us=2)
        ring = fleet.link(0, node_in_us=1, index=40)  # node 1's ring link to the same chip of node 2
        fleet.degrade_link(link_b, 0.5)
        fleet.degrade_link(ring, 0.5)
        throttle(fleet, [16 + 4, 3 * 16 + 2], 0.8)
        loss = fleet.loss(members)
        a, b = members.ids.index("a"), members.ids.index("b")
        assert carried(fleet, members, raised("neuronlink", link_b), raised("chip", 3 * 16 + 2, "throttled"),
                       raised("chip", 16 + 4, "throttled"), raised("neuronlink", ring)) == [
            (JobCost("b", culprit_flops(loss, b, "neuronlink", link_b)),),
            (JobCost("b", culprit_flops(loss, b, "chip", 3 * 16 + 2)),),
            (JobCost("a", culprit_flops(loss, a, "chip", 16 + 4)),),
            (),
        ]

    def test_a_cooling_ultraserver_names_each_job_on_it_at_what_its_chips_cost(self) -> None:
        """An UltraServer cooling fault over jobs a (node 0) and b (nodes 1-3), with a chip of each throttled,
        names both, the costliest first, each at its own chips' cost; its node 0's event names a alone."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": nodes(0), "b": nodes(1, 2, 3)})
        throttle(fleet, [5], 0.9)
        throttle(fleet, [40], 0.7)
        fleet.detector.cooling.ultraservers.state[0] = COOLING_DEGRADED
        fleet.detector.cooling.nodes.state[0] = COOLING_DEGRADED
        loss = fleet.loss(members)
        a = JobCost("a", culprit_flops(loss, members.ids.index("a"), "chip", 5))
        b = JobCost("b", culprit_flops(loss, members.ids.index("b"), "chip", 40))
        assert b.flops > a.flops > 0
        assert carried(fleet, members, raised("ultraserver", 0, "cooling_degraded"),
                       raised("node", 0, "cooling_degraded")) == [(b, a), (a,)]


class TestAnyPlacement:
    N_LINKS = Fleet(2).topo.link_node.size

    @given(owners=st.lists(st.integers(-1, 2), min_size=8, max_size=8),
           degraded=st.lists(st.tuples(st.integers(0, N_LINKS - 1), st.floats(0.1, 0.95)), min_size=1, max_size=12,
                             unique_by=lambda d: d[0]))
    @settings(max_examples=40, deadline=None)
    def test_link_events_name_the_job_holding_both_ends_and_add_up_to_its_loss(
        self, owners: list[int], degraded: list[tuple[int, float]],
    ) -> None:
        """Whatever nodes of two UltraServers three jobs hold and whichever links degrade, each link's event
        names the job holding both its ends' nodes, or none, and each job's link events add up to its
        NeuronLink loss: no job is charged another's."""
        fleet = Fleet(2)
        held = {f"j{k}": nodes(*[n for n, o in enumerate(owners) if o == k]) for k in range(3) if k in owners}
        members = membership(fleet.topo, held)
        for link, ratio in degraded:
            fleet.degrade_link(link, ratio)
        loss = fleet.loss(members)
        links = np.array([link for link, _ in degraded])
        events = with_jobs([raised("neuronlink", int(link)) for link in links], membership=members, loss=loss,
                           topology=fleet.topo)
        topo = fleet.topo
        ends = zip(topo.link_node[links].tolist(), topo.chip_node[topo.link_b[links]].tolist(), strict=True)
        holder = [f"j{owners[a]}" if owners[a] == owners[b] >= 0 else None for a, b in ends]
        assert [tuple(j.job for j in e.jobs) for e in events] == [(h,) if h else () for h in holder]
        for j, job in enumerate(members.ids):
            total = sum(c.flops for e in events for c in e.jobs if c.job == job)
            assert total == pytest.approx(loss.lost["degraded_neuronlink"][j], rel=1e-6, abs=1.0)


class TestThroughTheCore:
    def test_a_tick_s_event_carries_the_job_it_slows(self) -> None:
        """A NeuronLink degraded by the simulator in the middle of a 3-UltraServer job: the analysis that
        raises its event gives it the job and the FLOP/s that analysis's JobLoss charges the link; the
        event's payload says the same."""
        topo = build_fleet(1, 4)
        link = (1 * 4 + 2) * topo.links_per_node + 21
        model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=0.0,
                           faults=[Fault(FaultKind.NL_DEGRADED, link, 0.5, 10, 200)])
        core = MonitorCore(topo)
        members = membership(topo, {"wide": ultraservers(0, 1, 2), "solo": ultraservers(3)})
        for tick in range(60):
            analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="t")],
                                 jobs=members if tick == 0 else None)
            found = [e for e in analysis.events if (e.entity, e.id) == ("neuronlink", link)]
            if found:
                break
        else:
            pytest.fail("the degraded link was never detected")
        assert analysis.job_loss is not None
        flops = culprit_flops(analysis.job_loss, members.ids.index("wide"), "neuronlink", link)
        assert flops > 0
        assert found[0].jobs == (JobCost("wide", flops),)
        assert found[0].as_dict(topo)["jobs"] == [{"job": "wide", "flops": flops}]
