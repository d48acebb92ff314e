"""Specification of the one throughput model's accounting at every level (rainierd/core/fleetloss.py), over
random fleets: 1-2 sites of 1-6 UltraServers, absent nodes, any layout of jobs (spanning UltraServers, sharing
one, conflicting over nodes, holding nothing present, none at all), every kind of fault the detectors report,
chips at any effective FLOP rate up to peak or unknown, and two consecutive analyses that keep the nodes'
learned healthy shares.  Whatever the draw: every level adds up the same prices, every figure is a finite
non-negative FLOP rate, the culprits never claim more than is lost, and a job's loss sits only where the job is.

The fleets are built as tests/unit/core/test_jobmodel.py builds its own: detectors whose verdicts are set directly, the
chips' FLOP rates fed through the real throughput model (core/throughput.py)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rainierd.core.detect import FleetDetector
from rainierd.core.detect._common import Reason
from rainierd.core.detect.chips import FAILED, STALE, STRAGGLER, THROTTLED
from rainierd.core.fleetloss import FLEET_CULPRITS, LostByCause, price_fleet
from rainierd.core.jobmodel import CULPRIT_KINDS, JobLoss
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.core.model import HealthyShares, ModelParams
from rainierd.core.state import FleetState
from rainierd.core.throughput import Throughput, compute_throughput
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.wire.jobs import JobDocument

PEAK = TRN2.fp8_dense_flops
REL = 1e-9  # the levels add float64 prices in different orders
ABS = 1e-6  # FLOP/s: the slack where a figure is 0 (a relative one admits nothing there)
PARAMS = ModelParams()

# How a node's 16 chips run in one analysis: each at a random rate in [0, peak]; every one at peak; idle (a
# known 0); unknown (no rate, no utilisation); a random rate with some chips unknown.
MODES = ("busy", "peak", "idle", "unknown", "mixed")
# The detectors' verdicts a draw sets: every kind the throughput model prices.
FAULTS = ("throttle", "slow_clock", "straggler", "failed", "stale", "link", "link_down", "efa", "efa_down",
          "efa_stale", "node_lost", "node_cooling", "node_efa_slow", "node_neuronlink_slow")
# A verdict's figure: a clock, an efficiency, a share in [0, 1] or unknown (NaN, as before a first sample); a
# link's ratio of its level is always known (its detector starts it at 1) and may read above 1.
UNIT_OR_UNKNOWN = st.one_of(st.floats(0.0, 1.0), st.just(math.nan))
SEVERITY = {"link": st.floats(0.0, 1.2), "link_down": st.floats(0.0, 1.2)}


@dataclass(frozen=True)
class Analysis:
    """One analysis's inputs: each node's mode (an absent node's unused), a seed for its chips' rates, and the
    detectors' verdicts."""

    modes: tuple[str, ...]
    seed: int
    faults: tuple[tuple[str, int, float], ...]  # (kind, entity number before the modulo, severity)


@dataclass(frozen=True)
class Case:
    """A fleet, its absent nodes, its jobs (node names, UltraServer names, start) and two analyses."""

    n_sites: int
    ultraservers_per_site: int
    absent: frozenset[int]
    jobs: tuple[tuple[frozenset[int], frozenset[int], int], ...]
    analyses: tuple[Analysis, Analysis]

    def topology(self) -> Topology:
        topo = build_fleet(self.n_sites, self.ultraservers_per_site)
        present = topo.node_present.copy()
        present[list(self.absent)] = False
        present.flags.writeable = False
        return replace(topo, node_present=present)  # as rainierd/fleet/shards.py's shard_view makes nodes absent


@st.composite
def analyses(draw: st.DrawFn, n_nodes: int, *, idle: bool) -> Analysis:
    modes = MODES if idle else tuple(m for m in MODES if m != "idle")
    fault = st.sampled_from(FAULTS).flatmap(lambda kind: st.tuples(st.just(kind), st.integers(0, 2**20),
                                                                   SEVERITY.get(kind, UNIT_OR_UNKNOWN)))
    return Analysis(modes=tuple(draw(st.lists(st.sampled_from(modes), min_size=n_nodes, max_size=n_nodes))),
                    seed=draw(st.integers(0, 2**32 - 1)), faults=tuple(draw(st.lists(fault, max_size=12))))


@st.composite
def cases(draw: st.DrawFn, *, jobs: bool = True, idle: bool = True) -> Case:
    """Return a random fleet case (``jobs``: with job documents; ``idle``: nodes may sit idle, a known 0)."""
    n_sites, per_site = draw(st.integers(1, 2)), draw(st.integers(1, 6))
    n_us = n_sites * per_site
    n_nodes = 4 * n_us
    absent = draw(st.frozensets(st.integers(0, n_nodes - 1), max_size=n_nodes))
    job = st.tuples(st.frozensets(st.integers(0, n_nodes - 1), max_size=10),
                    st.frozensets(st.integers(0, n_us - 1), max_size=3), st.integers(0, 2)).filter(
        lambda j: bool(j[0] or j[1]))
    docs = tuple(draw(st.lists(job, max_size=6))) if jobs else ()
    return Case(n_sites, per_site, absent, docs, (draw(analyses(n_nodes, idle=idle)),
                                                  draw(analyses(n_nodes, idle=idle))))


# One of each: a job over three UltraServers, another sharing its last one, a node in no job beside them, an
# absent node, and at the second analysis a fault of every kind (priced in a job and in capacity in no job).
EXAMPLE = Case(
    n_sites=1, ultraservers_per_site=3, absent=frozenset({11}),
    jobs=((frozenset({8}), frozenset({0, 1}), 0), (frozenset({9}), frozenset(), 1)),
    analyses=(Analysis(modes=("busy",) * 12, seed=1, faults=()),
              Analysis(modes=("busy",) * 8 + ("mixed", "idle", "peak", "busy"), seed=2, faults=(
                  ("throttle", 4 * 16 + 3, 0.7), ("slow_clock", 2 * 16, 0.9), ("straggler", 10 * 16 + 1, 0.5),
                  ("link", 5 * 48 + 7, 0.6), ("link_down", 10 * 48 + 40, 0.0), ("efa", 8 * 16 + 2, 0.5),
                  ("efa_down", 10 * 16 + 3, 1.0), ("node_efa_slow", 1, 0.4), ("node_neuronlink_slow", 6, 0.8),
                  ("node_cooling", 7, 0.0), ("failed", 9 * 16 + 2, 0.0), ("stale", 11 * 16, 0.0)))),
)
# The same, the three-UltraServer job and the capacity in no job stalled (delivering nothing) at the second.
STALLED = replace(EXAMPLE, analyses=(EXAMPLE.analyses[0], Analysis(
    modes=("idle",) * 9 + ("busy", "idle", "busy"), seed=2,
    faults=(("node_lost", 10, 0.0), ("stale", 3 * 16 + 5, 0.0)))))


def membership(topo: Topology, jobs: tuple[tuple[frozenset[int], frozenset[int], int], ...]) -> JobMembership:
    """Return the membership of the jobs (ids j00, j01, ...: numbered in their order), resolved on ``topo``."""
    docs = [JobDocument(v=1, id=f"j{k:02d}", name=f"j{k:02d}", owner="o", scheduler="static", source="test",
                        nodes=[f"n{n}" for n in sorted(nodes)], ultraservers=[f"u{u}" for u in sorted(uss)],
                        start_s=float(start))
            for k, (nodes, uss, start) in enumerate(jobs)]
    return resolve_jobs(NameIndex.of(topo), docs)


def chip_rates(topo: Topology, analysis: Analysis) -> np.ndarray:
    """Return each chip's FP8 FLOP rate (NaN: unknown) for the nodes' modes."""
    rng = np.random.default_rng(analysis.seed)
    cpn = topo.chips_per_node
    rates = rng.uniform(0.0, PEAK, (topo.n_nodes, cpn))
    modes = np.array(analysis.modes)[:, None]
    rates = np.where(modes == "peak", PEAK, rates)
    rates = np.where(modes == "idle", 0.0, rates)
    rates = np.where((modes == "unknown") | ((modes == "mixed") & (rng.random(rates.shape) < 0.3)), np.nan, rates)
    return rates.reshape(-1)


def _fault(det: FleetDetector, kind: str, number: int, severity: float) -> None:
    """Set one detector verdict (``number`` taken modulo the count of the entities of its kind: it may fall on
    an absent node, which counts nowhere)."""
    topo, chips, links, efa = det.state.topology, det.chips, det.links, det.efa
    chip, link, port, node = (number % topo.n_chips, number % topo.n_links, number % topo.n_efa,
                              number % topo.n_nodes)
    if kind in ("throttle", "slow_clock"):  # a slow clock alone: a compute loss no unhealthy entity explains
        det.state.chips.gauges["clock_ratio"][chip] = severity
        if kind == "throttle":
            chips.tracker.state[chip] = THROTTLED
    elif kind == "straggler":
        chips.tracker.state[chip] = STRAGGLER
        chips.efficiency[chip] = severity
    elif kind in ("failed", "stale"):
        chips.tracker.state[chip] = FAILED if kind == "failed" else STALE
    elif kind in ("link", "link_down"):
        links.tracker.state[link] = 1 if kind == "link" else 2
        links.now_ratio[link] = severity
        if kind == "link_down":
            det.state.links.gauges["lanes_up"][link] = 0.0
    elif kind == "efa":
        efa.tracker.state[port] = 1
        efa.share[port] = severity
        efa.latency_ratio[port] = 1.0 + 4.0 * (1.0 - severity) if not math.isnan(severity) else math.nan
        efa.retrans_share[port] = 0.1 * severity if not math.isnan(severity) else 0.0
    elif kind in ("efa_down", "efa_stale"):
        efa.tracker.state[port] = 2 if kind == "efa_down" else 3
    elif kind in ("node_lost", "node_cooling"):
        det.cooling.nodes.state[node] = 2 if kind == "node_lost" else 1
    else:  # a node whose every path is slow against its peers'
        name = "efa" if kind == "node_efa_slow" else "neuronlink"
        reason = Reason.EFA_NODE_SLOW if name == "efa" else Reason.NEURONLINK_NODE_SLOW
        det.node_paths.tracker.state[node] = 1
        det.node_paths.tracker.reason[node] |= np.int32(reason)
        det.node_paths.smoothed[name].ratio[node] = severity


def analysed(topo: Topology, analysis: Analysis, now_s: float) -> tuple[Throughput, FleetDetector]:
    """Return the throughput of the analysis's chips (each present chip heard at ``now_s``, its FLOP rate that
    of its mode, its utilisation known where its rate is) and detectors holding its verdicts."""
    state = FleetState(topo)
    state.now_s = now_s
    rates = chip_rates(topo, analysis)
    chips = state.chips
    chips.rx_s[:] = np.where(topo.chip_present, now_s, np.nan)
    chips.rates["fp8_flop_total"][:] = rates
    chips.gauges["util"][:] = np.where(np.isnan(rates), np.nan, 1.0)
    det = FleetDetector(state)
    for kind, number, severity in analysis.faults:
        _fault(det, kind, number, severity)
    return compute_throughput(state, peak_flops_per_chip=PEAK, stale_after_s=3.0), det


Priced = tuple[Throughput, JobLoss, LostByCause]


def priced(case: Case, jobs: JobMembership | None = None, *, learn: bool = True) -> tuple[Topology, JobMembership,
                                                                                        list[Priced]]:
    """Return the topology, the membership and both analyses' prices, shares kept across them (``learn``)."""
    topo = case.topology()
    members = membership(topo, case.jobs) if jobs is None else jobs
    shares = HealthyShares.empty(topo.n_nodes, halflife_s=60.0) if learn else None
    out = []
    for now_s, analysis in zip((0.0, 1.0), case.analyses, strict=True):
        throughput, det = analysed(topo, analysis, now_s)
        per_job, levels = price_fleet(throughput, det, members, params=PARAMS, shares=shares)
        out.append((throughput, per_job, levels))
    return topo, members, out


def close(a: float | np.ndarray, b: float | np.ndarray) -> bool:
    return bool(np.allclose(a, b, rtol=REL, atol=ABS))


def job_ultraservers(topo: Topology, members: JobMembership) -> list[set[int]]:
    """Return the UltraServers each job holds a node in."""
    return [set(topo.node_ultraserver[members.job_nodes(j)].tolist()) for j in range(members.n_jobs)]


class TestEveryLevelAddsUp:
    @given(cases())
    @example(EXAMPLE)
    @example(STALLED)
    @settings(max_examples=80, deadline=None)
    def test_fleet_sites_ultraservers_and_jobs_agree_by_cause(self, case: Case) -> None:
        """For every cause, at both analyses: the fleet's loss is its sites' sum, their UltraServers' sum, and
        the jobs' losses plus the capacity in no job's (within 1e-9)."""
        topo, members, runs = priced(case)
        for _tp, per_job, levels in runs:
            fleet = levels.fleet()
            unallocated = levels.unallocated_fleet()
            assert per_job.n_jobs == levels.n_jobs == members.n_jobs
            for cause in CAUSES:
                sites = float(levels.site[cause].sum())
                uss = float(levels.ultraserver[cause].sum())
                jobs = float(per_job.lost[cause].sum())
                assert levels.site[cause].shape == (topo.n_sites,)
                assert levels.ultraserver[cause].shape == (topo.n_ultraservers,)
                assert close(fleet[cause], sites), cause
                assert close(sites, uss), cause
                assert close(uss, jobs + unallocated[cause]), (cause, uss, jobs, unallocated[cause])
                per_site = np.bincount(topo.ultraserver_site, weights=levels.ultraserver[cause],
                                       minlength=topo.n_sites)
                assert close(levels.site[cause], per_site), cause


class TestFiguresArePhysical:
    @given(cases())
    @example(EXAMPLE)
    @example(STALLED)
    @settings(max_examples=80, deadline=None)
    def test_every_loss_is_finite_and_not_negative_and_every_goodput_a_ratio(self, case: Case) -> None:
        """Every lost figure (per job, UltraServer, site, fleet, unallocated, culprit) is finite and >= 0; each
        job's goodput and each UltraServer's, site's and the fleet's (effective / (effective + lost)) lies in
        [0, 1] wherever anything could run, and is known wherever its whole is not 0."""
        _topo, _members, runs = priced(case)
        for tp, per_job, levels in runs:
            figures = [per_job.culprit_flops, levels.culprit_flops]
            for cause in CAUSES:
                figures += [per_job.lost[cause], levels.ultraserver[cause], levels.site[cause],
                            levels.unallocated[cause], np.array([levels.fleet()[cause]])]
            for values in figures:
                assert np.isfinite(values).all(), values
                assert (values >= 0).all(), values
            whole = per_job.effective + per_job.lost_total
            ratio = per_job.goodput_ratio
            assert ((ratio >= 0) & (ratio <= 1))[whole > 0].all(), ratio
            assert np.isnan(ratio[whole <= 0]).all()
            assert 0.0 <= per_job.allocated_goodput_ratio <= 1.0 or (
                math.isnan(per_job.allocated_goodput_ratio) and float(whole.sum()) == 0.0)
            for effective, lost in ((tp.ultraserver_effective, levels.total("ultraserver")),
                                    (tp.site_effective, levels.total("site")),
                                    (np.array([tp.fleet_effective]), np.array([sum(levels.fleet().values())]))):
                assert (effective >= 0).all()
                with np.errstate(invalid="ignore", divide="ignore"):
                    goodput = effective / (effective + lost)
                assert ((goodput >= 0) & (goodput <= 1))[effective + lost > 0].all(), goodput


class TestFleetCulprits:
    @given(cases())
    @example(EXAMPLE)
    @example(STALLED)
    @settings(max_examples=80, deadline=None)
    def test_the_culprits_are_few_sorted_real_and_never_more_than_the_loss(self, case: Case) -> None:
        """At most 20 culprits, each costing > 0, the costliest first; each names the job it slows (one that
        holds the entity's node) or -1 for capacity in no job (the entity's node in none); together they cost
        no more than the fleet loses, a job's no more than that job loses, -1's no more than the capacity in no
        job loses (1e-9); and a job's culprit's cost is what that job's figures charge the entity."""
        topo, members, runs = priced(case)
        entity_node = {"chip": topo.chip_node, "neuronlink": topo.link_node, "efa": topo.efa_node,
                       "node": np.arange(topo.n_nodes)}
        for _tp, per_job, levels in runs:
            culprits = levels.culprits()
            flops = [f for *_, f in culprits]
            assert len(culprits) <= FLEET_CULPRITS
            assert all(f > 0 for f in flops)
            assert flops == sorted(flops, reverse=True)
            spent = np.zeros(members.n_jobs + 1)  # the last: capacity in no job
            for kind, ident, job, cost in culprits:
                assert kind in CULPRIT_KINDS
                assert -1 <= job < members.n_jobs
                assert members.node_job[entity_node[kind][ident]] == job
                spent[job] += cost
                if job >= 0:
                    charged_job, charged = per_job.charged(kind, np.array([ident]))
                    assert (int(charged_job[0]), float(charged[0])) == (job, cost)
            assert sum(flops) <= sum(levels.fleet().values()) * (1 + REL)
            assert (spent[:-1] <= per_job.lost_total * (1 + REL)).all(), (spent, per_job.lost_total)
            assert spent[-1] <= sum(levels.unallocated_fleet().values()) * (1 + REL)


class TestPlacement:
    @given(cases())
    @example(EXAMPLE)
    @example(STALLED)
    @settings(max_examples=80, deadline=None)
    def test_a_job_s_loss_sits_only_where_the_job_holds_nodes(self, case: Case) -> None:
        """Per cause, what an UltraServer carries beyond its capacity in no job's loss is a share of the losses
        of the jobs holding nodes there, and all of every job's loss is placed: the placed figures are a
        transport of each job's loss onto its own UltraServers (Hall's condition: for every set of jobs, their
        losses are at most what their UltraServers carry, with equality over all jobs; within 1e-9)."""
        topo, members, runs = priced(case)
        where = job_ultraservers(topo, members)
        no_job = sorted(set(range(topo.n_ultraservers)).difference(*where))
        for _tp, per_job, levels in runs:
            for cause in CAUSES:
                placed = levels.ultraserver[cause] - levels.unallocated[cause]
                assert (placed >= -ABS - REL * levels.ultraserver[cause]).all(), (cause, placed)
                loss = per_job.lost[cause]
                assert close(placed[no_job], 0.0), cause
                assert close(placed.sum(), loss.sum()), cause
                for size in range(1, members.n_jobs + 1):
                    for jobs in itertools.combinations(range(members.n_jobs), size):
                        there = sorted(set().union(*(where[j] for j in jobs)))
                        assert loss[list(jobs)].sum() <= placed[there].sum() * (1 + REL) + ABS, (cause, jobs)

    @given(cases())
    @example(EXAMPLE)
    @example(STALLED)
    @settings(max_examples=80, deadline=None)
    def test_capacity_in_no_job_loses_only_on_its_own_ultraserver(self, case: Case) -> None:
        """What capacity in no job loses sits on UltraServers with a present node in no job, and is part of
        what the UltraServer carries; without jobs it is all of it."""
        topo, members, runs = priced(case)
        free = (members.node_job < 0) & topo.node_present
        has_free = np.bincount(topo.node_ultraserver[free], minlength=topo.n_ultraservers) > 0
        for _tp, _per_job, levels in runs:
            for cause in CAUSES:
                unallocated = levels.unallocated[cause]
                assert (unallocated[~has_free] == 0).all(), cause
                assert (unallocated <= levels.ultraserver[cause] * (1 + REL) + ABS).all(), cause
                if members.n_jobs == 0:
                    assert close(unallocated, levels.ultraserver[cause]), cause


def one_per_ultraserver(topo: Topology) -> JobMembership:
    """Return the membership of one job per UltraServer (ids j00, j01, ... in UltraServer order)."""
    return membership(topo, tuple((frozenset(), frozenset({u}), 0) for u in range(topo.n_ultraservers)))


def assert_same_per_ultraserver(topo: Topology, fallback: list[Priced], jobs: list[Priced]) -> None:
    """The fallback's per-UltraServer figures are the one-UltraServer jobs' (their levels' and their own), and
    its culprits the jobs' (each naming capacity in no job, not a job)."""
    job_us = np.array([int(i[1:]) for i in one_per_ultraserver(topo).ids])
    for (_a, _none, by_us), (_b, per_job, levels) in zip(fallback, jobs, strict=True):
        for cause in CAUSES:
            np.testing.assert_allclose(levels.ultraserver[cause], by_us.ultraserver[cause], rtol=REL, atol=ABS)
            np.testing.assert_allclose(by_us.unallocated[cause], by_us.ultraserver[cause], rtol=REL, atol=ABS)
            per_us = np.zeros(topo.n_ultraservers)
            per_us[job_us] = per_job.lost[cause]
            np.testing.assert_allclose(per_us, by_us.ultraserver[cause], rtol=REL, atol=ABS)
        assert [c[:2] for c in by_us.culprits()] == [c[:2] for c in levels.culprits()]
        assert {c[2] for c in by_us.culprits()} <= {-1}
        np.testing.assert_allclose(by_us.culprit_flops, levels.culprit_flops, rtol=REL, atol=ABS)


class TestTheFallbackIsOneUltraServerJobs:
    @given(cases(jobs=False))
    @example(replace(EXAMPLE, jobs=()))
    @example(replace(STALLED, jobs=()))
    @settings(max_examples=60, deadline=None)
    def test_without_learned_shares(self, case: Case) -> None:
        """Priced without learned shares, a fleet with no jobs carries on each UltraServer, by cause and at both
        analyses, what jobs of exactly one UltraServer each lose (within 1e-9), and names the same culprits."""
        topo = case.topology()
        _, _, fallback = priced(case, JobMembership.empty(topo.n_nodes), learn=False)
        _, _, jobs = priced(case, one_per_ultraserver(topo), learn=False)
        assert_same_per_ultraserver(topo, fallback, jobs)

    @given(cases(jobs=False, idle=False))
    @example(replace(EXAMPLE, jobs=()))
    @example(replace(STALLED, jobs=()))
    @settings(max_examples=60, deadline=None)
    def test_with_shares_kept_across_analyses(self, case: Case) -> None:
        """With each node's healthy share kept across two analyses, the same holds wherever no capacity sat
        idle: idle capacity in no job learns a healthy share of 0 (its stall costs nothing), a job keeps what
        it learned while it stepped."""
        topo = case.topology()
        _, _, fallback = priced(case, JobMembership.empty(topo.n_nodes))
        _, _, jobs = priced(case, one_per_ultraserver(topo))
        assert_same_per_ultraserver(topo, fallback, jobs)
