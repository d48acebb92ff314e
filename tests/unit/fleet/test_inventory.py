"""Specification of inventories: a real fleet described in TOML, its ids,
its absent nodes, its names on the metrics, and clear errors for bad files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rainierd.core.analysis import MonitorCore
from rainierd.core.ingest import Received
from rainierd.errors import ConfigError
from rainierd.exporter.entities import EntityFamilies
from rainierd.fleet.inventory import MAX_INVENTORY_BYTES, MAX_NODES, load_inventory, load_topology
from rainierd.settings import load_settings
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire.topics import parse_topic

INVENTORY = Path(__file__).parents[2] / "data" / "inventory-two-sites.toml"


class TestShape:
    def test_sites_of_different_sizes_and_a_partial_ultraserver(self) -> None:
        """Two sites (2 and 1 UltraServers), 9 of 12 node ids present, numbered 4u + index in file order."""
        topo = load_inventory(INVENTORY)
        assert (topo.name, topo.n_sites, topo.n_ultraservers, topo.n_nodes) == ("test-two-sites", 2, 3, 12)
        assert topo.ultraserver_site.tolist() == [0, 0, 1]
        assert np.flatnonzero(topo.node_present).tolist() == [0, 1, 2, 3, 4, 6, 8, 9, 11]
        assert topo.n_present_chips == 9 * 16
        assert (topo.site_nodes(0), topo.site_nodes(1)) == (range(8), range(8, 12))

    def test_names_travel_with_the_ids(self) -> None:
        """Hostnames, instance ids and zones (a node's own, else its site's) are kept by node id."""
        names = load_inventory(INVENTORY).names
        assert (names.sites, names.ultraservers) == (("use2-dc1", "use2-dc2"), ("u0017", "u0018", "u0201"))
        assert (names.hostnames[6], names.instance_ids[6]) == ("ip-10-0-18-10", "i-0a1b2c3d4e5f60722")
        assert (names.hostnames[5], names.availability_zones[5]) == (None, None)
        assert (names.availability_zones[8], names.availability_zones[11]) == ("us-east-2b", "us-east-2c")
        assert names.node_labels(6) == (',hostname="ip-10-0-18-10",instance_id="i-0a1b2c3d4e5f60722"'
                                        ',availability_zone="us-east-2a"')

    def test_a_nodes_efa_devices_are_kept_in_port_order(self, tmp_path: Path) -> None:
        """efa_devices lists a node's EFA device names in port order (the bridge's map); unlisted nodes have none."""
        path = write(tmp_path, "efa_ports_per_node = 2\n[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n"
                               "[[site.ultraserver.node]]\nindex=0\nefa_devices=['rdmap32s0', 'rdmap16s0']\n"
                               "[[site.ultraserver.node]]\nindex=1\n")
        assert load_inventory(path).names.efa_devices == (("rdmap32s0", "rdmap16s0"), None, None, None)

    def test_the_same_file_gives_the_same_ids(self) -> None:
        """Ids derive from the file alone."""
        a, b = load_inventory(INVENTORY), load_inventory(INVENTORY)
        assert np.array_equal(a.node_present, b.node_present)
        assert np.array_equal(a.link_b, b.link_b)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    return path


class TestBadFiles:
    @pytest.mark.parametrize(("text", "message"), [
        ("[[site]]\nname='a'\n", "ultraserver"),
        ("[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=4\n", "index"),
        ("[[site]]\nname='a b'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=0\n", "name"),
        ("[[site]]\nname='a'\ncolour='red'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=0\n",
         "colour"),
        ("[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=0\nhostname='h'\n"
         "[[site.ultraserver.node]]\nindex=1\nhostname='h'\n", "hostname 'h' appears twice"),
        ("[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=1\n"
         "[[site.ultraserver.node]]\nindex=1\n", "node index twice"),
        ("[[site]\n", "inventory"),
        ("[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=0\n"
         "efa_devices=['rdmap16s0', 'rdmap16s0']\n", "EFA device twice"),
        ("efa_ports_per_node = 1\n[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\n"
         "index=0\nefa_devices=['rdmap16s0', 'rdmap32s0']\n", "more than its 1 ports"),
        ("[[site]]\nname='a'\n[[site.ultraserver]]\nname='u'\n[[site.ultraserver.node]]\nindex=0\n"
         "efa_devices=['../../etc']\n", "efa_devices"),
    ])
    def test_is_refused_naming_what_is_wrong(self, tmp_path: Path, text: str, message: str) -> None:
        """A bad inventory raises ConfigError naming the file and the problem."""
        path = write(tmp_path, text)
        with pytest.raises(ConfigError, match=message) as info:
            load_inventory(path)
        assert str(path) in str(info.value)

    def test_a_fifo_is_refused_not_waited_on(self, tmp_path: Path) -> None:
        """A named pipe with no writer would block the start for ever: it is refused as not a regular file."""
        fifo = tmp_path / "inventory.toml"
        os.mkfifo(fifo)
        with pytest.raises(ConfigError, match="not a regular file"):
            load_inventory(fifo)

    def test_a_directory_is_refused(self, tmp_path: Path) -> None:
        """A directory named like an inventory is refused with the same words."""
        folder = tmp_path / "inventory.toml"
        folder.mkdir()
        with pytest.raises(ConfigError, match="not a regular file"):
            load_inventory(folder)

    def test_a_file_larger_than_any_inventory_is_refused_before_it_is_read(self, tmp_path: Path) -> None:
        """Its size alone refuses it (a sparse file: nothing is written or read)."""
        path = tmp_path / "inventory.toml"
        with path.open("wb") as out:
            out.truncate(MAX_INVENTORY_BYTES + 1)
        with pytest.raises(ConfigError, match="more than any inventory"):
            load_inventory(path)

    def test_more_nodes_than_a_monitor_holds_are_refused_before_parsing(self, tmp_path: Path) -> None:
        """One node entry too many is refused by counting, not after parsing a million entries (38 s, 1.4 GB)."""
        entry = "[[site.ultraserver.node]]\nindex = 0\n"
        path = write(tmp_path, "[[site]]\nname='a'\n" + entry * (MAX_NODES + 1))
        with pytest.raises(ConfigError, match=f"{MAX_NODES + 1:,} node entries or more"):
            load_inventory(path)

    def test_a_file_that_is_not_utf8_is_refused(self, tmp_path: Path) -> None:
        """Bytes that are not UTF-8 are named, with where."""
        path = tmp_path / "inventory.toml"
        path.write_bytes(b"name = '\xff'\n")
        with pytest.raises(ConfigError, match="not UTF-8"):
            load_inventory(path)

    def test_a_missing_file_stops_the_settings(self, tmp_path: Path) -> None:
        """--topology naming a file that is not there is a bad setting (exit 2 from the CLI)."""
        with pytest.raises(ConfigError, match="topology"):
            load_settings({"topology": str(tmp_path / "nope.toml")})

    def test_presets_and_sizes_still_load(self) -> None:
        """load_topology takes a preset, a size or a file."""
        assert load_topology("demo").n_chips == 128
        assert load_topology("sites=2,ultraservers=1").n_nodes == 8
        assert load_topology(str(INVENTORY)).n_present_chips == 144


class TestMonitoring:
    def test_absent_nodes_count_nowhere(self) -> None:
        """Peak counts the 144 chips that exist; an absent node's frame is unknown_node; nothing absent is unknown."""
        topo = load_inventory(INVENTORY)
        core = MonitorCore(topo)
        model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=1_000.0)
        for tick in range(3):
            frames = list(tick_frames(topo, model.step(tick), publisher="sim"))
            analysis = core.step([f for _t, f in frames])
        assert analysis.throughput.fleet_peak == pytest.approx(144 * 1.299e15)
        assert analysis.throughput.chips_fresh == 144
        # The simulator's agent sends no execution counters, so the present chips' errors are unknown; nothing
        # of the absent nodes is counted.  A present node of an UltraServer with fewer than 4 present nodes has
        # fewer than 3 peers, so its paths are not judged against them (docs/detection.md, "No node can convict
        # another"): those nodes, and only those, are unknown for it.
        present = topo.node_present.reshape(topo.n_ultraservers, -1)
        few = int(present[present.sum(axis=1) < 4].sum())
        assert few > 0
        assert {k: n for k, n in analysis.health.unknown.items() if n} == {
            ("chip", "errors"): 144, ("node", "efa_paths"): few, ("node", "neuronlink_paths"): few}
        assert {t for t, _f in frames if parse_topic(t) and parse_topic(t).kind == "node"} == {  # type: ignore[union-attr]
            f"rainier/v1/telemetry/s{s}/b{u % 256}/u{u}/n{n}" for n in np.flatnonzero(topo.node_present).tolist()
            for s, u, _ in [topo.node_path(n)]
        }
        absent = model.step(3)
        frame = next(f for _t, f in tick_frames(topo, absent, publisher="sim"))
        ghost = type(frame)(frame.publisher, 99, 99, frame.t_s, 5, frame.chips, frame.links, frame.efa,  # type: ignore[call-arg]
                            frame.cooling)
        result = core.ingest.apply([Received(3.0, None, ghost)])
        assert dict(result.rejected) == {"unknown_node": 1}

    def test_metrics_carry_the_inventorys_names(self) -> None:
        """A per-node series carries its canonical id, node="n<id>" (as its topic does) and the hostname, instance
        id and zone."""
        topo = load_inventory(INVENTORY)
        families = EntityFamilies(topo, lambda: None)
        (block,) = families._labels("chip", np.array([6 * 16 + 3]))
        assert block == ('chip="99",id="s0/u1/n6/chip3",site="s0",ultraserver="u1",node="n6",hostname="ip-10-0-18-10",'
                         'instance_id="i-0a1b2c3d4e5f60722",availability_zone="us-east-2a"')
