"""Advice that weighs cost and timing (docs/actions.md, "Cost and timing"; issue 37 item 3): a cause's action
depends on what it costs its job against what a restart costs, a link or port is reset before its node is
drained, a drain for a job that checkpoints regularly is timed to its next checkpoint, and resets spend their
own brake budget."""

from __future__ import annotations

import numpy as np

from rainierd.actions import ActionsView
from rainierd.actions.checkpoints import CheckpointClock, Checkpoints
from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import ActionPolicy
from rainierd.core.detect import Reason
from rainierd.core.jobphase import CHECKPOINT, RUNNING, JobPhases
from rainierd.settings import Settings
from tests.unit.actions.test_policy import HOLD, T0, TOPO, health, link_of, loss_charging, membership, run, states

JOB_FLOPS = 1e16  # what lab/pretrain delivers healthy: 10 PF/s
JOBS = membership(TOPO, {"lab/pretrain": [0], "lab/other": [1]})  # nodes 0-3 and 4-7
PRETRAIN, OTHER = JOBS.ids.index("lab/pretrain"), JOBS.ids.index("lab/other")  # jobs are numbered by id


def phases_of(pretrain: int, pretrain_s: float) -> JobPhases:
    """Return phases with lab/pretrain in ``pretrain`` for ``pretrain_s`` and lab/other running."""
    phase, age = np.full(2, RUNNING), np.zeros(2)
    phase[PRETRAIN], age[PRETRAIN] = pretrain, pretrain_s
    return JobPhases(phase, age, np.zeros(2))


def chip(node: int, state: str = "straggler", reasons: Reason = Reason.EFFICIENCY) -> tuple[int, str, int]:
    """Return an unhealthy chip of ``node``."""
    return (node * TOPO.chips_per_node + 3, state, int(reasons))


def port(node: int, state: str = "degraded") -> tuple[int, str, int]:
    """Return an unhealthy EFA port of ``node``."""
    return (node * TOPO.efa_ports_per_node + 6, state, int(Reason.BANDWIDTH))


class TestPrice:
    """A priced cause: its cheap action when it costs its job less over the horizon than a restart does."""

    def test_a_cheap_straggler_is_watched_and_an_expensive_one_drained(self) -> None:
        """A straggler costing lab/pretrain 3 % (0.3 PF/s: 1.08 EF over an hour against 3 EF for a 300 s
        restart) is watched; one costing lab/other 24 % (8.64 EF against 3 EF) is drained."""
        loss = loss_charging(2, [("chip", chip(1)[0], PRETRAIN, 0.03 * JOB_FLOPS),
                                ("chip", chip(5)[0], OTHER, 0.24 * JOB_FLOPS)],
                             job_flops=JOB_FLOPS)
        view = run(ActionPolicy(TOPO), health({"chip": [chip(1), chip(5)]}), HOLD + 30, jobs=JOBS, loss=loss)
        assert states(view) == {"n1": ("watch", "proposed", None), "n5": ("drain", "proposed", None)}
        cheap, dear = view.for_node("s0/u0/n1"), view.for_node("s0/u1/n5")
        assert cheap is not None
        assert cheap.cost is not None
        assert dear is not None
        assert dear.cost is not None
        assert (cheap.cost.share, cheap.cost.horizon_flop, cheap.cost.restart_flop) == (
            0.03, 0.03 * JOB_FLOPS * 3_600, JOB_FLOPS * 300)
        assert (round(dear.cost.share, 6), dear.cost.when) == (0.24, "now")
        assert "costs lab/other 24.0% (2.4 PF/s): 8.64 EF over 1 h >= 3 EF for a restart" in dear.reason
        assert "costs lab/pretrain 3.0% (300 TF/s): 1.08 EF over 1 h < 3 EF for a restart" in cheap.reason

    def test_the_break_even_is_the_settings(self) -> None:
        """The same 3 % straggler is drained when a restart is cheap enough (60 s) for an hour's loss to pay for
        it: the threshold is actions_restart_s over actions_horizon_s."""
        loss = loss_charging(2, [("chip", chip(1)[0], PRETRAIN, 0.03 * JOB_FLOPS)], job_flops=JOB_FLOPS)
        view = run(ActionPolicy(TOPO, ActionConfig(restart_s=60.0)), health({"chip": [chip(1)]}), HOLD + 30,
                   jobs=JOBS, loss=loss)
        assert states(view) == {"n1": ("drain", "proposed", None)}

    def test_an_unknown_cost_is_not_a_dear_one(self) -> None:
        """A straggler whose job the job model does not price, or a down link on a node in no job, takes the
        cheap action, and its advisory says the cost is unknown or that it is in no job."""
        view = run(ActionPolicy(TOPO), health({"chip": [chip(1)], "neuronlink": [(link_of(40), "down", 64)]}),
                   HOLD + 30, jobs=JOBS)
        assert states(view) == {"n1": ("watch", "proposed", None), "n40": ("cordon", "proposed", None)}
        unpriced, idle = view.for_node("s0/u0/n1"), view.for_node("s0/u10/n40")
        assert unpriced is not None
        assert idle is not None
        assert (unpriced.cost, idle.cost) == (None, None)
        assert unpriced.reason.endswith("protects lab/pretrain (its cost unknown: no job model)")
        assert idle.reason.endswith("in no job")


