"""What to do about each cause, in one table: the policy (``actions/policy.py``) acts by it, and the runbooks'
"Do" and docs/actions.md's policy table are written from it (``scripts/policy-docs`` rewrites them;
tests/unit/actions/test_rules.py fails when a document and the table disagree), so the page an on-call
engineer reads and the advisory that paged them cannot say two things.

A **rule** matches unhealthy entities of one kind by state (and optionally by reason) and says, for a cause
that has stood the hold, its ``first`` action and, once it still stands ``after`` (a field of
``ActionConfig``: a reset that did not restore, a silence grown long) from its onset, its ``then`` action.
Either may be **priced**: the cost decides between a ``cheap`` and a ``dear`` action (docs/actions.md, "Cost
and timing": dear when what the cause costs its job over ``horizon_s`` exceeds what a restart costs it; an
unknown cost is not a dear one).  The first rule that matches an entity is its rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rainierd.actions.config import ActionConfig
from rainierd.core.detect import STATE_NAMES, Reason, reason_names


@dataclass(frozen=True, slots=True)
class Priced:
    """An action the cost chooses: ``dear`` when the cause is worth more than a restart over the horizon."""

    cheap: str
    dear: str


Step = str | Priced


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """What one cause calls for (module docstring)."""

    entity: str  # one of policy.NODE_KINDS
    states: tuple[str, ...]
    cause: str  # how the documents name it
    section: str  # its runbook section's title (docs/runbooks.md)
    first: Step
    after: str | None = None  # an ActionConfig field, seconds from the cause's onset
    then: Step | None = None
    reasons_any: int = 0  # matches only with one of these reasons (0: any)
    why: str = ""

    def __post_init__(self) -> None:
        if (self.after is None) != (self.then is None):
            raise ValueError(f"rule {self.cause!r}: after and then go together")
        unknown = [s for s in self.states if s not in STATE_NAMES[self.entity]]
        if unknown:
            raise ValueError(f"rule {self.cause!r}: no {self.entity} state {unknown}")


_REPAIR = Priced("cordon", "drain")  # fence it (its job runs on, the next lands elsewhere), or move the job now
_ECC = int(Reason.ECC_UNCORRECTED | Reason.SRAM_ECC_UNCORRECTED)

RULES: Final = (
    Rule(entity="chip", states=("straggler",), cause="A straggler", section="Chip throttled or straggling",
         first=Priced("watch", "drain"),
         why="a slow chip sets its whole job's pace: worth a restart only when it costs more than one"),
    Rule(entity="chip", states=("throttled",), cause="A throttled chip", section="Chip throttled or straggling",
         first=Priced("watch", "drain"),
         why="as a straggler; its cooling, if that is the cause, is the node's own advisory"),
    Rule(entity="chip", states=("failed",), reasons_any=_ECC, cause="A chip failed by an uncorrectable ECC error",
         section="Chip failed", first="replace",
         why="an uncorrectable memory error is hardware, not a reboot"),
    Rule(entity="chip", states=("failed",), cause="A chip failed by its executions, or its device gone",
         section="Chip failed", first="drain",
         why="a failed chip stalls its job (a stalled job never reaches a checkpoint): move it now; a driver "
             "reload or reboot may bring the chip back"),
    Rule(entity="chip", states=("stale",), cause="A silent chip", section="Telemetry stale or frames lost",
         first="watch", after="silent_long_s", then="cordon",
         why="unheard a while may be a telemetry gap; unheard half an hour it is likely dead"),
    Rule(entity="neuronlink", states=("degraded",), cause="A degraded NeuronLink", section="NeuronLink degraded",
         first="reset_link", after="reset_escalate_s", then=_REPAIR,
         why="a retrain clears most lane and CRC faults and moves no job; one it did not clear is hardware"),
    Rule(entity="neuronlink", states=("down",), cause="A NeuronLink down or flapping",
         section="NeuronLink down or flapping", first=_REPAIR,
         why="collectives reroute at half bandwidth; a hard-down or flapping link is for replacement"),
    Rule(entity="efa", states=("degraded",), cause="A degraded EFA port", section="EFA path degraded",
         first="reset_port", after="reset_escalate_s", then=_REPAIR,
         why="a device reset moves no job (the node's other ports carry its share meanwhile); one it did not "
             "restore is the cable, optic or NIC"),
    Rule(entity="efa", states=("down", "stale"), cause="An EFA port down, or its device gone",
         section="EFA port down", first="reset_port", after="reset_escalate_s", then=_REPAIR,
         why="as a degraded port"),
    Rule(entity="node", states=("cooling_degraded",), cause="A node's cooling degraded", section="Cooling degraded",
         first="cordon", why="keep new work off while facilities look at the air; the chips throttle before they "
                             "fail, and a throttled chip is priced on its own"),
    Rule(entity="node", states=("path_degraded",), reasons_any=int(Reason.OWN_DROP),
         cause="A node whose paths are all slow, its own traffic fallen too", section="Node paths degraded",
         first=_REPAIR, why="no other path on the node can carry its traffic; its own evidence corroborates it"),
    Rule(entity="node", states=("path_degraded",), cause="A node whose paths are slow only by its peers' figures",
         section="Node paths degraded", first="watch",
         why="a peer that inflates its traffic could have made it look so ([Evidence of its own]"
             "(#evidence-of-its-own))"),
    Rule(entity="node", states=("lost",), cause="A silent node", section="Telemetry stale or frames lost",
         first="watch", after="silent_long_s", then="cordon",
         why="a silent node may be a network blip; silent half an hour, keep work off it"),
)

SECTIONS: Final = tuple(dict.fromkeys(r.section for r in RULES))


def slug(section: str) -> str:
    """Return a section title's anchor as GitHub spells it (``NeuronLink degraded`` -> ``neuronlink-degraded``)."""
    kept = "".join(c for c in section.lower() if c.isalnum() or c in " -")
    return kept.replace(" ", "-")


