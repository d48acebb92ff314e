"""Specification of what ``top`` says of one entity (rainierd/top/entity.py) and the one name it prints for it
(rainierd/top/names.py): figures against nominal and peers, the cost to each job, the node's advisory, the
runbook section, and canonical ids from either shape of the read API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rainierd.top.entity import RUNBOOK_ANCHORS, card, costs, entity_in, node_key, runbook, timing
from rainierd.top.names import Namer, index_of, number, same_entity, within

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks.md"


def link(index: int, *, state: str = "healthy", bw: float = 245e9, lanes: int = 8, kind: str = "torus",
         node: str = "n4", **more: Any) -> dict[str, Any]:
    return {"id": index, "kind": kind, "chip_a": 64, "chip_b": 80, "node": node, "state": state,
            "reasons": ["lanes"] if state != "healthy" else [], "onset_tick": 35 if state != "healthy" else None,
            "bw_bytes_s": bw, "lanes_up": lanes, "latency_us": 1.5, "crc_errors_total": 0, "replay_total": 0,
            **more}


def ultraserver(links: list[dict[str, Any]]) -> dict[str, Any]:
    """An UltraServer document of the release before canonical ids: u1 of site s0, nodes n4..n7 (16 chips, 48
    links, 16 ports a node)."""
    nodes = [{"id": f"n{n}", "hostname": None, "job": "lab/pretrain", "state": "healthy"} for n in range(4, 8)]
    chips = [{"id": c, "node": f"n{c // 16}", "state": "healthy"} for c in range(64, 128)]
    ports = [{"id": p, "chip": p, "node": f"n{p // 16}", "state": "healthy"} for p in range(64, 128)]
    everything = {e["id"]: e for e in (link(i, node=f"n{i // 48}") for i in range(192, 384))}
    everything.update({e["id"]: e for e in links})
    return {"ultraserver": {"id": "u1", "site": "s0", "state": "healthy"}, "nodes": nodes, "chips": chips,
            "links": list(everything.values()), "ports": ports}


class TestNames:
    def test_integer_ids_become_canonical_paths(self) -> None:
        """Link 224 (node 4's link 32: chip 0's ring link), chip 69, port 70 and node n4 of u1 in site s0."""
        document = ultraserver([])
        namer = Namer.of(document)
        assert (namer.prefix, namer.chips_per_node, namer.links_per_node, namer.ports_per_node) == ("s0/u1", 16, 48,
                                                                                                    16)
        assert namer.of_entity("neuronlink", {"id": 224}) == "s0/u1/n4/chip0/link2"
        assert namer.of_entity("chip", {"id": 69}) == "s0/u1/n4/chip5"
        assert namer.of_entity("efa", {"id": 70}) == "s0/u1/n4/efa6"
        assert namer.of_entity("node", {"id": "n4"}) == "s0/u1/n4"

    def test_canonical_ids_are_kept_as_the_api_gives_them(self) -> None:
        """The contract: ``id`` is the canonical string and ``index`` the integer; top prints the former."""
        document = {"ultraserver": {"id": "s0/u1", "index": 1, "site": "s0"}, "nodes": [], "chips": [], "links": [],
                    "ports": []}
        namer = Namer.of(document)
        entity = {"id": "s0/u1/n4/chip0/link2", "index": 224}
        assert (namer.prefix, namer.of_entity("neuronlink", entity), index_of(entity)) == (
            "s0/u1", "s0/u1/n4/chip0/link2", 224)

    def test_numbers_and_relative_names(self) -> None:
        """``n4``, ``s0/u1/n4``, ``chip5`` end in their number; an id within its parent drops the parent."""
        assert [number(x) for x in ("n4", "s0/u1/n4", "u12", 7, "chip5", "x")] == [4, 4, 12, 7, 5, None]
        assert within("s0/u1/n4/chip5/link0", "s0/u1/n4") == "chip5/link0"
        assert within("s0/u1/n5/chip5", "s0/u1/n4") == "s0/u1/n5/chip5"

    @pytest.mark.parametrize(("row", "same"), [
        ({"entity": "neuronlink", "id": "224"}, True),
        ({"entity": "neuronlink", "id": "s0/u1/n4/chip0/link2", "index": 224}, True),
        ({"entity": "neuronlink", "id": "s0/u1/n4/chip0/link1", "index": 208}, False),
        ({"entity": "chip", "id": "224"}, False),
    ])
    def test_a_culprit_names_the_entity_in_either_shape(self, row: dict[str, Any], same: bool) -> None:
        """A culprit or event names the entity by kind and integer, or by canonical id."""
        assert same_entity(row, "neuronlink", 224, "s0/u1/n4/chip0/link2") is same


class TestCard:
    def degraded(self) -> tuple[dict[str, Any], dict[str, Any]]:
        bad = link(224, state="degraded", bw=60.7e9, lanes=4, kind="ring", node="n4")
        return bad, ultraserver([bad, link(225, kind="ring", bw=123e9, node="n4")])

    def test_figures_against_nominal_and_peers(self) -> None:
        """Bandwidth in GB/s against the ring's nominal 128 GB/s and its ring peers' median, lanes 4 / 8, latency in
        µs: no raw field name, no unformatted number."""
        bad, document = self.degraded()
        text = card("neuronlink", bad, document).plain
        assert "NeuronLink s0/u1/n4/chip0/link2  DEGRADED (lanes) since tick 35" in text
        assert re.search(r"bandwidth +60\.7 GB/s / 128 GB/s \(47\.4%\) +peers 123 GB/s", text)
        assert re.search(r"lanes up +4 / 8", text)
        assert "1.5 µs" in text
        assert "bw_bytes_s" not in text
        assert "e+" not in text

    def test_cost_to_each_job_advisory_and_runbook(self) -> None:
        """The job document's culprit prices the link; the node's advisory and the runbook section follow."""
        bad, document = self.degraded()
        job = {"job": {"id": "lab/pretrain", "peak_flops": 83e15, "goodput_ratio": 0.87},
               "culprits": [{"entity": "neuronlink", "id": "224", "flops": 7.17e15, "ultraserver": "u1"}]}
        actions = {"dry_run": True, "actions": [{"node": "n4", "node_id": 4, "action": "reset_link",
                                                 "state": "proposed", "reason": "reset_link: n4/chip0/link2"}]}
        text = card("neuronlink", bad, document, jobs=[job], actions=actions).plain
        assert "costs lab/pretrain 7.17 PF/s (8.6% of its peak; goodput 87.0%)" in text
        assert "advice reset_link n4 (proposed, dry run): reset_link: n4/chip0/link2" in text
        assert "runbook docs/runbooks.md#neuronlink-degraded" in text

    def test_says_why_there_is_no_advisory(self) -> None:
        """A monitor without the advisory policy answers 503: the card says so rather than nothing."""
        bad, document = self.degraded()
        text = card("neuronlink", bad, document, actions_error="503 no advisories yet").plain
        assert "advice none to show: 503 no advisories yet" in text

    def test_a_job_not_fetched_is_priced_from_the_fleets_culprits(self) -> None:
        """The fleet's costliest list names the job an entity slows when its job document is not at hand."""
        bad, _ = self.degraded()
        priced = costs("neuronlink", bad, "s0/u1/n4/chip0/link2", [],
                       fleet_culprits=[{"entity": "neuronlink", "id": "224", "flops": 5e15, "job": "lab/pretrain"}])
        assert [(c.job, c.flops) for c in priced] == [("lab/pretrain", 5e15)]

    def test_entity_found_by_any_of_its_names_and_its_node_key(self) -> None:
        """The screen finds the link by canonical id, API id or index; the advisories are asked by ``n4``."""
        bad, document = self.degraded()
        assert entity_in(document, "neuronlink", "s0/u1/n4/chip0/link2") is bad
        assert entity_in(document, "neuronlink", "224") is bad
        assert node_key(document, "neuronlink", bad) == "n4"


