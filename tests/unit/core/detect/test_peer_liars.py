"""Specification of issue 35 item 2, "no node can convict another": one node's own agent reporting its EFA
bytes x3 (an outside probe did it through the shipped Mosquitto ACL) must neither make a healthy peer
``path_degraded`` nor get it a drain proposed; the liar is counted ``implausible``; a genuinely slow node beside
the liar is still found; a claim beyond the port's line rate is refused before any judgement sees it.  The same
for chips: no node's agent can make another node's chips stragglers.

The fleet is the simulator's (``FleetModel``, 2 UltraServers of 4 nodes, 1 s ticks) fed through
``MonitorCore.step``, the liar's frames rewritten on the way as its agent would send them, and the advisory
policy run after every analysis with dry run off and a 10 s hold, as the probe ran it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import ActionPolicy
from rainierd.core.analysis import MonitorCore
from rainierd.core.detect._peers import ChipPeers
from rainierd.fleet.topology import build_fleet
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire.records import NodeFrame
from tests.unit.core.detect.test_chips_peers import ChipFeed, one
from tests.unit.core.test_jobmodel import membership, nodes

LIAR = 2
SLOW = 4  # a node whose EFA ports genuinely carry 0.45 of their traffic (efa_node_degraded), in the 6-node job
TICKS = 200


@dataclass(frozen=True)
class Outcome:
    """What a run shows: every node raise (tick, node, reasons), the advisories proposed (node, action) at any
    tick, the nodes counted implausible at the end and since the start, the unknown counts, and the EFA counters
    refused at ingest."""

    raised: tuple[tuple[int, int, tuple[str, ...]], ...]
    proposed: frozenset[tuple[str, str]]
    implausible: tuple[int, ...]
    implausible_onsets: int
    unknown: int
    refused: int


def lie(frame: object, factor: float) -> object:
    """Return ``frame`` with the liar's EFA byte counters multiplied by ``factor`` (any other frame as is)."""
    if not isinstance(frame, NodeFrame) or frame.node != LIAR:
        return frame
    efa = frame.efa.copy()
    for name in ("tx_bytes_total", "rx_bytes_total"):
        efa[name] = (efa[name].astype(np.float64) * factor).astype(efa[name].dtype)
    return dataclasses.replace(frame, efa=efa)


@functools.cache
def run(job: Sequence[int], factor: float = 3.0, *, slow_from: int | None = None) -> Outcome:
    """Run ``TICKS`` seconds of a fleet whose nodes ``job`` are one job and whose node ``LIAR`` reports its EFA
    bytes times ``factor``; from ``slow_from`` node ``SLOW`` is genuinely slow."""
    topo = build_fleet(1, 2)
    faults = [] if slow_from is None else [Fault(FaultKind.EFA_NODE_DEGRADED, SLOW, 0.45, slow_from, 10 * TICKS)]
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=0.0, faults=faults)
    core = MonitorCore(topo)
    policy = ActionPolicy(topo, ActionConfig(hold_s=10.0, dry_run=False))
    members = membership(topo, {"j": nodes(*job)})
    raised, proposed = [], set()
    for tick in range(TICKS):
        frames = [lie(f, factor) for _t, f in tick_frames(topo, model.step(tick), publisher="t")]
        analysis = core.step(frames, jobs=members if tick == 0 else None)  # type: ignore[arg-type]
        raised += [(tick, e.id, e.reasons) for e in analysis.events if e.raised and e.entity == "node"]
        view = policy.update(analysis.health, t_s=1.8e9 + tick, jobs=analysis.jobs, loss=analysis.job_loss,
                             phases=analysis.job_phases)
        proposed |= {(a.node, a.action) for a in view.advisories if a.state == "proposed"}
    health = analysis.health
    key = ("node", "efa_paths")
    refused = sum(n for (table, _field, _reason), n in core.stats.counters_refused.items() if table == "efa")
    return Outcome(tuple(raised), frozenset(proposed), tuple(health.implausible[key].tolist()),
                   health.implausible_onsets[key], health.unknown[key], refused)


THREE, SIX = (0, 1, 2), (0, 1, 2, 3, 4, 5)


