"""One source of truth for what to do (issue 37 item 2): every cause's runbook section and docs/actions.md say
what the policy's rule table (rainierd/actions/rules.py) says, the table covers every state a node's cause can
be in, and docs/actions.md's worked example is what the policy computes.  ``scripts/policy-docs`` rewrites the
documents when the table changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rainierd.actions import ACTIONS
from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import NODE_KINDS, ActionPolicy, entity_actions
from rainierd.actions.rules import RULES, SECTIONS, policy_table, runbook_do, slug
from rainierd.core.detect import STATE_NAMES, Reason
from rainierd.core.jobphase import CHECKPOINT, RUNNING
from rainierd.fleet.pace import SHARES, step_excess
from rainierd.fleet.units import flop_text, flops_text
from tests import policy_docs
from tests.unit.actions.test_cost import JOBS, PRETRAIN, chip, phases_of
from tests.unit.actions.test_policy import HOLD, T0, TOPO, health, link_of, loss_charging, run

DOCS = Path(__file__).parents[3] / "docs"
RUNBOOKS = (DOCS / "runbooks.md").read_text()
ACTIONS_MD = (DOCS / "actions.md").read_text()


class TestRunbooksAgree:
    """Each cause's runbook "Do" holds the policy's own words for it, written from the table."""

    @pytest.mark.parametrize("section", SECTIONS)
    def test_every_causes_section_says_what_the_policy_does(self, section: str) -> None:
        """The runbook section of each cause the rules name holds one written block, equal to the rules' text."""
        found = policy_docs.sections(RUNBOOKS)
        assert section in found, f"docs/runbooks.md has no section '## {section}'"
        assert policy_docs.blocks(found[section]) == [runbook_do(section)], "run scripts/policy-docs"

    def test_no_other_section_holds_a_written_block(self) -> None:
        """No section the rules do not name carries a written block (a stale one left after a rule moved)."""
        written = {title for title, text in policy_docs.sections(RUNBOOKS).items() if policy_docs.blocks(text)}
        assert written == set(SECTIONS)

    def test_the_actions_page_holds_the_table(self) -> None:
        """docs/actions.md's policy table is the rules' table."""
        assert policy_docs.blocks(ACTIONS_MD) == [policy_table()], "run scripts/policy-docs"

    def test_each_rule_links_a_section_that_exists(self) -> None:
        """Every runbook link of the table names an anchor of docs/runbooks.md."""
        anchors = {slug(title) for title in policy_docs.sections(RUNBOOKS)}
        assert {slug(r.section) for r in RULES} <= anchors

    def test_the_writer_is_idempotent(self) -> None:
        """Writing the committed documents again changes nothing."""
        assert policy_docs.runbooks(RUNBOOKS) == RUNBOOKS
        assert policy_docs.actions(ACTIONS_MD) == ACTIONS_MD


class TestTableCoversEveryCause:
    """Every unhealthy state of a node-level entity has a rule, so no cause goes without advice."""

    @pytest.mark.parametrize("kind", NODE_KINDS)
    def test_every_unhealthy_state_has_a_rule(self, kind: str) -> None:
        """Each state but healthy is matched by some rule of its kind (with any reasons)."""
        covered = {s for r in RULES if r.entity == kind and not r.reasons_any for s in r.states}
        assert covered == set(STATE_NAMES[kind]) - {"healthy"}

    def test_the_policy_acts_by_the_table(self) -> None:
        """The five causes the runbooks and the policy disagreed on (issue 37) now call for the same actions in
        both: a degraded link is reset, a down link and an EFA port (after its reset) cordoned or drained by
        cost, a straggler watched or drained by cost."""
        config = ActionConfig()

        def acts(kind: str, state: str, held_s: float) -> tuple[str, str]:
            cheap, dear = entity_actions(kind, np.array([STATE_NAMES[kind].index(state)]),
                                         np.array([int(Reason.LANES)]), np.array([held_s]), config)
            return ACTIONS[int(cheap[0])], ACTIONS[int(dear[0])]

        assert acts("neuronlink", "degraded", 0.0) == ("reset_link", "reset_link")
        assert acts("neuronlink", "down", 0.0) == ("cordon", "drain")
        assert acts("efa", "down", 0.0) == ("reset_port", "reset_port")
        assert acts("efa", "degraded", config.reset_escalate_s) == ("cordon", "drain")
        assert acts("chip", "straggler", 0.0) == ("watch", "drain")


def share(s_min: float = 1.0, f_nl: float = 1.0, f_efa: float = 1.0) -> float:
    """Return the share of its job a cause costs, by the step formula."""
    excess = sum(float(x) for x in step_excess(np.array(s_min), np.array(f_nl), np.array(f_efa), shares=SHARES))
    return 1 - 1 / (1 + excess)


