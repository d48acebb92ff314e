"""Specification of the throughput model per job (rainierd/core/jobmodel.py): a job is a synchronous group,
so a fault anywhere in it costs all of it, and never another job; the worked example of
docs/throughput-model.md ("Per job"); and agreement with the simulator's truth for 3-UltraServer jobs."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import FleetDetector
from rainierd.core.detect.chips import FAILED, STRAGGLER, THROTTLED
from rainierd.core.fleetloss import price_fleet
from rainierd.core.jobmodel import CULPRIT_KINDS, JobLoss, job_loss
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.core.model import HealthyShares, ModelParams
from rainierd.core.state import FleetState
from rainierd.core.throughput import Throughput
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.params import FleetParams
from rainierd.wire.jobs import JobDocument

PEAK = TRN2.fp8_dense_flops
UTIL = 0.62
DEGRADED = 1  # a path's tracker state


def membership(topo: Topology, jobs: dict[str, Iterable[str]]) -> JobMembership:
    """Return the membership of jobs named by node (``n<id>``) or UltraServer (``u<id>``) names."""
    docs = [
        JobDocument(v=1, id=job, name=job, owner="o", scheduler="static", source="test",
                    nodes=[n for n in names if n.startswith("n")], ultraservers=[n for n in names if n.startswith("u")],
                    start_s=0.0)
        for job, names in jobs.items()
    ]
    return resolve_jobs(NameIndex.of(topo), docs)


def ultraservers(*ids: int) -> list[str]:
    return [f"u{i}" for i in ids]


def nodes(*ids: int) -> list[str]:
    return [f"n{i}" for i in ids]


class Fleet:
    """A synthetic fleet: detectors whose verdicts a test sets, and each chip's measured FLOP rate."""

    def __init__(self, n_ultraservers: int) -> None:
        self.topo = build_fleet(1, n_ultraservers)
        self.detector = FleetDetector(FleetState(self.topo))
        self.detector.state.now_s = 0.0
        self.effective = np.full(self.topo.n_chips, PEAK * UTIL)

    def throughput(self) -> Throughput:
        topo, eff = self.topo, self.effective
        us = np.bincount(topo.chip_ultraserver, weights=eff, minlength=topo.n_ultraservers)
        us_peak = np.full(topo.n_ultraservers, PEAK * 64)
        none = np.zeros(topo.n_ultraservers, np.int64)
        return Throughput(0, np.ones(topo.n_chips, bool), eff, eff, us_peak, us, us,
                          us_peak.sum(keepdims=True), us.sum(keepdims=True), us.sum(keepdims=True),
                          topo.ultraserver_site.astype(np.int64), np.full(topo.n_ultraservers, 64, np.int64),
                          none, none)

    def slow_job(self, chips: np.ndarray, step: float) -> None:
        """Every chip of a job delivers its healthy rate over ``step``, as a synchronous group does."""
        self.effective[chips] = PEAK * UTIL / step

    def link(self, ultraserver: int, node_in_us: int = 0, index: int = 5) -> int:
        return (ultraserver * 4 + node_in_us) * self.topo.links_per_node + index

    def degrade_link(self, link: int, ratio: float) -> None:
        self.detector.links.tracker.state[link] = DEGRADED
        self.detector.links.now_ratio[link] = ratio

    def job_chips(self, members: JobMembership, job: int) -> np.ndarray:
        return np.flatnonzero(members.node_job[self.topo.chip_node] == job)

    def loss(self, members: JobMembership, shares: HealthyShares | None = None) -> JobLoss:
        return job_loss(self.throughput(), self.detector, members, params=ModelParams(), shares=shares)


