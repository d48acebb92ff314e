"""Specification of which peers a path detector compares an entity with, and
over which time: agents that sample out of phase, with their own clock skew
and jitter, through a training step whose traffic swings x16, must neither
raise healthy ports or links nor turn a node that slows as a whole into one
fault per port or link (issue 22 item 1; docs/detection.md, "Peers and time
bases").

The shape is the independent publisher's: UltraServers of 3 nodes (a partial
UltraServer), one agent per node with its own phase within the analysis tick,
skew within +-1.5 s and 25 ms of jitter, and counters that are the integral of
the step cycle's rate, so each agent's interval rate depends on where in the
step its interval fell.  The state is fed sample by sample, each analysis
taking the samples that arrived since the last one, as the ingest does.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd._types import F64
from rainierd.core import FleetState
from rainierd.core.detect._stats import others_nanmedian
from rainierd.core.detect.efa import EfaDetector
from rainierd.core.detect.neuronlink import LinkDetector
from rainierd.fleet.topology import Topology, build_sites
from rainierd.wire import LINK_DTYPE
from rainierd.wire.records import EFA_DTYPE_V1

SEEDS = range(5)
TICK_S = 1.0
STEP_S = 6.0  # a training step of six sample intervals
BURST = 0.1  # the share of a step spent in its collective, at 16x the traffic of the rest
SWING = 16.0


def step_integral(t: F64) -> F64:
    """Return the integral of the step cycle's traffic rate (1 outside the collective, 16 inside) up to ``t``."""
    steps, into = np.divmod(t, STEP_S)
    burst_s = BURST * STEP_S
    per_step = SWING * burst_s + (STEP_S - burst_s)
    inside = np.minimum(into, burst_s)
    return np.asarray(steps * per_step + SWING * inside + np.maximum(into - burst_s, 0.0), dtype=np.float64)