class TestResetBeforeDrain:
    """A link or port is reset first (it moves no job); only one its reset did not restore is priced."""

    def test_one_bad_efa_port_is_reset_before_a_drain(self) -> None:
        """A degraded EFA port costing its job 20 % is proposed a reset_port after the hold, in the resets'
        budget; still degraded reset_escalate_s after its onset, its node's drain is proposed through the brake,
        and both are counted."""
        loss = loss_charging(2, [("efa", port(2)[0], PRETRAIN, 0.2 * JOB_FLOPS)], job_flops=JOB_FLOPS)
        policy = ActionPolicy(TOPO, ActionConfig(reset_escalate_s=1_200.0))
        view = run(policy, health({"efa": [port(2)]}), HOLD + 30, jobs=JOBS, loss=loss)
        assert states(view) == {"n2": ("reset_port", "proposed", None)}
        assert (view.reset_brake.under_action, view.brake.under_action) == (1, 0)
        view = run(policy, health({"efa": [port(2)]}), 900, start=T0 + HOLD + 60, jobs=JOBS, loss=loss)
        assert states(view) == {"n2": ("drain", "proposed", None)}
        assert (view.reset_brake.under_action, view.brake.under_action) == (1, 1)
        assert (policy.totals.proposed["reset_port"], policy.totals.proposed["drain"]) == (1, 1)

    def test_a_cheap_port_its_reset_did_not_restore_is_cordoned(self) -> None:
        """One port of sixteen at 75 % costs its job 3 %: reset, then cordoned (its job runs on; the next lands
        elsewhere), never drained."""
        loss = loss_charging(2, [("efa", port(2)[0], PRETRAIN, 0.03 * JOB_FLOPS)], job_flops=JOB_FLOPS)
        view = run(ActionPolicy(TOPO), health({"efa": [port(2)]}), 1_500, jobs=JOBS, loss=loss)
        assert states(view) == {"n2": ("cordon", "proposed", None)}

    def test_a_port_restored_by_its_reset_expires(self) -> None:
        """A port that recovers after its reset was proposed: the advisory expires, nothing more is proposed."""
        loss = loss_charging(2, [("efa", port(2)[0], PRETRAIN, 0.2 * JOB_FLOPS)], job_flops=JOB_FLOPS)
        policy = ActionPolicy(TOPO)
        run(policy, health({"efa": [port(2)]}), HOLD + 30, jobs=JOBS, loss=loss)
        view = policy.update(health(), t_s=T0 + HOLD + 60, jobs=JOBS)
        assert states(view) == {"n2": ("reset_port", "expired", None)}
        assert policy.totals.proposed["drain"] == 0