class TestWorkedExample:
    def test_numbers_in_the_doc(self) -> None:
        """A 3-UltraServer job with one NeuronLink at 70 % in its middle UltraServer loses the figures
        docs/throughput-model.md gives, and every one of its 192 chips pays, not only the link's 64."""
        fleet = Fleet(3)
        members = membership(fleet.topo, {"big": ultraservers(0, 1, 2)})
        step = 0.75 + 0.15 / 0.7 + 0.10
        assert step == pytest.approx(1.0642857, rel=1e-7)
        fleet.slow_job(fleet.job_chips(members, 0), step)
        link = fleet.link(1)
        fleet.degrade_link(link, 0.7)
        loss = fleet.loss(members)
        healthy = 192 * PEAK * UTIL
        assert healthy == pytest.approx(1.5463296e17)
        assert loss.effective[0] == pytest.approx(1.452927e17, rel=1e-6)
        assert loss.lost["degraded_neuronlink"][0] == pytest.approx(9.340246e15, rel=1e-6)
        # (f_nl is the float32 0.7.)
        assert loss.lost["degraded_neuronlink"][0] == pytest.approx(healthy - loss.effective[0], rel=1e-6)
        assert {c: float(v[0]) for c, v in loss.lost.items() if c != "degraded_neuronlink"} == dict.fromkeys(
            set(CAUSES) - {"degraded_neuronlink"}, 0.0)
        assert loss.culprits(0) == [("neuronlink", link, pytest.approx(9.340246e15, rel=1e-6))]
        assert loss.goodput_ratio[0] == pytest.approx(1 / step)
        # Every level adds the job's price up (core/fleetloss.py): the fleet's headline is the job's whole loss,
        # not the third of it a model charging each fault to its own UltraServer would say, and it sits on the
        # link's UltraServer.
        _jobs, levels = price_fleet(fleet.throughput(), fleet.detector, members, params=ModelParams())
        assert levels.fleet()["degraded_neuronlink"] == pytest.approx(loss.lost["degraded_neuronlink"][0], rel=1e-12)
        assert levels.ultraserver["degraded_neuronlink"].tolist() == [
            0.0, pytest.approx(loss.lost["degraded_neuronlink"][0], rel=1e-12), 0.0]

    def test_job_size_and_peak(self) -> None:
        """A job's chips and peak are those of the nodes it holds."""
        fleet = Fleet(2)
        loss = fleet.loss(membership(fleet.topo, {"a": nodes(0, 1, 5)}))
        assert (loss.chips.tolist(), loss.peak.tolist()) == ([48], [48 * PEAK])
        assert loss.effective[0] == pytest.approx(48 * PEAK * UTIL)


class TestBlastRadius:
    def test_another_job_s_link_in_the_same_ultraserver_is_not_charged(self) -> None:
        """Two jobs share an UltraServer, two nodes each: a degraded link on one job's nodes costs that job
        only, and the other, whose nodes sit beside it, loses nothing."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": nodes(0, 1), "b": nodes(2, 3)})
        fleet.degrade_link(fleet.link(0, node_in_us=2), 0.5)
        step = 0.75 + 0.15 / 0.5 + 0.10
        fleet.slow_job(fleet.job_chips(members, 1), step)
        loss = fleet.loss(members)
        assert loss.lost_total[0] == 0.0
        assert loss.lost["degraded_neuronlink"][1] == pytest.approx(32 * PEAK * UTIL * (1 - 1 / step))
        assert loss.culprits(0) == []

    def test_a_link_between_two_jobs_is_charged_to_neither(self) -> None:
        """A ring link whose ends are on nodes of two different jobs carries neither job's collectives."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": nodes(0, 1), "b": nodes(2, 3)})
        ring = fleet.link(0, node_in_us=1, index=40)  # node 1's ring link to the same chip of node 2
        assert fleet.topo.chip_node[fleet.topo.link_b[ring]] == 2
        fleet.degrade_link(ring, 0.5)
        assert fleet.loss(members).lost_total.tolist() == [0.0, 0.0]

    def test_another_job_s_slow_chip_is_not_charged(self) -> None:
        """A throttled chip on a node of job b, in the UltraServer job a shares, slows job b alone."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": nodes(0), "b": nodes(1, 2, 3)})
        chip = 1 * 16 + 7
        fleet.detector.state.chips.gauges["clock_ratio"][chip] = 0.8
        fleet.detector.chips.tracker.state[chip] = THROTTLED
        loss = fleet.loss(members)
        assert loss.s_min.tolist() == [1.0, pytest.approx(0.8)]
        assert loss.lost_total[0] == 0.0
        assert loss.lost["thermal_throttle"][1] == pytest.approx(48 * PEAK * UTIL * 0.75 * (1 / 0.8 - 1), rel=1e-6)
        assert loss.culprits(1) == [("chip", chip, pytest.approx(loss.lost["thermal_throttle"][1]))]

    def test_an_efa_port_costs_its_own_job_only(self) -> None:
        """A down EFA port on job b's node prices job b's EFA term at 15/16, and job a's not at all."""
        fleet = Fleet(2)
        members = membership(fleet.topo, {"a": ultraservers(0), "b": ultraservers(1)})
        port = 5 * fleet.topo.efa_ports_per_node + 2
        fleet.detector.efa.tracker.state[port] = 2  # DOWN
        loss = fleet.loss(members)
        assert loss.f_efa.tolist() == [1.0, pytest.approx(15 / 16)]
        assert loss.lost_total[0] == 0.0
        assert loss.culprits(1)[0][:2] == ("efa", port)


