"""Specification of building an inventory from neuron-ls: AWS's documented
listings (both -j forms) and UltraServer ids read as documented, nodes grouped
by their UltraServer slot, whatever cannot be known warned about, and
conflicting input refused with one line."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rainierd.errors import ConfigError
from rainierd.fleet.inventory import load_inventory
from rainierd.fleet.neuronls import (
    NodeListing,
    Slot,
    build_inventory,
    parse_devices,
    parse_node_argument,
    parse_ultraservers,
    read_node_listing,
)

DATA = Path(__file__).parents[2] / "data" / "neuron-ls"
NEW, OLD = DATA / "trn2-2.25.json", DATA / "trn2-2.22.json"
# deploy/eks/ultraserver.rst lines 359-363: the four nodes of UltraServer bog79p1y8tetj5uu, node ids 0 to 3.
EKS = {"ip-172-32-11-17.ap-southeast-4.compute.internal": 0, "ip-172-32-13-57.ap-southeast-4.compute.internal": 1,
       "ip-172-32-5-227.ap-southeast-4.compute.internal": 2, "ip-172-32-9-4.ap-southeast-4.compute.internal": 3}
SIXTEEN = tuple(range(16))


def listing(hostname: str, *, instance_id: str | None = None, devices: tuple[int, ...] = SIXTEEN) -> NodeListing:
    return NodeListing(hostname=hostname, instance_id=instance_id, devices=devices, format="json-output",
                       source=f"{hostname}.json")


def ultraserver_slots() -> dict[str, Slot | None]:
    return parse_ultraservers((DATA / "ultraservers-4.txt").read_text(), source="ultraservers-4.txt")


def made(nodes: list[NodeListing], slots: dict[str, Slot | None] | None = None, **kwargs: Any) -> dict[str, Any]:
    return tomllib.loads(build_inventory(nodes, slots, **kwargs).toml)


class TestListings:
    """parse_devices: neuron-ls's JSON, as documented."""

    @pytest.mark.parametrize("path", [NEW, OLD], ids=["2.25", "2.22"])
    def test_the_documented_trn2_listing_names_sixteen_devices(self, path: Path) -> None:
        """Both documented -j forms of a trn2 node list devices 0 to 15, in order."""
        assert parse_devices(path.read_text(), source=path.name) == (SIXTEEN, "json-output")

    def test_a_2_34_object_is_read_for_its_one_device_list(self) -> None:
        """A JSON object (2.34's announced shape; no example is published: this one is ours) is read for its one
        member that lists devices, whatever its other members."""
        devices = json.loads(NEW.read_text())
        document = {"instance": {"id": "i-aabbccdd123456789"}, "tags": ["a"], "devices": devices}
        assert parse_devices(json.dumps(document), source="x") == (SIXTEEN, "output-format")

    @pytest.mark.parametrize(("text", "says"), [
        ("{not json", "not JSON"),
        ('"neuron-ls"', "neither"),
        ('{"instance": {}}', "0 lists of devices"),
        ('{"a": [{"neuron_device": 0}], "b": [{"neuron_device": 1}]}', "2 lists of devices"),
        ('[{"bdf": "cc:00.0"}]', "without a neuron_device"),
        ('[{"neuron_device": true}]', "without a neuron_device"),
        ('[{"neuron_device": -1}]', "without a neuron_device"),
        ('[17]', "without a neuron_device"),
    ])
    def test_anything_else_is_refused_saying_what_it_is(self, text: str, says: str) -> None:
        """Not JSON, a scalar, an object without exactly one device list, or a device without its id: refused."""
        with pytest.raises(ConfigError, match=says):
            parse_devices(text, source="x.json")

    def test_a_file_too_large_to_be_a_listing_is_refused_before_parsing(self, tmp_path: Path) -> None:
        """Over 4 MiB is no node's listing."""
        path = tmp_path / "big.json"
        path.write_text("[" + " " * 4 * 2**20 + "]")
        with pytest.raises(ConfigError, match="more than 4,194,304 bytes"):
            read_node_listing(str(path))


