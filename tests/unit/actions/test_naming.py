"""How an advisory names what it is about (rainierd/actions/policy.py, docs/ids.md): its node by the node's
canonical id with the inventory's hostname beside it, its UltraServer and causes by their ids, and what its
causes cost a job in FLOP/s as ``top`` prints them."""

from __future__ import annotations

from pathlib import Path

from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import ActionPolicy
from rainierd.core.detect import Reason
from rainierd.fleet.inventory import load_inventory
from tests.unit.actions.test_policy import HOLD, health, loss_charging, membership, run

INVENTORY = load_inventory(Path(__file__).parents[2] / "data" / "inventory-two-sites.toml")
NODE = 6  # ip-10-0-18-10, in UltraServer 1 of site 0
LINK = NODE * INVENTORY.links_per_node + 5  # its chip 5's x link


def test_an_advisory_names_its_node_ultraserver_and_causes_by_their_ids() -> None:
    """A down link of node 6: the advisory is s0/u1/n6's (hostname ip-10-0-18-10 beside it), its cause
    s0/u1/n6/chip5/link0, and its reason says so and what the link costs its job, in SI FLOP/s."""
    policy = ActionPolicy(INVENTORY, ActionConfig(hold_s=HOLD))
    view = run(policy, health({"neuronlink": [(LINK, "down", int(Reason.DOWN))]}), HOLD + 30,
               jobs=membership(INVENTORY, {"lab/pretrain": [1]}),
               loss=loss_charging(1, [("neuronlink", LINK, 0, 2.5e15)]))
    [advisory] = view.advisories
    document = advisory.document()
    assert {k: document[k] for k in ("node", "hostname", "index", "site", "ultraserver")} == {
        "node": "s0/u1/n6", "hostname": "ip-10-0-18-10", "index": NODE, "site": "s0", "ultraserver": "s0/u1"}
    assert [(c["entity"], c["id"], c["index"]) for c in document["causes"]] == [
        ("neuronlink", "s0/u1/n6/chip5/link0", LINK)]
    assert document["reason"].startswith("drain: s0/u1/n6/chip5/link0 down since ")
    assert document["reason"].endswith("; proposed; costs lab/pretrain 25.0% (2.5 PF/s): 9 EF over 1 h >= 3 EF for "
                                       "a restart")
    assert view.for_node("s0/u1/n6") is advisory