def timed(policy: ActionPolicy, view_of: dict[str, list[tuple[int, str, int]]], *, until: float, every_s: float,
          loss_flops: float, step: float = 10.0, cause_from: float = 0.0, stalled: bool = False) -> ActionsView:
    """Run ``policy`` from T0 to T0 + ``until``: lab/pretrain checkpoints 30 s every ``every_s`` from T0, and the
    chip of ``view_of`` is unhealthy from ``cause_from``, costing it ``loss_flops``."""
    out = None
    for offset in np.arange(0.0, until + step / 2, step):
        into = float(offset % every_s)
        phase = CHECKPOINT if into < 30.0 else RUNNING
        phases = phases_of(phase, into if phase == CHECKPOINT else into - 30.0)
        unhealthy = offset >= cause_from
        charged = [("chip", view_of["chip"][0][0], PRETRAIN, loss_flops)] if unhealthy else []
        loss = loss_charging(2, charged, job_flops=JOB_FLOPS, stalled=stalled)
        out = policy.update(health(view_of if unhealthy else {}), t_s=T0 + float(offset), jobs=JOBS, loss=loss,
                            phases=phases)
    assert out is not None
    return out


class TestTiming:
    """A drain for a job that checkpoints regularly is proposed for its next checkpoint when waiting costs less
    than the work a restart now would redo."""

    def test_a_checkpointing_jobs_drain_is_timed_to_its_next_checkpoint(self) -> None:
        """lab/pretrain checkpoints every 600 s; a straggler costing it 24 % from 1,100 s is proposed at 1,400 s
        for the checkpoint at 1,800 s: 0.96 EF lost until then against 2 EF of work a restart now redoes."""
        policy = ActionPolicy(TOPO)
        view = timed(policy, {"chip": [chip(1)]}, until=1_400, every_s=600, loss_flops=0.24 * JOB_FLOPS,
                     cause_from=1_100)
        advisory = view.for_node("s0/u0/n1")
        assert advisory is not None
        assert advisory.cost is not None
        assert (advisory.action, advisory.state, advisory.proposed_s) == ("drain", "proposed", T0 + 1_400)
        cost = advisory.cost
        assert (cost.when, cost.next_checkpoint_s) == ("next_checkpoint", T0 + 1_800)
        assert (cost.until_checkpoint_flop, cost.redo_flop) == (0.24 * JOB_FLOPS * 400, JOB_FLOPS * 200)
        assert advisory.reason.startswith("drain at lab/pretrain's next checkpoint (")
        assert "960 PF lost until its next checkpoint < 2 EF a restart now redoes" in advisory.reason

    def test_just_after_a_checkpoint_it_is_cheaper_to_act_now(self) -> None:
        """The same straggler ready 40 s after a checkpoint: 1.35 EF lost waiting for the next against 0.1 EF to
        redo, so the drain is proposed now (the checkpoint's time still given)."""
        view = timed(ActionPolicy(TOPO), {"chip": [chip(1)]}, until=1_240, every_s=600,
                     loss_flops=0.24 * JOB_FLOPS, cause_from=940)
        advisory = view.for_node("s0/u0/n1")
        assert advisory is not None
        assert advisory.cost is not None
        assert (advisory.cost.when, advisory.cost.next_checkpoint_s) == ("now", T0 + 1_800)
        assert advisory.reason.startswith("drain: ")

    def test_a_stalled_job_is_drained_now(self) -> None:
        """A failed chip stalls its job, which will not reach its next checkpoint: drained now."""
        failed = (chip(1)[0], "failed", int(Reason.EXEC_ERRORS))
        view = timed(ActionPolicy(TOPO), {"chip": [failed]}, until=1_400, every_s=600, loss_flops=JOB_FLOPS,
                     cause_from=1_100, stalled=True)
        advisory = view.for_node("s0/u0/n1")
        assert advisory is not None
        assert advisory.cost is not None
        assert (advisory.action, advisory.cost.when, advisory.cost.next_checkpoint_s) == ("drain", "now", None)