class TestNodeArgument:
    """parse_node_argument: who a listing is from."""

    @pytest.mark.parametrize(("argument", "expected"), [
        ("nodes/ip-10-0-17-8.json", ("ip-10-0-17-8", None, Path("nodes/ip-10-0-17-8.json"))),
        ("nodes/ip-10-0-17-8@i-0a1b2c3d4e5f60718.json",
         ("ip-10-0-17-8", "i-0a1b2c3d4e5f60718", Path("nodes/ip-10-0-17-8@i-0a1b2c3d4e5f60718.json"))),
        ("ip-10-0-17-8@i-1a2b3c4d=out/stdout", ("ip-10-0-17-8", "i-1a2b3c4d", Path("out/stdout"))),
        ("ip-10-0-17-8.ec2.internal=a=b.json", ("ip-10-0-17-8.ec2.internal", None, Path("a=b.json"))),
    ])
    def test_the_file_name_or_the_argument_names_the_node(self, argument: str, expected: tuple[Any, ...]) -> None:
        """HOST.json, HOST@INSTANCE_ID.json, or HOST[@INSTANCE_ID]=FILE for any file name."""
        assert parse_node_argument(argument) == expected

    @pytest.mark.parametrize(("argument", "says"), [
        ("out/stdout", "cannot tell whose listing"),
        ("ip-10-0-17-8@0a1b2c3d=f", "not an EC2 instance id"),
        ("ip-10-0-17-8@i-0A1B=f", "not an EC2 instance id"),
        ("my host=f", "hostname 'my host'"),
    ])
    def test_a_node_it_cannot_name_is_refused(self, argument: str, says: str) -> None:
        """No .json name and no HOST=, an instance id of the wrong form, a hostname rainierd cannot label."""
        with pytest.raises(ConfigError, match=says):
            parse_node_argument(argument)


class TestUltraServers:
    """parse_ultraservers: the lines AWS's init script prints."""

    def test_the_documented_ultraserver_reads_as_four_slots(self) -> None:
        """The four EKS nodes of bog79p1y8tetj5uu are its nodes 0 to 3."""
        assert ultraserver_slots() == {host: Slot("bog79p1y8tetj5uu", node) for host, node in EKS.items()}

    def test_the_sorted_form_comments_and_blank_lines(self) -> None:
        """A leading topology id (the script's sorted file), blank lines and # comments are taken or skipped."""
        text = "# collected 2026-12-07\n\n0:bog79p1y8tetj5uu:0:a\n1:bog79p1y8tetj5uu:1:b\n"
        assert parse_ultraservers(text, source="x") == {"a": Slot("bog79p1y8tetj5uu", 0),
                                                         "b": Slot("bog79p1y8tetj5uu", 1)}

    def test_the_defaults_mean_no_ultraserver(self) -> None:
        """The init script's defaults (server 0000000000000000, node -1) say the node is in no UltraServer."""
        text = "0000000000000000:-1:a\n0000000000000000:0:b\nbog79p1y8tetj5uu:-1:c\n"
        assert parse_ultraservers(text, source="x") == {"a": None, "b": None, "c": None}

    def test_a_host_repeated_with_the_same_slot_is_one(self) -> None:
        """The same line twice (two collections concatenated) is not a conflict."""
        assert parse_ultraservers("s1:2:a\ns1:2:a\n", source="x") == {"a": Slot("s1", 2)}

    @pytest.mark.parametrize(("text", "says"), [
        ("s1:2\n", "x:1: 's1:2' is not <server id>:<node id>:<host>"),
        ("s1:two:a\n", "x:1: node id 'two' is not an integer"),
        ("s1:4:a\n", "x:1: node id 4 of UltraServer s1: an UltraServer's nodes are 0 to 3"),
        ("s1:0:a\ns2:0:a\n", "x:2: host a is given two UltraServer slots"),
        ("s 1:0:a\n", "server id 's 1'"),
    ])
    def test_a_bad_line_is_refused_naming_it(self, text: str, says: str) -> None:
        """A short line, a non-integer or out-of-range node id, a host in two slots, an unusable server id."""
        with pytest.raises(ConfigError, match=says):
            parse_ultraservers(text, source="x")