class TestCulprits:
    def test_each_link_costs_what_it_adds_over_the_next_slowest(self) -> None:
        """Two degraded links in one job: the slowest costs what it adds over the runner-up, the runner-up what
        it adds over healthy, and the two add up to the job's NeuronLink loss."""
        fleet = Fleet(3)
        members = membership(fleet.topo, {"a": ultraservers(0, 1, 2)})
        worst, second = fleet.link(2, 1, 3), fleet.link(0, 3, 30)
        fleet.degrade_link(worst, 0.5)
        fleet.degrade_link(second, 0.7)
        loss = fleet.loss(members)
        effective = loss.effective[0]
        assert loss.culprits(0) == [
            ("neuronlink", worst, pytest.approx(effective * 0.15 * (1 / 0.5 - 1 / 0.7), rel=1e-6)),
            ("neuronlink", second, pytest.approx(effective * 0.15 * (1 / 0.7 - 1), rel=1e-6)),
        ]
        assert loss.culprit_flops[0].sum() == pytest.approx(loss.lost["degraded_neuronlink"][0])

    def test_the_five_costliest_first(self) -> None:
        """Of seven throttled chips, the job lists five, the costliest first, and they never exceed its loss."""
        fleet = Fleet(1)
        members = membership(fleet.topo, {"a": ultraservers(0)})
        chips = np.array([3, 9, 17, 22, 40, 51, 60])
        clocks = np.array([0.9, 0.6, 0.8, 0.95, 0.7, 0.85, 0.75], np.float32)
        fleet.detector.state.chips.gauges["clock_ratio"][chips] = clocks
        fleet.detector.chips.tracker.state[chips] = THROTTLED
        loss = fleet.loss(members)
        listed = loss.culprits(0)
        assert [kind for kind, _, _ in listed] == ["chip"] * 5
        flops = [f for _, _, f in listed]
        assert flops == sorted(flops, reverse=True)
        assert {i for _, i, _ in listed} <= set(chips.tolist())
        assert listed[0][1] == 9  # the slowest, at 0.6, adds the most over the next (0.7)
        assert sum(flops) <= loss.lost["thermal_throttle"][0]


class TestCapacity:
    def test_unallocated_capacity_is_not_lost(self) -> None:
        """Nodes in no job are idle capacity: counted in ``unallocated_peak``, in no job's loss, and a fault
        on them costs nothing."""
        fleet = Fleet(2)
        members = membership(fleet.topo, {"a": ultraservers(0)})
        fleet.effective[64:] = 0.0  # idle
        fleet.degrade_link(fleet.link(1), 0.5)
        fleet.detector.chips.tracker.state[100] = FAILED
        loss = fleet.loss(members)
        assert loss.unallocated_peak == 64 * PEAK
        assert (loss.lost_total.tolist(), bool(loss.stalled[0])) == ([0.0], False)
        assert loss.allocated_goodput_ratio == 1.0

    def test_no_jobs(self) -> None:
        """A fleet with no jobs has the whole fleet unallocated and empty per-job arrays."""
        fleet = Fleet(1)
        loss = fleet.loss(JobMembership.empty(fleet.topo.n_nodes))
        assert (loss.n_jobs, loss.unallocated_peak, loss.culprit_kind.shape) == (0, 64 * PEAK, (0, 5))
        assert np.isnan(loss.allocated_goodput_ratio)


