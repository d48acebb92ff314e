"""Specification of the fleet numbering (rainierd.fleet.topology)."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.errors import ConfigError
from rainierd.fleet.topology import LINK_KIND_RING, LINK_KIND_TORUS, build_sites, build_topology


class TestPresetSizes:
    @pytest.mark.parametrize(
        ("preset", "sites", "ultraservers", "chips"),
        [
            ("demo", 1, 2, 128),
            ("ultraserver", 1, 1, 64),
            ("rainier", 3, 7_800, 499_200),
            ("rainier-1m", 5, 15_625, 1_000_000),
        ],
    )
    def test_counts(self, preset: str, sites: int, ultraservers: int, chips: int) -> None:
        """Each preset has its documented sites, UltraServers and chips, 3 NeuronLinks and 1 EFA port a chip."""
        topo = build_topology(preset)
        assert (topo.n_sites, topo.n_ultraservers, topo.n_nodes, topo.n_chips, topo.n_links, topo.n_efa) == (
            sites, ultraservers, ultraservers * 4, chips, 3 * chips, chips,
        )

    def test_efa_ports_are_configurable(self) -> None:
        """With 8 EFA ports a node, every other chip carries one."""
        topo = build_topology("ultraserver", efa_ports_per_node=8)
        assert topo.n_efa == 32
        assert topo.efa_chip[:8].tolist() == [0, 2, 4, 6, 8, 10, 12, 14]

    def test_sizes_between_the_presets(self) -> None:
        """sites=S,ultraservers=U builds S sites of U UltraServers each, numbered as the presets are."""
        topo = build_topology("sites=2,ultraservers=3")
        assert (topo.n_sites, topo.n_ultraservers, topo.n_nodes, topo.n_chips) == (2, 6, 24, 384)
        assert topo.ultraserver_site.tolist() == [0, 0, 0, 1, 1, 1]
        assert build_topology("sites=3,ultraservers=2600").n_chips == build_topology("rainier").n_chips

    def test_sizes_count_present_nodes_only(self) -> None:
        """A fleet of partial UltraServers counts the nodes, chips and ports it has, not its ids (the start log
        said chips=448 for a 384-chip inventory)."""
        present = np.array([True, True, False, True] + [True] * 4 + [False, False, True, False])
        topo = build_sites([3], name="partial", efa_ports_per_node=8, node_present=present)
        assert topo.n_chips == 12 * 16
        assert topo.sizes() == {"nodes": 8, "chips": 8 * 16, "efa_ports": 8 * 8}
        assert build_topology("demo").sizes() == {"nodes": 8, "chips": 128, "efa_ports": 128}

    def test_unknown_preset_is_a_config_error(self) -> None:
        """An unknown preset raises ConfigError naming the known ones."""
        with pytest.raises(ConfigError, match="demo, ultraserver, rainier, rainier-1m"):
            build_topology("rainier-2")


class TestNeuronLinkGraph:
    def test_ultraserver_is_a_4x4x4_torus(self) -> None:
        """Every chip of an UltraServer has 6 distinct NeuronLink neighbours over 192 distinct links."""
        topo = build_topology("ultraserver")
        pairs = {tuple(sorted(p)) for p in zip(topo.link_a.tolist(), topo.link_b.tolist(), strict=True)}
        neighbours: dict[int, set[int]] = {}
        for a, b in pairs:
            neighbours.setdefault(a, set()).add(b)
            neighbours.setdefault(b, set()).add(a)
        assert len(pairs) == 192
        assert {len(n) for n in neighbours.values()} == {6}

    def test_link_kinds(self) -> None:
        """Torus links stay inside a node; ring links join the same chip position in the next node."""
        topo = build_topology("demo")
        torus = topo.link_kind == LINK_KIND_TORUS
        ring = topo.link_kind == LINK_KIND_RING
        assert (topo.chip_node[topo.link_a[torus]] == topo.chip_node[topo.link_b[torus]]).all()
        a, b = topo.link_a[ring], topo.link_b[ring]
        assert (a % 16 == b % 16).all()
        assert (topo.chip_ultraserver[a] == topo.chip_ultraserver[b]).all()
        assert ((topo.chip_node[b] % 4) == (topo.chip_node[a] % 4 + 1) % 4).all()

    def test_links_never_cross_ultraservers(self) -> None:
        """NeuronLink stays inside an UltraServer at rainier scale too."""
        topo = build_topology("rainier")
        assert np.array_equal(topo.chip_ultraserver[topo.link_a], topo.chip_ultraserver[topo.link_b])


class TestIds:
    def test_node_ranges_are_contiguous(self) -> None:
        """A node's chips, links and ports are the contiguous id ranges its frame carries."""
        topo = build_topology("demo")
        node = 5
        assert (topo.chip_node[list(topo.node_chips(node))] == node).all()
        assert (topo.link_node[list(topo.node_links(node))] == node).all()
        assert (topo.efa_node[list(topo.node_efa(node))] == node).all()
        assert topo.node_path(node) == (0, 1, 5)

    def test_same_preset_same_ids(self) -> None:
        """Building a preset twice yields identical arrays (ids are stable)."""
        a, b = build_topology("demo"), build_topology("demo")
        assert np.array_equal(a.link_a, b.link_a)
        assert np.array_equal(a.link_b, b.link_b)
        assert np.array_equal(a.efa_chip, b.efa_chip)

    def test_arrays_are_read_only(self) -> None:
        """Index arrays cannot be modified by accident."""
        topo = build_topology("demo")
        with pytest.raises(ValueError, match="read-only"):
            topo.chip_node[0] = 3