class TestBuild:
    """build_inventory: the inventory, its UltraServers, its warnings and its refusals."""

    def test_the_documented_ultraserver_becomes_one_ultraserver_of_four_nodes(self) -> None:
        """The whole inventory of the documented UltraServer, nodes at their node ids, instance ids kept."""
        nodes = [listing(host, instance_id=f"i-0011223344556677{node}") for host, node in EKS.items()]
        conversion = build_inventory(nodes, ultraserver_slots(), name="apse4", site="apse4-dc1",
                                     availability_zone="ap-southeast-4a")
        assert conversion.warnings == ()
        assert tomllib.loads(conversion.toml) == {"name": "apse4", "site": [{
            "name": "apse4-dc1", "availability_zone": "ap-southeast-4a",
            "ultraserver": [{"name": "bog79p1y8tetj5uu", "node": [
                {"index": node, "hostname": host, "instance_id": f"i-0011223344556677{node}"}
                for host, node in sorted(EKS.items(), key=lambda item: item[1])]}]}]}

    def test_the_order_of_the_inputs_changes_nothing(self) -> None:
        """Ids derive from the file's order, so the same nodes in any order make the same file."""
        nodes = [listing(host) for host in EKS] + [listing("ip-10-0-0-9"), listing("ip-10-0-0-1")]
        assert build_inventory(nodes, ultraserver_slots()).toml == build_inventory(
            nodes[::-1], ultraserver_slots()).toml

    def test_it_loads_as_the_topology_the_monitor_and_bridges_share(self, tmp_path: Path) -> None:
        """The file loads through the real loader: the UltraServer's nodes are ids 0 to 3, a node of no
        UltraServer is node 0 of the next UltraServer (id 4), the other ids absent."""
        nodes = [listing(host) for host in EKS] + [listing("ip-10-0-0-1")]
        path = tmp_path / "fleet.toml"
        path.write_text(build_inventory(nodes, ultraserver_slots()).toml)
        topology = load_inventory(path)
        assert (topology.n_ultraservers, np.flatnonzero(topology.node_present).tolist()) == (2, [0, 1, 2, 3, 4])
        assert topology.names.hostnames[:5] == (*sorted(EKS, key=EKS.__getitem__), "ip-10-0-0-1")

    def test_without_ultraserver_ids_each_node_is_its_own_with_a_warning(self) -> None:
        """The older listings carry no UltraServer: each node is index 0 of an UltraServer named after it, and
        the warning says so."""
        conversion = build_inventory([listing("ip-b"), listing("ip-a")])
        assert [(u["name"], [n["index"] for n in u["node"]]) for u in tomllib.loads(conversion.toml)["site"][0][
            "ultraserver"]] == [("ip-a", [0]), ("ip-b", [0])]
        assert conversion.warnings == (
            "2 node(s) have no UltraServer identity (no --ultraservers given): each is its own UltraServer, its "
            "NeuronLink ring links unjudged: ip-a, ip-b",)

    def test_short_hostnames_match_the_scripts_fully_qualified_names(self) -> None:
        """A listing named by `hostname` finds the line the script wrote with `hostname --fqdn`, and the reverse."""
        slots = ultraserver_slots() | {"ip-10-0-0-1": Slot("u2", 0)}
        nodes = [listing(host.partition(".")[0]) for host in EKS] + [listing("ip-10-0-0-1.ec2.internal")]
        inventory = made(nodes, slots)
        assert [[n["hostname"] for n in u["node"]] for u in inventory["site"][0]["ultraserver"]] == [
            [h.partition(".")[0] for h in sorted(EKS, key=EKS.__getitem__)], ["ip-10-0-0-1.ec2.internal"]]

    def test_everything_an_sre_should_know_is_a_warning(self) -> None:
        """A partly listed UltraServer, a node of no UltraServer there, one not listed, lines naming no node, and
        2.34 listings: each one line."""
        slots = ultraserver_slots() | {"ip-x": None}
        hosts = list(EKS)
        nodes = [listing(hosts[0]), listing(hosts[1]), listing("ip-x"), listing("ip-y"),
                 NodeListing(hostname="ip-z", instance_id=None, devices=SIXTEEN, format="output-format",
                             source="ip-z.json")]
        assert build_inventory(nodes, slots).warnings == (
            "3 node(s) have no UltraServer identity (2 not in --ultraservers, 1 in none there): each is its own "
            "UltraServer, its NeuronLink ring links unjudged: ip-x, ip-y, ip-z",
            "UltraServer bog79p1y8tetj5uu: 2 of its 4 nodes listed (node ids 0, 1)",
            f"2 --ultraservers line(s) name no node listed: {hosts[2]}, {hosts[3]}",
            "1 listing(s) in neuron-ls 2.34's --output-format json, whose fields are not documented yet: only their "
            "device lists were read")

    @pytest.mark.parametrize(("nodes", "slots", "says"), [
        ([listing("a"), listing("b")], {"a": Slot("s1", 1), "b": Slot("s1", 1)},
         "b.json: nodes a and b both claim node 1 of UltraServer s1"),
        ([listing("a", devices=SIXTEEN[:-1])], None,
         "a.json: node a lists 15 Neuron devices .*, a trn2 node has 16 .0 to 15.: a device is missing"),
        ([listing("a", devices=(*SIXTEEN, 16))], None, "node a lists 17 Neuron devices"),
        ([listing("a", devices=(0, *SIXTEEN[:-1]))], None, "node a lists Neuron device 0 twice"),
        ([listing("a"), listing("a")], None, "a.json: hostname a is also a.json's"),
        ([listing("a", instance_id="i-1a2b3c4d"), listing("b", instance_id="i-1a2b3c4d")], None,
         "b.json: instance id i-1a2b3c4d is also a.json's"),
        ([listing("ip-1")], {"ip-1.x.internal": Slot("s1", 0), "ip-1.y.internal": Slot("s2", 0)},
         "host ip-1 matches 2 UltraServer lines"),
        ([listing("a"), listing("s1")], {"a": Slot("s1", 0), "s1": None}, "UltraServer name 's1' appears twice"),
        ([], None, "no node listings given"),
    ])
    def test_conflicting_input_is_refused_with_one_line(
        self, nodes: list[NodeListing], slots: dict[str, Slot | None] | None, says: str,
    ) -> None:
        """Two nodes in one slot, a node with the wrong device count or a device twice, a hostname or instance id
        twice, an ambiguous short name, an UltraServer named like a lone node, nothing at all."""
        with pytest.raises(ConfigError, match=says) as raised:
            build_inventory(nodes, slots)
        assert "\n" not in str(raised.value)

    def test_a_bad_site_or_zone_name_is_refused(self) -> None:
        """The command line's names obey the inventory's rules."""
        with pytest.raises(ConfigError, match="command line: availability zone 'us east'"):
            build_inventory([listing("a")], availability_zone="us east")