class TestStall:
    def test_a_failed_member_stalls_the_whole_job(self) -> None:
        """A failed chip in one of a job's three UltraServers stalls all three: the job loses its healthy
        share of its whole peak to failed_chip, and the chip is its culprit."""
        fleet = Fleet(4)
        members = membership(fleet.topo, {"a": ultraservers(0, 1, 2), "b": ultraservers(3)})
        chips = fleet.job_chips(members, 0)
        fleet.effective[chips] = 0.0
        fleet.detector.chips.tracker.state[2 * 64 + 9] = FAILED
        loss = fleet.loss(members)
        assert loss.stalled.tolist() == [True, False]
        # Valued at the running jobs' median share of peak (job b's): 0.62 of the job's 192 chips.
        assert loss.lost["failed_chip"].tolist() == [pytest.approx(192 * PEAK * UTIL), 0.0]
        assert loss.culprits(0) == [("chip", 2 * 64 + 9, pytest.approx(192 * PEAK * UTIL))]
        assert loss.goodput_ratio[0] == 0.0

    def test_a_stalled_job_is_valued_at_its_nodes_learned_share(self) -> None:
        """With shares kept across analyses, a stalled job loses what its own nodes delivered while it ran,
        not the other jobs' median."""
        fleet = Fleet(2)
        members = membership(fleet.topo, {"a": ultraservers(0), "b": ultraservers(1)})
        shares = HealthyShares.empty(fleet.topo.n_nodes, halflife_s=60.0)
        fleet.effective[:64] = PEAK * 0.5
        fleet.loss(members, shares)
        fleet.effective[:64] = 0.0
        fleet.detector.state.now_s = 1.0
        fleet.detector.cooling.nodes.state[1] = 2  # node 1 lost
        loss = fleet.loss(members, shares)
        assert loss.lost["stale_telemetry"].tolist() == [pytest.approx(64 * PEAK * 0.5), 0.0]
        assert loss.culprits(0) == [("node", 1, pytest.approx(64 * PEAK * 0.5))]


    @pytest.mark.parametrize("tick_s", [1.0, 5.0])
    def test_a_failure_just_after_a_checkpoint_is_priced_at_the_job_s_running_share(self, tick_s: float) -> None:
        """A job steps at 0.62 of peak for two minutes, checkpoints for a minute (every chip at 1 %, with one
        analysis either side half in it), steps 10 s more, then a chip fails: the stall is priced within 5 % of
        what the job delivered while it stepped, its truth, at a 1 s or a 5 s analysis (learned through the
        checkpoint, it was priced at ~0.6 of it, issue 38)."""
        fleet = Fleet(2)
        members = membership(fleet.topo, {"a": ultraservers(0), "b": ultraservers(1)})
        shares = HealthyShares.empty(fleet.topo.n_nodes, halflife_s=60.0)
        util = fleet.detector.state.chips.gauges["util"]
        job = fleet.job_chips(members, 0)

        def analyse(seconds: float, job_util: float) -> JobLoss:
            loss = fleet.loss(members, shares)
            for _ in range(int(seconds / tick_s)):
                util[:] = UTIL
                util[job] = job_util
                fleet.effective[:] = PEAK * util
                fleet.detector.state.now_s += tick_s
                loss = fleet.loss(members, shares)
            return loss

        analyse(120, UTIL)
        analyse(tick_s, UTIL / 2)  # straddles the checkpoint's start
        analyse(60, 0.01)
        analyse(tick_s, UTIL / 2)  # and its end
        analyse(10, UTIL)
        fleet.detector.chips.tracker.state[9] = FAILED
        loss = analyse(tick_s, 0.0)
        truth = 64 * PEAK * UTIL
        assert loss.lost["failed_chip"][0] == pytest.approx(truth, rel=0.05)

    def test_a_job_that_runs_slower_for_good_is_learned(self) -> None:
        """A job that steps at half its share for five minutes (a lighter phase it stays in, never quiet) is
        priced at its new share: only quiet spells are not learned."""
        fleet = Fleet(2)
        members = membership(fleet.topo, {"a": ultraservers(0), "b": ultraservers(1)})
        shares = HealthyShares.empty(fleet.topo.n_nodes, halflife_s=60.0)
        util = fleet.detector.state.chips.gauges["util"]
        job = fleet.job_chips(members, 0)
        for second in range(420):
            util[:] = UTIL
            util[job] = UTIL if second < 120 else UTIL / 2
            fleet.effective[:] = PEAK * util
            fleet.detector.state.now_s = float(second)
            fleet.loss(members, shares)
        fleet.detector.chips.tracker.state[9] = FAILED
        fleet.effective[job] = 0.0
        loss = fleet.loss(members, shares)
        assert loss.lost["failed_chip"][0] == pytest.approx(64 * PEAK * UTIL / 2, rel=0.05)

    def test_capacity_in_no_job_learns_nothing_before_it_is_heard(self) -> None:
        """A monitor that analyses ticks before any telemetry arrives (its chips never heard from read 0, not
        known to run nothing) learns no healthy share from them for capacity in no job: a failed chip that
        stalls an UltraServer 6 s into the telemetry costs what the UltraServer delivered, as it does for a
        monitor whose first tick had telemetry."""
        topo = build_fleet(1, 2)

        def stall_price(quiet_ticks: int) -> float:
            model = FleetModel(topo, np.random.default_rng(3), tick_s=0.5, start_s=1000.0,
                               faults=[Fault(FaultKind.CHIP_FAILED, 100, 1.0, 12, 600)])  # u1, from tick 12
            core = MonitorCore(topo)
            for quiet in range(quiet_ticks, 0, -1):
                core.step([], now_s=1000.0 - 0.5 * quiet)
            for tick in range(16):
                analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="t")],
                                     now_s=1000.0 + 0.5 * tick + 0.1)
            assert analysis.lost is not None
            return analysis.lost.fleet()["failed_chip"]

        heard_at_once = stall_price(0)
        assert heard_at_once > 64 * PEAK * 0.5
        assert stall_price(6) == pytest.approx(heard_at_once, rel=1e-9)