@dataclass
class OutOfPhase:
    """Three-node UltraServers (``nodes_present`` of their four) whose node agents sample at their own phase, skew
    and jitter."""

    seed: int
    ports_per_node: int = 8
    ultraservers: int = 6
    nodes_present: int = 3
    topo: Topology = field(init=False)
    state: FleetState = field(init=False)

    def __post_init__(self) -> None:
        present = np.tile(np.arange(4) < self.nodes_present, self.ultraservers)
        self.topo = build_sites([self.ultraservers], name="aligned", efa_ports_per_node=self.ports_per_node,
                                node_present=present)
        self.state = FleetState(self.topo)
        self.rng = np.random.default_rng(self.seed)
        n_nodes = self.topo.n_nodes
        self.nodes = np.flatnonzero(present)
        self.phase_s = self.rng.uniform(0.0, TICK_S, n_nodes)
        self.skew_s = self.rng.uniform(-1.5, 1.5, n_nodes)
        self.efa_share = self.rng.uniform(0.9, 1.1, self.topo.n_efa)  # traffic is never perfectly balanced
        self.link_share = self.rng.uniform(0.9, 1.1, self.topo.n_links)
        self.efa_total = np.zeros(self.topo.n_efa, np.float64)
        self.link_total = np.zeros(self.topo.n_links, np.float64)
        self.last_s = np.full(n_nodes, np.nan)  # each node's last true sample time
        self.efa_level = np.ones(self.topo.n_efa)  # a fault's share of its traffic left
        self.link_level = np.ones(self.topo.n_links)
        self.unresponsive = np.zeros(self.topo.n_efa, bool)  # ports whose remote stopped answering
        self.unresponsive_total = np.zeros(self.topo.n_efa, np.uint64)
        self.efa = EfaDetector(self.state)
        self.links = LinkDetector(self.state)

    def _sample(self, node: int, t_s: float) -> None:
        """Apply one frame of ``node`` sampled at true time ``t_s`` (its clock: ``t_s`` plus its skew)."""
        publisher_s = np.array([t_s + self.skew_s[node]])
        rx_s = np.array([t_s + 0.005])
        previous = self.last_s[node]
        carried = 0.0 if np.isnan(previous) else float(step_integral(np.array([t_s]))[0]
                                                       - step_integral(np.array([previous]))[0])
        interval = 1.0 if np.isnan(previous) else t_s - previous
        self.last_s[node] = t_s
        for kind, table, dtype, ids, level, share, total, base in (
            # Wire v1's EFA record, as the simulator's agent sends it: the fields added since are unknown.
            ("efa", self.state.efa, EFA_DTYPE_V1, self.topo.node_efa(node), self.efa_level, self.efa_share,
             self.efa_total, 2.5e9),
            ("link", self.state.links, LINK_DTYPE, self.topo.node_links(node), self.link_level, self.link_share,
             self.link_total, 2.0e10),
        ):
            at = np.arange(ids.start, ids.stop)
            noise = 1.0 + self.rng.normal(0.0, 0.02, at.size)
            moved = base * carried * share[at] * level[at] * noise
            total[at] += moved
            records = np.zeros(at.size, dtype)
            records["tx_bytes_total"] = total[at].astype(np.uint64)
            records["latency_us"] = 12.0 * (1.0 + self.rng.normal(0.0, 0.02, at.size))
            if kind == "efa":
                records["rx_bytes_total"] = records["tx_bytes_total"]
                self.unresponsive_total[at] += self.unresponsive[at].astype(np.uint64)
                records["unresponsive_remote_events_total"] = self.unresponsive_total[at]
                records["port"] = at
            else:
                records["link"] = at
                # Bandwidth while transferring (docs/publishing.md), which still depends on where in the
                # step the agent's interval fell: the collective's transfers run at the link's full rate,
                # the compute phase's smaller ones at 3/4 of it.
                in_collective = max(carried - interval, 0.0) / (SWING - 1.0) / interval
                records["bw_bytes_s"] = base * share[at] * level[at] * noise * (0.75 + 0.25 * in_collective)
                records["lanes_up"] = 8
            columns = {name: records[name] for name in dtype.names if name not in ("port", "link")}
            table.apply(at, columns, t_s=np.repeat(publisher_s, at.size), rx_s=np.repeat(rx_s, at.size),
                        known=(1 << len(dtype.names)) - 1)

    def run(self, seconds: float, *, fault_at_s: float = np.inf, efa: Sequence[int] = (),
            links: Sequence[int] = (), level: float = 0.5, unresponsive: Sequence[int] = ()) -> dict[str, set[int]]:
        """Run ``seconds`` of analysis ticks; from ``fault_at_s`` the ports ``efa`` and links ``links`` carry
        ``level`` of their traffic, and the ports ``unresponsive`` count unresponsive-remote events.  Return the
        ports and links raised."""
        raised: dict[str, set[int]] = {"efa": set(), "link": set()}
        for tick in range(1, int(seconds / TICK_S) + 1):
            now_s = tick * TICK_S
            if now_s - TICK_S >= fault_at_s:
                self.efa_level[list(efa)] = level
                self.link_level[list(links)] = level
                self.unresponsive[list(unresponsive)] = True
            # Every node samples once a tick at its own phase (with jitter); the analysis at now_s takes what
            # arrived in the tick before it.
            for node in self.nodes:
                t_s = now_s - TICK_S + self.phase_s[node] + self.rng.normal(0.0, 0.025)
                self._sample(int(node), t_s)
            self.state.now_s = now_s
            self.state.latest_tick = tick
            for name, detector in (("efa", self.efa), ("link", self.links)):
                changes = detector.update(tick)
                raised[name] |= {int(i) for i, after in zip(changes.ids, changes.after, strict=True) if after}
        return raised


# The three scenarios of each seed, run once and read by the EFA and the NeuronLink tests alike: a port on
# the fifth node and a ring link on the third at half, and every port and link of the second node at half.
@functools.cache
def healthy(seed: int) -> dict[str, set[int]]:
    """Return what 3 minutes of a healthy fleet raise."""
    return OutOfPhase(seed).run(180.0)


def half_port(fleet: OutOfPhase) -> int:
    """Return the port the one-port scenario halves."""
    return int(fleet.topo.node_efa(int(fleet.nodes[4])).start) + 3


def half_link(fleet: OutOfPhase) -> int:
    """Return the (ring) link the one-link scenario halves."""
    links = fleet.topo.node_links(int(fleet.nodes[2]))
    return int(np.flatnonzero(fleet.topo.link_kind[links.start:links.stop] == 1)[2]) + links.start


@functools.cache
def one_each(seed: int) -> tuple[int, int, dict[str, set[int]]]:
    """Return (port, link, raised) for one port and one link (on other nodes) at half from 60 s on."""
    fleet = OutOfPhase(seed)
    port, link = half_port(fleet), half_link(fleet)
    return port, link, fleet.run(90.0, fault_at_s=60.0, efa=[port], links=[link])


@functools.cache
def whole_node(seed: int) -> dict[str, set[int]]:
    """Return what a node whose every port and link carries half from 60 s on raises."""
    fleet = OutOfPhase(seed)
    node = int(fleet.nodes[1])
    return fleet.run(90.0, fault_at_s=60.0, efa=list(fleet.topo.node_efa(node)),
                     links=list(fleet.topo.node_links(node)))