def _duration(seconds: float) -> str:
    if seconds >= 3_600 and seconds % 3_600 == 0:
        return f"{seconds / 3_600:.0f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _after(field: str, config: ActionConfig) -> str:
    """Return how a rule's bound is named: its setting and its value."""
    seconds = _duration(getattr(config, field))
    return f"`actions_{field}`, {seconds}" if field != "silent_long_s" else f"{seconds}, fixed"


def step_text(step: Step, config: ActionConfig, *, short: bool = False) -> str:
    """Return one step of a rule as the documents say it (``short``: as a table cell, the rule said above)."""
    if isinstance(step, str):
        return f"`{step}`"
    if short:
        return f"`{step.dear}` when dear, else `{step.cheap}`"
    share = config.restart_s / config.horizon_s
    return (f"`{step.dear}` when it costs its job more over `actions_horizon_s` ({_duration(config.horizon_s)}) "
            f"than a restart does (`actions_restart_s`, {_duration(config.restart_s)} of the job), that is over "
            f"{share * 100:.1f} % of the job, at its next checkpoint when it checkpoints regularly and waiting costs "
            f"less than the work a restart now redoes ([Cost and timing](actions.md#cost-and-timing)); otherwise "
            f"`{step.cheap}`")


def rule_text(rule: Rule, config: ActionConfig) -> str:
    """Return what a rule calls for, as one sentence."""
    text = f"{rule.cause}: {step_text(rule.first, config)}"
    if rule.after is not None and rule.then is not None:
        text += f"; still standing after its onset ({_after(rule.after, config)}), {step_text(rule.then, config)}"
    return text + "."


def runbook_do(section: str, config: ActionConfig | None = None) -> str:
    """Return the advisory part of a runbook section's "Do" (Markdown), from the rules of that section."""
    config = config or ActionConfig()
    rules = [r for r in RULES if r.section == section]
    if not rules:
        raise KeyError(section)
    lines = [f"The advisory ([actions.md](actions.md#the-policy-which-action-for-which-cause)), once the cause has "
             f"stood `actions_hold_s` ({_duration(config.hold_s)}):", ""]
    lines += [f"- {rule_text(r, config)}" for r in rules]
    return "\n".join(lines)


def policy_table(config: ActionConfig | None = None) -> str:
    """Return docs/actions.md's policy table (Markdown), one row a rule, in the order the rules are tried; a
    priced step reads "dear" and "cheap" ([Cost and timing](#cost-and-timing) says when)."""
    config = config or ActionConfig()
    rows = ["| entity | state | action ([priced](#cost-and-timing): dear or cheap) | why | runbook |",
            "|---|---|---|---|---|"]
    for r in RULES:
        state = ", ".join(f"`{s}`" for s in r.states)
        if r.reasons_any:
            state += " with " + " or ".join(f"`{n}`" for n in reason_names(r.reasons_any))
        action = step_text(r.first, config, short=True)
        if r.after is not None and r.then is not None:
            action += f"; still standing after {_after(r.after, config)}: " + step_text(r.then, config, short=True)
        link = f"[{r.section}](runbooks.md#{slug(r.section)})"
        rows.append(f"| {r.entity} | {state} | {action} | {r.why} | {link} |")
    return "\n".join(rows)