class TestWorkedExample:
    """docs/actions.md's worked example is what the policy computes, figure for figure."""

    JOB_FLOPS = 52e15
    ROWS = (("a straggler 5 % slower", {"s_min": 0.95}, ("chip", chip(1)), "watch"),
            ("a chip throttled to 70 % clock", {"s_min": 0.7}, ("chip", chip(1, "throttled", Reason.THROTTLE_FLAG)),
             "drain"),
            ("a NeuronLink down", {"f_nl": 0.5}, ("neuronlink", (link_of(1), "down", int(Reason.DOWN))), "drain"))

    def example(self) -> str:
        return ACTIONS_MD.split("**A worked example**", 1)[1].split("\n## ", 1)[0]

    @pytest.mark.parametrize(("row", "fractions", "cause", "action"), ROWS)
    def test_each_row(self, row: str, fractions: dict[str, float], cause: tuple[str, tuple[int, str, int]],
                      action: str) -> None:
        """The row's share, FLOP/s, hour's cost and advisory are the policy's for that cause."""
        cost_share = share(**fractions)
        kind, entity = cause
        loss = loss_charging(2, [(kind, entity[0], PRETRAIN, cost_share * self.JOB_FLOPS)],
                             job_flops=self.JOB_FLOPS)
        view = run(ActionPolicy(TOPO), health({kind: [entity]}), HOLD + 30, jobs=JOBS, loss=loss)
        advisory = view.for_node("s0/u0/n1")
        assert advisory is not None
        assert advisory.cost is not None
        [line] = [r for r in self.example().splitlines() if r.startswith(f"| {row}")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"{cost_share * 100:.1f} % ({flops_text(advisory.cost.loss_flops)})"
        assert cells[2] == flop_text(advisory.cost.horizon_flop)
        assert flop_text(advisory.cost.restart_flop) == "15.6 EF"
        assert cells[4].startswith(f"`{action}`")
        assert advisory.action == action

    def test_the_port_row(self) -> None:
        """One EFA port of 16 at 75 %: its share, then a reset and, not restored, a cordon."""
        cost_share = share(f_efa=0.75)
        port = 2 * TOPO.efa_ports_per_node + 6
        loss = loss_charging(2, [("efa", port, PRETRAIN, cost_share * self.JOB_FLOPS)], job_flops=self.JOB_FLOPS)
        policy = ActionPolicy(TOPO)
        first = run(policy, health({"efa": [(port, "degraded", int(Reason.BANDWIDTH))]}), HOLD + 30, jobs=JOBS,
                    loss=loss)
        later = run(policy, health({"efa": [(port, "degraded", int(Reason.BANDWIDTH))]}), 1_200,
                    start=T0 + HOLD + 60, jobs=JOBS, loss=loss)
        [line] = [r for r in self.example().splitlines() if r.startswith("| one EFA port of 16 at 75 %")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        advisory = later.for_node("s0/u0/n2")
        assert advisory is not None
        assert advisory.cost is not None
        assert cells[1] == f"{cost_share * 100:.1f} % ({flops_text(advisory.cost.loss_flops)})"
        assert cells[2] == flop_text(advisory.cost.horizon_flop)
        assert [a.action for a in (first.advisories[0], advisory)] == ["reset_port", "cordon"]

    @pytest.mark.parametrize(("since_last_s", "when", "figures"), [
        (480.0, "next_checkpoint", ("**9.11 EF**", "**25 EF**")),
        (60.0, "now", ("**14.4 EF**", "**3.12 EF**")),
    ])
    def test_the_checkpoint(self, since_last_s: float, when: str, figures: tuple[str, str]) -> None:
        """Checkpoints every 20 minutes; the throttled chip's drain ready 8 minutes after one waits for the
        next, ready 1 minute after one is proposed now; the figures are the policy's."""
        policy = ActionPolicy(TOPO)
        loss = loss_charging(2, [("chip", chip(1)[0], PRETRAIN, share(s_min=0.7) * self.JOB_FLOPS)],
                             job_flops=self.JOB_FLOPS)
        ready = 2 * 1_200.0 + since_last_s
        view = None
        for offset in np.arange(0.0, ready + 1, 10.0):
            into = float(offset % 1_200.0)
            phases = phases_of(CHECKPOINT, into) if into < 30 else phases_of(RUNNING, into - 30)
            sick = offset >= ready - HOLD
            view = policy.update(health({"chip": [chip(1)]} if sick else {}), t_s=T0 + float(offset), jobs=JOBS,
                                 loss=loss, phases=phases)
        assert view is not None
        advisory = view.for_node("s0/u0/n1")
        assert advisory is not None
        assert advisory.cost is not None
        assert advisory.cost.when == when
        assert (f"**{flop_text(advisory.cost.until_checkpoint_flop)}**",
                f"**{flop_text(advisory.cost.redo_flop)}**") == figures
        assert all(f in self.example() for f in figures)