class TestAgreesWithTheUltraServerModel:
    def test_one_ultraserver_jobs_match_the_fallback(self) -> None:
        """When every job is exactly one UltraServer, per-job loss by cause is what the fleet model charges
        each UltraServer without jobs (its fallback: each UltraServer's capacity in no job one group) within
        1e-9, fault by fault: throttle, straggler, link, port, failed chip, lost node."""
        fleet = Fleet(8)
        topo, det = fleet.topo, fleet.detector
        members = membership(topo, {f"j{u}": ultraservers(u) for u in range(8)})
        rng = np.random.default_rng(7)
        fleet.effective *= rng.uniform(0.9, 1.0, topo.n_chips)
        det.state.chips.gauges["clock_ratio"][0 * 64 + 3] = 0.8
        det.chips.tracker.state[0 * 64 + 3] = THROTTLED
        det.chips.tracker.state[1 * 64 + 5] = STRAGGLER
        det.chips.efficiency[1 * 64 + 5] = 0.9
        fleet.degrade_link(fleet.link(2, 3, 17), 0.6)
        det.efa.tracker.state[3 * 64 + 4] = DEGRADED
        det.efa.share[3 * 64 + 4] = 0.7
        det.chips.tracker.state[4 * 64 + 1] = FAILED
        det.cooling.nodes.state[5 * 4 + 2] = 2
        for u in (0, 1, 2, 3):
            fleet.effective[u * 64:(u + 1) * 64] *= 0.9
        fleet.effective[4 * 64:6 * 64] = 0.0
        params = ModelParams()
        us_shares = HealthyShares.empty(topo.n_nodes, halflife_s=60.0)
        node_shares = HealthyShares.empty(topo.n_nodes, halflife_s=60.0)
        none = JobMembership.empty(topo.n_nodes)
        for now in (0.0, 1.0):
            det.state.now_s = now
            _jobs, per_us = price_fleet(fleet.throughput(), det, none, params=params, shares=us_shares)
            per_job = job_loss(fleet.throughput(), det, members, params=params, shares=node_shares)
            for cause in CAUSES:
                np.testing.assert_allclose(per_job.lost[cause], per_us.ultraserver[cause], rtol=1e-9, atol=0.0)
        assert {c for c in CAUSES if per_job.lost[c].any()} == set(CAUSES)