class TestCheckpointClock:
    """A job's checkpoint cadence, learned from its phases."""

    def test_regular_after_two_intervals(self) -> None:
        """Onsets at 0, 600, 1,190 and 1,800 s: regular (its last two intervals, 590 and 610 s, within 25 % of
        their median), every 600 s; the next after 1,900 s is at 2,400 s."""
        clock = CheckpointClock()
        for onset in (0.0, 600.0, 1_190.0, 1_800.0):
            for t in (onset, onset + 10):
                clock.update(JOBS, phases_of(CHECKPOINT, t - onset), t_s=T0 + t)
            clock.update(JOBS, phases_of(RUNNING, 0.0), t_s=T0 + onset + 40)
        found = clock.of("lab/pretrain")
        assert found == Checkpoints(T0 + 1_800.0, 600.0)
        assert clock.of("lab/other") is None
        assert found.next_after(T0 + 1_900.0) == T0 + 2_400.0

    def test_irregular_has_no_next(self) -> None:
        """Intervals of 300 and 900 s are not regular: the last checkpoint is known, the next is not."""
        clock = CheckpointClock()
        for onset in (0.0, 300.0, 1_200.0):
            clock.update(JOBS, phases_of(CHECKPOINT, 0.0), t_s=T0 + onset)
            clock.update(JOBS, phases_of(RUNNING, 0.0), t_s=T0 + onset + 40)
        found = clock.of("lab/pretrain")
        assert found == Checkpoints(T0 + 1_200.0, None)
        assert found.next_after(T0 + 1_300.0) is None


class TestBrakeBudgets:
    """Resets count in their own budget of the brake; drains, cordons and replaces in the other."""

    def test_resets_are_counted_apart_from_drains(self) -> None:
        """With 2 drains and 3 resets allowed: 3 port resets and 2 cordons are all proposed, each brake counting
        its own; a fourth reset trips only the resets' brake, and the other still admits a new cordon."""
        config = ActionConfig(brake_max_nodes=2, brake_max_fraction=1.0, reset_brake_max_nodes=3,
                              reset_brake_max_fraction=1.0)
        policy = ActionPolicy(TOPO, config)
        ports = [port(n) for n in (0, 4, 8)]
        links = [(link_of(n), "down", int(Reason.DOWN)) for n in (12, 16)]
        view = run(policy, health({"efa": ports, "neuronlink": links}), HOLD + 30)
        assert sorted(states(view).values()) == [("cordon", "proposed", None)] * 2 + [
            ("reset_port", "proposed", None)] * 3
        assert (view.brake.under_action, view.reset_brake.under_action) == (2, 3)
        assert not view.brake.tripped
        assert not view.reset_brake.tripped
        more = health({"efa": [*ports, port(20)], "neuronlink": links})
        view = run(policy, more, HOLD + 30, start=T0 + HOLD + 60)
        assert states(view)["n20"] == ("reset_port", "suppressed", "brake")
        assert (view.reset_brake.tripped, view.reset_brake.scope, view.brake.tripped) == (True, "fleet", False)
        assert policy.totals.brake_trips == 1


class TestSettings:
    """The cost, reset and brake settings reach the policy's configuration, in its one place."""

    def test_each_setting_reaches_the_action_config(self) -> None:
        """actions_restart_s, actions_horizon_s, actions_reset_escalate_s and actions_reset_brake_max_nodes are
        the ActionConfig's restart_s, horizon_s, reset_escalate_s and reset_brake_max_nodes."""
        config = Settings(actions_restart_s=600.0, actions_horizon_s=7_200.0, actions_reset_escalate_s=900.0,
                          actions_reset_brake_max_nodes=5).action_config()
        assert (config.restart_s, config.horizon_s, config.reset_escalate_s, config.reset_brake_max_nodes) == (
            600.0, 7_200.0, 900.0, 5)
