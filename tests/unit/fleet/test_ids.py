"""Every entity has one id: built from the topology, read back to the same entity, refused when it names nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from rainierd.fleet import ids
from rainierd.fleet.inventory import load_inventory
from rainierd.fleet.topology import build_topology

DEMO = build_topology("demo")


def test_the_ids_read_as_paths_with_local_part_numbers() -> None:
    assert ids.site_id(0) == "s0"
    assert ids.ultraserver_id(DEMO, 1) == "s0/u1"
    assert ids.node_id(DEMO, 4) == "s0/u1/n4"
    assert ids.chip_id(DEMO, 4 * 16 + 5) == "s0/u1/n4/chip5"
    assert ids.efa_id(DEMO, 4 * DEMO.efa_ports_per_node + 6) == "s0/u1/n4/efa6"
    # A node's links: 16 along x (link0), 16 along y (link1), 16 ring links (link2), chip by chip.
    assert ids.link_id(DEMO, 4 * 48 + 5) == "s0/u1/n4/chip5/link0"
    assert ids.link_id(DEMO, 4 * 48 + 16 + 5) == "s0/u1/n4/chip5/link1"
    assert ids.link_id(DEMO, 4 * 48 + 32 + 5) == "s0/u1/n4/chip5/link2"
    assert ids.entity_id(DEMO, "feed", 0) == "feed"


def test_a_link_id_names_the_chip_the_topology_gives_as_its_end() -> None:
    for link in range(DEMO.n_links):
        chip = int(DEMO.link_a[link])  # a global chip id
        assert ids.link_id(DEMO, link).startswith(ids.chip_id(DEMO, chip) + "/link")


@pytest.mark.parametrize(("kind", "count"), [("site", DEMO.n_sites), ("ultraserver", DEMO.n_ultraservers),
                                             ("node", DEMO.n_nodes), ("chip", DEMO.n_chips),
                                             ("neuronlink", DEMO.n_links), ("efa", DEMO.n_efa)])
def test_every_id_reads_back_to_its_entity_and_none_repeats(kind: str, count: int) -> None:
    names = [ids.entity_id(DEMO, kind, i) for i in range(count)]
    assert len(set(names)) == count
    assert [ids.parse(DEMO, name) for name in names] == [(kind, i) for i in range(count)]


def test_the_node_of_a_part_is_the_node_its_id_names() -> None:
    assert ids.entity_node(DEMO, "chip", 4 * 16 + 5) == 4
    assert ids.entity_node(DEMO, "neuronlink", 4 * 48 + 47) == 4
    assert ids.entity_node(DEMO, "efa", 4 * DEMO.efa_ports_per_node) == 4
    assert ids.entity_node(DEMO, "ultraserver", 1) is None


@pytest.mark.parametrize(("text", "why"), [
    ("n4/chip5", "not an entity id"),
    ("s0/u1/n4/chip5/", "not an entity id"),
    ("s1", "no site 1"),
    ("s0/u2", "UltraServer 2 is not in site 0"),
    ("s0/u0/n4", "node 4 is not in UltraServer 0"),
    ("s0/u1/n4/chip16", "chips 0-15"),
    ("s0/u1/n4/chip5/link3", "links 0-2"),
    ("s0/u1/n4/efa99", "EFA ports 0-"),
])
def test_an_id_that_names_nothing_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ids.parse(DEMO, text)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="no entity kind 'gpu'"):
        ids.entity_id(DEMO, "gpu", 0)


INVENTORY = load_inventory(Path(__file__).parents[2] / "data" / "inventory-two-sites.toml")


class TestEntityFields:
    """``entity_fields``: how every surface names an entity as data (events, the read API, culprits)."""

    def test_a_part_of_a_named_node_carries_its_node_ultraserver_and_hostname(self) -> None:
        """A chip of a node the inventory names: its id and index, its UltraServer's and node's ids, the hostname."""
        assert ids.entity_fields(INVENTORY, "chip", 6 * 16 + 3) == {
            "entity": "chip", "id": "s0/u1/n6/chip3", "index": 99, "ultraserver": "s0/u1", "node": "s0/u1/n6",
            "hostname": "ip-10-0-18-10"}

    def test_without_an_inventory_there_is_no_hostname(self) -> None:
        """The demo fleet names no host: the field is absent, never invented."""
        assert ids.entity_fields(DEMO, "neuronlink", 224) == {
            "entity": "neuronlink", "id": "s0/u1/n4/chip0/link2", "index": 224, "ultraserver": "s0/u1",
            "node": "s0/u1/n4"}

    @pytest.mark.parametrize(("kind", "index", "fields"), [
        ("ultraserver", 1, {"entity": "ultraserver", "id": "s0/u1", "index": 1, "ultraserver": "s0/u1"}),
        ("site", 1, {"entity": "site", "id": "s1", "index": 1}),
        ("feed", 0, {"entity": "feed", "id": "feed", "index": 0}),
    ])
    def test_above_the_node_only_what_holds_it(self, kind: str, index: int, fields: dict[str, object]) -> None:
        """An UltraServer names itself as its UltraServer; a site and the feed have neither node nor UltraServer."""
        assert ids.entity_fields(INVENTORY, kind, index) == fields

    def test_the_hostname_of_a_node_the_inventory_leaves_unnamed_is_none(self) -> None:
        """Node 5 is absent from the inventory: no hostname."""
        assert (ids.hostname_of(INVENTORY, 6), ids.hostname_of(INVENTORY, 5), ids.hostname_of(DEMO, 0)) == (
            "ip-10-0-18-10", None, None)