class TestRunbooks:
    def test_every_anchor_is_a_section_of_the_runbooks(self) -> None:
        """Each state's runbook anchor is a heading of docs/runbooks.md, as GitHub anchors it."""
        headings = {re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
                    for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")}
        assert set(RUNBOOK_ANCHORS.values()) <= headings

    def test_healthy_has_no_runbook(self) -> None:
        """Nothing to do for a healthy entity; a degraded EFA port has its section."""
        assert runbook("efa", "healthy") is None
        assert runbook("efa", "degraded") == "docs/runbooks.md#efa-path-degraded"


class TestTiming:
    def test_an_advisory_timed_to_the_next_checkpoint_says_when_and_what_waiting_costs(self) -> None:
        """A drain at the job's next checkpoint: when, what waiting costs, what a restart now would redo."""
        advisory = {"cost": {"when": "next_checkpoint", "next_checkpoint_s": 1240.0, "until_checkpoint_flop": 1.2e18,
                             "redo_flop": 3.4e18}}
        assert timing(advisory, 1000.0) == ("at the job's next checkpoint in 4 min; waiting costs 1.2 EF; "
                                            "a restart now redoes 3.4 EF")
        assert timing({"cost": {"when": "now", "horizon_flop": 2e20}}) == "now"

    def test_no_cost_no_timing(self) -> None:
        """A monitor whose advisories carry no cost: nothing invented."""
        assert timing({"action": "drain"}) is None


class TestCostFromEvents:
    def test_the_detection_event_prices_a_job_nothing_else_names(self) -> None:
        """Neither a job document nor the fleet's costliest list names it: its latest event's figure is shown,
        marked as the figure when detected."""
        bad = link(224, state="degraded", kind="ring", node="n4")
        events = [{"entity": "neuronlink", "id": 224, "after": "degraded",
                   "jobs": [{"job": "lab/pretrain", "flops": 6.99e15}]}]
        document = ultraserver([bad])
        assert [(c.job, c.flops, c.detected) for c in costs("neuronlink", bad, "s0/u1/n4/chip0/link2", [],
                                                             events=events)] == [("lab/pretrain", 6.99e15, True)]
        assert "costs lab/pretrain 6.99 PF/s when detected" in card("neuronlink", bad, document, events=events).plain