class TestTheLiarConvictsNoOne:
    @pytest.mark.parametrize("job", [THREE, SIX], ids=["3-node job", "6-node job"])
    def test_no_healthy_node_is_path_degraded(self, job: tuple[int, ...]) -> None:
        """With n2 reporting its EFA bytes x3, no node is raised at all (the probe: n0 and n1 path_degraded in a
        3-node job)."""
        assert run(job).raised == ()

    @pytest.mark.parametrize("job", [THREE, SIX], ids=["3-node job", "6-node job"])
    def test_no_drain_is_proposed(self, job: tuple[int, ...]) -> None:
        """No advisory is proposed for any node, with dry run off and a 10 s hold (the probe: n0's drain)."""
        assert run(job).proposed == frozenset()

    @pytest.mark.parametrize("job", [THREE, SIX], ids=["3-node job", "6-node job"])
    def test_the_liar_is_implausible_and_counted(self, job: tuple[int, ...]) -> None:
        """The liar, and it alone, is implausible for its EFA paths, once."""
        outcome = run(job)
        assert (outcome.implausible, outcome.implausible_onsets) == ((LIAR,), 1)

    def test_x3_passes_the_line_rate_bound(self) -> None:
        """x3 of the simulator's 20 % load is 60 % of the line rate: no counter is refused at ingest, so only the
        peer judgement can see the lie."""
        assert run(THREE).refused == 0

    def test_a_job_of_three_nodes_is_not_judged_against_peers(self) -> None:
        """In a 3-node job each node has two peers: none is judged for its paths, each counted unknown (with the
        UltraServer's node in no job, alone): 4 of the 8 nodes."""
        assert run(THREE).unknown == 4


class TestDetectionBesideTheLiar:
    def test_a_genuinely_slow_node_is_still_found_and_drained(self) -> None:
        """In the 6-node job with the liar, n4's ports at 0.45 from 120 s: n4, and only n4, is raised with its
        own level fallen, and a drain is proposed for it alone."""
        outcome = run(SIX, slow_from=120)
        assert [(node, reasons) for _tick, node, reasons in outcome.raised] == [
            (SLOW, ("efa_node_slow", "own_drop"))]
        assert outcome.raised[0][0] - 120 <= 40
        assert outcome.proposed == frozenset({(f"s0/u{SLOW // 4}/n{SLOW}", "drain")})
        assert outcome.implausible == (LIAR,)


class TestBeyondTheLineRate:
    def test_a_claim_over_the_line_rate_is_refused_and_convicts_no_one(self) -> None:
        """x6 of a 20 % load is 120 % of the port's line rate: every sample of the liar's byte counters is refused
        at ingest (counted), its node has no figure, so it is neither anyone's reference nor implausible, and no
        node is raised."""
        outcome = run(THREE, 6.0)
        assert outcome.refused > 0
        assert (outcome.raised, outcome.proposed, outcome.implausible) == ((), frozenset(), ())


class TestChipsOfAnotherNode:
    def test_a_two_node_job_is_judged_within_each_node(self) -> None:
        """In a job of nodes 0 and 1, node 1's agent reporting its chips' executions 3x faster than they are
        raises no chip of node 0 (the median of two nodes was their mean: every chip of node 0 at 1.5x it)."""
        feed = ChipFeed()
        job = np.full(feed.topo.n_nodes, -1, np.int64)
        job[[0, 1]] = 0
        latency = np.full(feed.topo.n_chips, 100.0)
        latency[feed.topo.node_chips(1)] = 30.0
        feed.run(90, latency=latency, node_group=job)
        assert feed.raised == []

    def test_a_slow_chip_of_a_two_node_job_is_still_found(self) -> None:
        """In the same job, a chip of node 0 whose executions take twice its node's is raised a straggler."""
        feed = ChipFeed()
        job = np.full(feed.topo.n_nodes, -1, np.int64)
        job[[0, 1]] = 0
        feed.run(90, latency=one(feed.topo.n_chips, 3, 200.0, 100.0), node_group=job)
        assert [(chip, state, reasons) for _t, chip, state, reasons in feed.raised] == [
            (3, "straggler", ("latency",))]

    def test_an_ultraserver_with_two_nodes_heard_is_judged_within_each_node(self) -> None:
        """Without jobs, an UltraServer of which only two nodes report a figure gives each node's chips their own
        node's median, not the median of the 32 (which the other node's 16 would carry)."""
        topo = build_fleet(1, 1)
        values = np.repeat(np.array([1.0, 3.0, np.nan, np.nan], np.float32), topo.chips_per_node)
        values[5] = 1.2
        per_node = ChipPeers.of(topo, None).median(values)[::topo.chips_per_node]
        assert per_node[:2].tolist() == [1.0, 3.0]

    def test_three_nodes_or_more_are_a_group(self) -> None:
        """A job of three nodes keeps its median of node medians: one node's figure far off moves it no further
        than the others' range."""
        topo = build_fleet(1, 1)
        job = np.array([0, 0, 0, -1], np.int64)
        values = np.repeat(np.array([1.0, 1.1, 30.0, 5.0], np.float32), topo.chips_per_node)
        per_node = ChipPeers.of(topo, job).median(values)[::topo.chips_per_node]
        assert per_node.tolist() == pytest.approx([1.1, 1.1, 1.1, 5.0])