class TestTheDocsExample:
    """docs/real-nodes.md's example is what the command makes."""

    def test_the_example_inventory_and_warnings_are_the_commands_output(self) -> None:
        """Three nodes of the documented UltraServer (2.25 and 2.22 listings) and one of no UltraServer, as the
        page shows them: the page's TOML block and warning lines, exactly."""
        hosts = ["ip-172-32-11-17", "ip-172-32-13-57", "ip-172-32-5-227", "ip-172-32-40-9"]
        nodes = [NodeListing(hostname=f"{host}.ap-southeast-4.compute.internal",
                             instance_id=f"i-0011223344556677{'abcd'[i]}",
                             devices=parse_devices((NEW if i < 2 else OLD).read_text(), source="x")[0],
                             format="json-output", source=host) for i, host in enumerate(hosts)]
        lines = (DATA / "ultraservers-4.txt").read_text().splitlines()[:3]
        slots = parse_ultraservers("\n".join([*lines, f"0000000000000000:-1:{nodes[3].hostname}"]), source="x")
        made = build_inventory(nodes, slots, name="apse4-training", site="apse4-dc1",
                               availability_zone="ap-southeast-4a")
        page = (Path(__file__).parents[3] / "docs" / "real-nodes.md").read_text()
        (toml,) = re.findall(r"```toml\n(.*?)```", page, re.DOTALL)
        assert toml == made.toml
        assert [f"rainierd: warning: {w}" for w in made.warnings] == [
            line for line in page.splitlines() if line.startswith("rainierd: warning: ")]