class TestEfaPortsOutOfPhase:
    @pytest.mark.parametrize("seed", SEEDS)
    def test_healthy_ports_raise_nothing(self, seed: int) -> None:
        """Nodes sampling at different phases of a x16 step cycle, with skew and jitter: no port raised in 3 min."""
        assert healthy(seed)["efa"] == set()

    @pytest.mark.parametrize("seed", SEEDS)
    def test_one_port_at_half_its_share_is_that_port(self, seed: int) -> None:
        """One port carrying half its usual share from 60 s on is raised, alone."""
        port, _link, raised = one_each(seed)
        assert raised["efa"] == {port}

    @pytest.mark.parametrize("seed", SEEDS)
    def test_a_whole_node_at_half_is_no_port_fault(self, seed: int) -> None:
        """Every port of one node at half its traffic together is the node's matter (its job, its host), not
        eight port faults: no port raised."""
        assert whole_node(seed)["efa"] == set()


class TestEfaFewPortsANode:
    @pytest.mark.parametrize("ports", [2, 4])
    def test_with_two_or_four_ports_one_port_at_half_is_that_port(self, ports: int) -> None:
        """A node of 2 (or 4) ports still judges each against the others of its node: one at half is raised,
        alone, and nothing else."""
        fleet = OutOfPhase(1, ports_per_node=ports)
        port = int(fleet.topo.node_efa(int(fleet.nodes[4])).start)
        assert fleet.run(90.0, fault_at_s=60.0, efa=[port])["efa"] == {port}

    @pytest.mark.parametrize("ports", [1, 2])
    def test_healthy_nodes_of_one_or_two_ports_raise_nothing(self, ports: int) -> None:
        """Out of phase, nodes of one or two ports raise nothing."""
        assert OutOfPhase(2, ports_per_node=ports).run(180.0)["efa"] == set()

    def test_a_lone_port_is_not_judged_on_bandwidth(self) -> None:
        """A node of one port has no peer that saw the same seconds: at half its traffic, or at none, it is not
        raised on traffic (documented: the UltraServer's other nodes sampled other seconds)."""
        fleet = OutOfPhase(3, ports_per_node=1)
        ports = [int(fleet.topo.node_efa(int(fleet.nodes[node])).start) for node in (2, 4)]
        assert fleet.run(90.0, fault_at_s=60.0, efa=ports[:1])["efa"] == set()
        fleet = OutOfPhase(3, ports_per_node=1)
        assert fleet.run(90.0, fault_at_s=60.0, efa=ports[1:], level=0.0)["efa"] == set()

    def test_a_lone_port_is_still_judged_on_hard_evidence(self) -> None:
        """A node of one port whose remote stops answering is raised, alone."""
        fleet = OutOfPhase(3, ports_per_node=1)
        port = int(fleet.topo.node_efa(int(fleet.nodes[4])).start)
        assert fleet.run(90.0, fault_at_s=60.0, unresponsive=[port])["efa"] == {port}


class TestLinksOutOfPhase:
    @pytest.mark.parametrize("seed", SEEDS)
    def test_healthy_links_raise_nothing(self, seed: int) -> None:
        """Links whose nodes report at different phases of a x16 step cycle: none raised in 3 min."""
        assert healthy(seed)["link"] == set()

    @pytest.mark.parametrize("seed", SEEDS)
    def test_one_link_at_half_is_that_link(self, seed: int) -> None:
        """One ring link at half its bandwidth from 60 s on is raised, alone."""
        _port, link, raised = one_each(seed)
        assert raised["link"] == {link}

    @pytest.mark.parametrize("seed", SEEDS)
    def test_a_whole_node_at_half_is_no_link_fault(self, seed: int) -> None:
        """Every link one node reports at half together is that node's pace, not 48 link faults."""
        assert whole_node(seed)["link"] == set()


class TestOthersMedian:
    @given(rows=st.lists(st.lists(st.one_of(st.integers(-3, 3).map(float), st.just(float("nan"))),
                                  min_size=4, max_size=4), min_size=1, max_size=6))
    @settings(max_examples=200, deadline=None)
    def test_is_the_median_of_the_rest_of_the_row(self, rows: list[list[float]]) -> None:
        """Each value's reference is the median of the other finite values of its row (NaN when it is NaN or
        alone), ties and NaNs included: what a port is compared with is its node's other ports."""
        values = np.array(rows, np.float32)
        expected = np.full(values.shape, np.nan, np.float32)
        for (i, j), v in np.ndenumerate(values):
            others = np.delete(values[i], j)
            others = others[np.isfinite(others)]
            if np.isfinite(v) and others.size:
                expected[i, j] = np.median(others)
        np.testing.assert_array_equal(others_nanmedian(values), expected)