# The simulator's truth: 3-UltraServer synchronous groups, one fault in the middle UltraServer of each.
GROUP = 3
SIM_FAULTS: dict[str, tuple[FaultKind, float, str, str]] = {
    # name: (kind, severity, target kind, cause)
    "link down": (FaultKind.NL_DOWN, 0.0, "link", "degraded_neuronlink"),
    "link at 70 %": (FaultKind.NL_DEGRADED, 0.7, "link", "degraded_neuronlink"),
    "EFA down": (FaultKind.EFA_DOWN, 0.0, "efa", "degraded_efa"),
    "EFA retransmits (loss)": (FaultKind.EFA_LOSS, 3e-3, "efa", "degraded_efa"),
    "EFA retransmits (slow)": (FaultKind.EFA_SLOW, 1.5, "efa", "degraded_efa"),
    "failed chip": (FaultKind.CHIP_FAILED, 0.0, "chip", "failed_chip"),
    "throttle": (FaultKind.CHIP_THROTTLE, 0.7, "chip", "thermal_throttle"),
    "straggler": (FaultKind.STRAGGLER, 0.10, "chip", "straggler"),
}
N_GROUPS = len(SIM_FAULTS) + 1  # the last group stays healthy
SEEDS = (0, 1, 2)


def _target(topo: Topology, kind: str, group: int) -> int:
    node = (group * GROUP + 1) * topo.nodes_per_ultraserver + 2  # a node of the group's middle UltraServer
    if kind == "link":
        return node * topo.links_per_node + 21
    if kind == "efa":
        return node * topo.efa_ports_per_node + 6
    return node * topo.chips_per_node + 11


@functools.cache
def simulated(seed: int, ticks: int = 110, window: int = 40) -> tuple[dict[str, dict[str, float]], list[float]]:
    """Return per job (one per simulated group) the monitor's lost FLOP/s by cause, and per faulty group the
    simulator's true loss, each averaged over the last ``window`` ticks."""
    topo = build_fleet(1, GROUP * N_GROUPS)
    faults = [Fault(kind, _target(topo, target, g), severity, 40, 200)
              for g, (kind, severity, target, _cause) in enumerate(SIM_FAULTS.values())]
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0, faults=faults,
                       params=FleetParams(group_ultraservers=GROUP))
    core = MonitorCore(topo)
    members = membership(topo, {f"g{g}": ultraservers(*range(g * GROUP, (g + 1) * GROUP)) for g in range(N_GROUPS)})
    shares = HealthyShares.empty(topo.n_nodes, halflife_s=core.model.healthy_share_halflife_s)
    estimate = {f"g{g}": dict.fromkeys(CAUSES, 0.0) for g in range(N_GROUPS)}
    truth = [0.0] * len(faults)
    for tick in range(ticks):
        sample = model.step(tick)
        analysis = core.step([f for _t, f in tick_frames(topo, sample, publisher="t")])
        loss = job_loss(analysis.throughput, core.detector, members, params=core.model, shares=shares)
        if tick >= ticks - window:
            for job, by_cause in zip(members.ids, zip(*(loss.lost[c] for c in CAUSES), strict=True), strict=True):
                for cause, value in zip(CAUSES, by_cause, strict=True):
                    estimate[job][cause] += float(value) / window
            for i, value in enumerate(sample.truth.fault_lost_flops):
                truth[i] += value / window
    return estimate, truth


class TestAgainstTheSimulator:
    @pytest.mark.parametrize("seed", SEEDS)
    @pytest.mark.parametrize("name", list(SIM_FAULTS))
    def test_each_job_s_loss_within_10_percent_of_truth(self, name: str, seed: int) -> None:
        """A fault in one UltraServer of a 3-UltraServer job costs the whole job: the monitor's per-job loss,
        on the fault's cause alone, is within 10 % of the simulator's truth for that group."""
        estimate, truth = simulated(seed)
        group = list(SIM_FAULTS).index(name)
        cause = SIM_FAULTS[name][3]
        job = estimate[f"g{group}"]
        assert truth[group] > 0
        assert job[cause] == pytest.approx(truth[group], rel=0.10)
        assert sum(v for c, v in job.items() if c != cause) < 0.01 * truth[group]

    @pytest.mark.parametrize("seed", SEEDS)
    def test_the_healthy_job_loses_nothing(self, seed: int) -> None:
        """The group with no fault, beside eight faulty ones, is charged nothing."""
        estimate, _ = simulated(seed)
        assert set(estimate[f"g{N_GROUPS - 1}"].values()) == {0.0}


def test_culprit_kinds_are_the_documented_ones() -> None:
    """The entity kinds a culprit can be, in the order ``culprit_kind`` indexes them."""
    assert CULPRIT_KINDS == ("chip", "neuronlink", "efa", "node")
