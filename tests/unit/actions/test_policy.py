"""The advisory policy (rainierd/actions/policy.py, docs/actions.md): which action each cause calls for, the
hold, what holds an advisory back, the blast-radius brake, expiry, and the repeat-offender ledger."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rainierd.actions import ACTIONS, ActionsView
from rainierd.actions.brake import Brake
from rainierd.actions.config import ActionConfig
from rainierd.actions.ledger import Ledger, LedgerError
from rainierd.actions.policy import ActionPolicy, MonitorCondition, entity_actions
from rainierd.core.analysis import HealthView
from rainierd.core.detect import STATE_NAMES, FeedView, Reason
from rainierd.core.jobmodel import CULPRIT_KINDS, JobLoss
from rainierd.core.jobphase import CHECKPOINT, RUNNING, JobPhases
from rainierd.core.jobs import JobMembership, NameIndex, resolve_jobs
from rainierd.fleet import CAUSES
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.wire.jobs import JobDocument

# 2 sites x 20 UltraServers x 4 nodes: 160 nodes, 80 a site.
TOPO = build_fleet(2, 20)
HOLD = 300.0
T0 = 1_800_000_000.0

Entity = tuple[int, str, int]  # id, state name, reason mask


def health(kinds: dict[str, list[Entity]] | None = None, *, feed_lost: bool = False) -> HealthView:
    """Return a health view whose unhealthy entities are ``kinds`` (kind -> [(id, state, reasons)])."""
    ids, states, reasons, onsets = {}, {}, {}, {}
    for kind in STATE_NAMES:
        rows = sorted((kinds or {}).get(kind, []))
        ids[kind] = np.array([r[0] for r in rows], np.int64)
        states[kind] = np.array([STATE_NAMES[kind].index(r[1]) for r in rows], np.int64)
        reasons[kind] = np.array([r[2] for r in rows], np.int64)
        onsets[kind] = np.zeros(len(rows), np.int64)
    feed = FeedView(lost=True, silent_nodes=100, base_nodes=160, since_s=0.0) if feed_lost else FeedView()
    return HealthView(ids, states, reasons, onsets, {}, {}, feed)


def link_of(node: int, local: int = 5) -> int:
    """Return a NeuronLink id reported by ``node``."""
    return node * TOPO.links_per_node + local


def down_link(node: int) -> dict[str, list[Entity]]:
    """Return a hard-failed NeuronLink on ``node``."""
    return {"neuronlink": [(link_of(node), "down", int(Reason.DOWN))]}


def membership(topo: Topology, jobs: dict[str, list[int]]) -> JobMembership:
    """Return the membership of jobs holding whole UltraServers."""
    docs = [JobDocument(v=1, id=job, name=job, owner="lab", scheduler="slurm", source="test",
                        ultraservers=[f"u{u}" for u in us], start_s=0.0) for job, us in jobs.items()]
    return resolve_jobs(NameIndex.of(topo), docs)


def loss_charging(n_jobs: int, charged: list[tuple[str, int, int, float]], *, job_flops: float = 1e16,
                  stalled: bool = False) -> JobLoss:
    """Return a job loss that charges each (kind, id) its job and FLOP/s, and nothing else; each job delivers
    ``job_flops`` healthy (its effective plus what it loses)."""
    zeros = np.zeros(n_jobs)
    lost = {cause: zeros.copy() for cause in CAUSES}
    for _, _, job, flops in charged:
        lost["straggler"][job] += flops
    key = np.array([i * len(CULPRIT_KINDS) + CULPRIT_KINDS.index(k) for k, i, _, _ in charged], np.int64)
    order = np.argsort(key)
    return JobLoss(
        chips=np.zeros(n_jobs, np.int64), peak=zeros + job_flops, effective=job_flops - lost["straggler"], lost=lost,
        stalled=np.full(n_jobs, stalled),
        failed=zeros.astype(bool), s_min=zeros + 1, slowest_is_straggler=zeros.astype(bool), f_nl=zeros + 1,
        f_efa=zeros + 1, healthy_value=zeros, culprit_kind=np.full((n_jobs, 5), -1),
        culprit_id=np.zeros((n_jobs, 5), np.int64),
        culprit_flops=np.zeros((n_jobs, 5)), charged_key=key[order],
        charged_job=np.array([j for _, _, j, _ in charged], np.int64)[order],
        charged_flops=np.array([f for _, _, _, f in charged], np.float64)[order], unallocated_peak=0.0,
    )


def run(policy: ActionPolicy, view: HealthView, seconds: float, *, start: float = T0, step: float = 30.0,
        **kwargs: object) -> ActionsView:
    """Feed ``view`` to ``policy`` every ``step`` seconds from ``start`` for ``seconds``; return the last view."""
    out = None
    for t in np.arange(start, start + seconds + step / 2, step):
        out = policy.update(view, t_s=float(t), **kwargs)  # type: ignore[arg-type]
    assert out is not None
    return out


def states(view: ActionsView) -> dict[str, tuple[str, str, str | None]]:
    """Return each advisory's (action, state, suppressed_by), by node (``n<index>``; its id: test_naming.py)."""
    return {f"n{a.index}": (a.action, a.state, a.suppressed_by) for a in view.advisories}


class TestEntityActions:
    """The action each unhealthy entity calls for, cheap and dear (actions/rules.py): the least disruptive that
    restores it, priced where the cost decides."""

    config = ActionConfig()

    def actions(self, kind: str, rows: list[tuple[str, int, float]]) -> list[tuple[str, str]]:
        st = np.array([STATE_NAMES[kind].index(s) for s, _, _ in rows], np.int64)
        rs = np.array([r for _, r, _ in rows], np.int64)
        held = np.array([h for _, _, h in rows], np.float64)
        cheap, dear = entity_actions(kind, st, rs, held, self.config)
        return [(ACTIONS[c], ACTIONS[d]) for c, d in zip(cheap.tolist(), dear.tolist(), strict=True)]

    def test_neuronlink(self) -> None:
        """A degraded link is reset; one its reset did not restore (degraded reset_escalate_s after its onset) and
        a down one are cordoned when cheap, drained when dear."""
        rows = [("degraded", 2, 10.0), ("down", 64, 10.0), ("degraded", 2, 1_200.0)]
        assert self.actions("neuronlink", rows) == [("reset_link", "reset_link"), ("cordon", "drain"),
                                                    ("cordon", "drain")]

    def test_chip(self) -> None:
        """A straggler or throttled chip is watched when cheap and drained when dear; a failed one drained, one
        with uncorrectable ECC replaced, whatever the cost; one silent past silent_long_s cordoned."""
        ecc = int(Reason.ECC_UNCORRECTED)
        rows = [("straggler", 0, 1e4), ("throttled", 256, 1e4), ("failed", 128, 0.0), ("failed", ecc, 0.0),
                ("stale", 4096, 10.0), ("stale", 4096, 1_800.0)]
        assert self.actions("chip", rows) == [("watch", "drain"), ("watch", "drain"), ("drain", "drain"),
                                              ("replace", "replace"), ("watch", "watch"), ("cordon", "cordon")]

    def test_chip_from_what_a_real_node_reports(self) -> None:
        """A straggler by utilisation or latency is priced as any; a chip failed by its executions' errors or
        timeouts, or whose device was reported gone, is drained (the cause may be software); one with an
        uncorrectable SRAM ECC error is replaced, as HBM's."""
        rows = [("straggler", int(Reason.UTILISATION), 1e4), ("straggler", int(Reason.LATENCY), 1e4),
                ("failed", int(Reason.EXEC_ERRORS), 0.0), ("failed", int(Reason.EXEC_TIMEOUTS), 0.0),
                ("failed", int(Reason.ABSENT), 0.0), ("failed", int(Reason.SRAM_ECC_UNCORRECTED), 0.0),
                ("failed", int(Reason.EXEC_ERRORS | Reason.SRAM_ECC_UNCORRECTED), 0.0)]
        assert [d for _, d in self.actions("chip", rows)] == ["drain"] * 5 + ["replace"] * 2
        assert [c for c, _ in self.actions("chip", rows)][:2] == ["watch", "watch"]

    def test_efa_and_node(self) -> None:
        """A degraded, down or stale (its device gone) EFA port is reset first, then priced; a node's cooling
        cordons it; a node whose paths are all slow together is priced once its own traffic fell too, and
        watched while only its peers say so; a lost node is watched until long."""
        rows = [("degraded", 2, 0.0), ("down", 64, 0.0), ("stale", int(Reason.ABSENT), 0.0),
                ("degraded", int(Reason.RX_DROPS), 0.0), ("down", int(Reason.KEEP_ALIVE), 1_200.0)]
        assert self.actions("efa", rows) == [("reset_port", "reset_port")] * 4 + [("cordon", "drain")]
        slow, dropped = int(Reason.EFA_NODE_SLOW), int(Reason.EFA_NODE_SLOW | Reason.OWN_DROP)
        assert self.actions("node", [("cooling_degraded", 8192, 0.0), ("path_degraded", dropped, 0.0),
                                     ("path_degraded", slow, 1e4), ("lost", 4096, 60.0), ("lost", 4096, 1_800.0)]
                            ) == [("cordon", "cordon"), ("cordon", "drain"), ("watch", "watch"), ("watch", "watch"),
                                  ("cordon", "cordon")]


class TestEvidenceOfItsOwn:
    """A node judged slow by its peers alone is watched until its own evidence corroborates it (issue 35)."""

    @staticmethod
    def slow_node(node: int, reasons: Reason = Reason.EFA_NODE_SLOW) -> dict[str, list[Entity]]:
        return {"node": [(node, "path_degraded", int(reasons))]}

    def test_peer_relative_only_is_proposed_as_a_watch_and_never_braked(self) -> None:
        """A node slow against its peers only is proposed a watch after the hold, and the brake and the
        proposal totals never see it."""
        policy = ActionPolicy(TOPO, ActionConfig(hold_s=HOLD))
        view = run(policy, health(self.slow_node(3)), HOLD + 60)
        assert states(view) == {"n3": ("watch", "proposed", None)}
        assert (policy.totals.proposed["drain"], policy.totals.brake_trips) == (0, 0)

    def test_its_own_level_falling_corroborates_it_into_an_action(self) -> None:
        """The watched node's own traffic then falls too (own_drop): its cause has stood the hold already, so its
        action (a cordon: in no job, it costs no job anything) is proposed through the brake at once, and
        counted."""
        policy = ActionPolicy(TOPO, ActionConfig(hold_s=HOLD))
        run(policy, health(self.slow_node(3)), HOLD + 60)
        corroborated = health(self.slow_node(3, Reason.EFA_NODE_SLOW | Reason.OWN_DROP))
        view = policy.update(corroborated, t_s=T0 + HOLD + 90)
        assert states(view) == {"n3": ("cordon", "proposed", None)}
        assert policy.totals.proposed["cordon"] == 1

    def test_a_port_of_its_own_failing_calls_for_its_own_reset(self) -> None:
        """A node slow against its peers only, one of whose own EFA ports is down: that port is reset."""
        policy = ActionPolicy(TOPO, ActionConfig(hold_s=HOLD))
        port = 3 * TOPO.efa_ports_per_node + 1
        view = run(policy, health({**self.slow_node(3), "efa": [(port, "down", int(Reason.DOWN))]}), HOLD + 60)
        assert states(view) == {"n3": ("reset_port", "proposed", None)}


class TestHold:
    """A cause is proposed only once it has stood the hold time."""

    def test_hard_link_fault_proposes_once_after_the_hold(self) -> None:
        """A down link on one node is pending until the hold passes, then one drain proposed naming its job."""
        jobs = membership(TOPO, {"lab/pretrain": [0], "lab/other": [1]})
        loss = loss_charging(2, [("neuronlink", link_of(1), 1, 2.5e15)])
        policy = ActionPolicy(TOPO, ActionConfig(hold_s=HOLD))
        view = health(down_link(1))
        early = run(policy, view, HOLD - 30, jobs=jobs, loss=loss)
        assert states(early) == {"n1": ("drain", "pending", None)}
        late = run(policy, view, 60, start=T0 + HOLD, jobs=jobs, loss=loss)
        advisory = late.for_node("s0/u0/n1")
        assert advisory is not None
        assert (advisory.state, advisory.action, advisory.proposed_s) == ("proposed", "drain", T0 + HOLD)
        assert [(p.job, p.flops) for p in advisory.protects] == [("lab/pretrain", 2.5e15)]
        assert advisory.causes[0].id == "s0/u0/n1/chip5/link0"
        assert policy.totals.proposed["drain"] == 1
        assert late.document()["total"] == 1

    def test_flap_shorter_than_the_hold_never_proposes(self) -> None:
        """A link that is down 4 minutes, clears, and is down again 4 minutes is never proposed."""
        policy = ActionPolicy(TOPO, ActionConfig(hold_s=HOLD))
        for cycle in range(6):
            start = T0 + cycle * 600
            down = run(policy, health(down_link(3)), 240, start=start)
            clear = run(policy, health(), 300, start=start + 270)
            assert all(a.state == "pending" for a in down.advisories)
            assert clear.advisories == ()
        assert policy.totals.proposed["drain"] == 0

    def test_job_in_checkpoint_is_held_back(self) -> None:
        """An unhealthy node whose job is in a checkpoint is suppressed by the job's phase, never proposed."""
        jobs = membership(TOPO, {"lab/pretrain": [0]})
        phases = JobPhases(np.array([CHECKPOINT]), np.array([40.0]), np.array([40.0]))
        view = run(ActionPolicy(TOPO), health(down_link(2)), 2 * HOLD, jobs=jobs, phases=phases)
        assert states(view) == {"n2": ("cordon", "suppressed", "job_phase:checkpoint")}
        running = JobPhases(np.array([RUNNING]), np.array([40.0]), np.array([0.0]))
        view = run(ActionPolicy(TOPO), health(down_link(2)), 2 * HOLD, jobs=jobs, phases=running)
        assert states(view) == {"n2": ("cordon", "proposed", None)}


    def test_a_watched_node_needing_action_is_held_afresh(self) -> None:
        """A node proposed for a watch (a throttled chip) whose link then goes down is pending for the hold, not
        proposed at once: watching a node is not acting on it."""
        policy = ActionPolicy(TOPO)
        chip = (7 * TOPO.chips_per_node + 1, "throttled", int(Reason.THROTTLE_FLAG))
        watched = run(policy, health({"chip": [chip]}), 2 * HOLD)
        assert states(watched) == {"n7": ("watch", "proposed", None)}
        both = health({"chip": [chip], **down_link(7)})
        assert states(policy.update(both, t_s=T0 + 3 * HOLD)) == {"n7": ("cordon", "pending", None)}
        assert states(run(policy, both, HOLD, start=T0 + 3 * HOLD)) == {"n7": ("cordon", "proposed", None)}
        assert policy.totals.proposed["cordon"] == 1


    def test_the_hold_runs_from_the_cause_calling_for_the_action(self) -> None:
        """A node pending on a throttled chip for 200 s whose link then goes down waits the link's own hold."""
        policy = ActionPolicy(TOPO, ActionConfig(hold_s=HOLD))
        chip = (8 * TOPO.chips_per_node, "throttled", int(Reason.THROTTLE_FLAG))
        run(policy, health({"chip": [chip]}), 200)
        both = health({"chip": [chip], **down_link(8)})
        assert states(run(policy, both, HOLD - 30, start=T0 + 210)) == {"n8": ("cordon", "pending", None)}
        view = run(policy, both, 30, start=T0 + 210 + HOLD)
        assert states(view) == {"n8": ("cordon", "proposed", None)}
        advisory = view.for_node("s0/u2/n8")
        assert advisory is not None
        assert advisory.since_s == T0  # the earliest cause's onset


class TestCorrelated:
    """Causes too widespread to be a node's own never propose node actions."""

    def test_site_wide_cooling(self) -> None:
        """Node cooling on nodes of three UltraServers of one site suppresses every advisory of that site only."""
        cooling = [(n, "cooling_degraded", int(Reason.INLET)) for n in (0, 4, 8)]
        view = run(ActionPolicy(TOPO), health({"node": cooling, **down_link(90)}), 2 * HOLD)
        assert states(view) == {
            "n0": ("cordon", "suppressed", "correlated:site:s0"), "n4": ("cordon", "suppressed", "correlated:site:s0"),
            "n8": ("cordon", "suppressed", "correlated:site:s0"), "n90": ("cordon", "proposed", None),
        }

    def test_ultraserver_cooling(self) -> None:
        """A node of an UltraServer whose cooling is degraded is suppressed by that UltraServer."""
        view = run(ActionPolicy(TOPO), health({"ultraserver": [(2, "cooling_degraded", int(Reason.TEMPERATURE))],
                                               **down_link(9)}), 2 * HOLD)
        assert states(view) == {"n9": ("cordon", "suppressed", "correlated:ultraserver:s0/u2")}

    def test_many_nodes_of_one_ultraserver(self) -> None:
        """Three of an UltraServer's four nodes unhealthy at once are its fault, not theirs."""
        links = [(link_of(n), "down", int(Reason.DOWN)) for n in (12, 13, 14)]
        view = run(ActionPolicy(TOPO), health({"neuronlink": links}), 2 * HOLD)
        assert set(states(view).values()) == {("cordon", "suppressed", "correlated:ultraserver:s0/u3")}

    def test_watched_nodes_do_not_crowd_an_ultraserver(self) -> None:
        """Throttled chips on three nodes of an UltraServer do not hold back its fourth node's down link."""
        chips = [(n * TOPO.chips_per_node, "throttled", int(Reason.THROTTLE_FLAG)) for n in (12, 13, 14)]
        view = run(ActionPolicy(TOPO), health({"chip": chips, **down_link(15)}), 2 * HOLD)
        assert states(view)["n15"] == ("cordon", "proposed", None)

    @pytest.mark.parametrize(("condition", "feed_lost", "by"), [
        (MonitorCondition(connected=False), False, "broker_down"),
        (MonitorCondition(overloaded=True), False, "monitor_behind"),
        (MonitorCondition(), True, "feed_lost"),
    ])
    def test_monitor_condition(self, condition: MonitorCondition, feed_lost: bool, by: str) -> None:
        """The broker down, the monitor behind or its feed lost suppress every new advisory."""
        view = run(ActionPolicy(TOPO), health(down_link(5), feed_lost=feed_lost), 2 * HOLD, condition=condition)
        assert states(view) == {"n5": ("cordon", "suppressed", by)}

    def test_a_proposal_stays_through_an_outage(self) -> None:
        """An advisory already proposed stays proposed when the broker goes down."""
        policy = ActionPolicy(TOPO)
        run(policy, health(down_link(5)), 2 * HOLD)
        view = run(policy, health(down_link(5)), 60, start=T0 + 3 * HOLD,
                   condition=MonitorCondition(connected=False))
        assert states(view) == {"n5": ("cordon", "proposed", None)}


class TestBrake:
    """At most N nodes and P % of a site's and the fleet's nodes are proposed within the window."""

    def links(self) -> list[Entity]:
        """Return 30 down links on 30 nodes, two per UltraServer over 15 UltraServers of both sites."""
        nodes = [u * 4 + k for u in range(0, 30, 2) for k in (0, 1)]
        return [(link_of(n), "down", int(Reason.DOWN)) for n in nodes]

    def thirty(self) -> HealthView:
        """Return a view of 30 failing nodes."""
        return health({"neuronlink": self.links()})

    def test_trips_at_the_node_bound_once(self) -> None:
        """30 failing nodes: 10 proposed, 20 suppressed by the brake, one trip however many ticks follow."""
        policy = ActionPolicy(TOPO, ActionConfig(brake_max_nodes=10, brake_max_fraction=0.5))
        view = run(policy, self.thirty(), 4 * HOLD)
        counts = {s: sum(1 for a in view.advisories if a.state == s) for s in ("proposed", "suppressed")}
        assert counts == {"proposed": 10, "suppressed": 20}
        assert {a.suppressed_by for a in view.advisories if a.state == "suppressed"} == {"brake"}
        assert (view.brake.tripped, view.brake.under_action, view.brake.scope) == (True, 10, "fleet")
        assert policy.totals.brake_trips == 1

    def test_trips_at_a_sites_fraction(self) -> None:
        """With 5 % of a site's 80 nodes allowed (4), the first site trips the brake at 4 proposals."""
        policy = ActionPolicy(TOPO, ActionConfig(brake_max_nodes=100, brake_max_fraction=0.05))
        view = run(policy, self.thirty(), 2 * HOLD)
        assert sum(1 for a in view.advisories if a.state == "proposed") == 4
        assert view.brake.scope is not None
        assert view.brake.scope.startswith("site:")

    def test_existing_proposals_stay_and_nothing_new_while_tripped(self) -> None:
        """Proposals before the trip stay; a new cause elsewhere while tripped is suppressed; the brake releases
        once the advisories waiting on it clear."""
        policy = ActionPolicy(TOPO, ActionConfig(brake_max_nodes=10, brake_max_fraction=0.5, brake_window_s=600))
        first = run(policy, self.thirty(), 2 * HOLD)
        proposed = {a.node for a in first.advisories if a.state == "proposed"}
        both = health({"neuronlink": [*self.links(), (link_of(150), "down", int(Reason.DOWN))]})
        later = run(policy, both, 2 * HOLD, start=T0 + 3 * HOLD)
        assert {a.node for a in later.advisories if a.state == "proposed"} == proposed
        assert states(later)["n150"] == ("cordon", "suppressed", "brake")
        released = run(policy, health(down_link(150)), 2 * HOLD, start=T0 + 6 * HOLD)
        assert states(released)["n150"] == ("cordon", "proposed", None)
        assert not released.brake.tripped


    def test_a_small_site_may_still_act_on_one_node(self) -> None:
        """5 % of a site of 8 nodes is under one node: the brake still admits one, then trips on the second."""
        brake = Brake(build_fleet(1, 2), max_nodes=10, max_fraction=0.05, window_s=3_600.0)
        assert brake.admit([3, 5], t_s=T0) == [3]
        assert (brake.status().tripped, brake.status().scope, brake.trips) == (True, "fleet", 1)


class TestExpiry:
    """An advisory expires when its causes clear, and stays visible a while."""

    def test_proposal_expires_and_is_kept_then_dropped(self) -> None:
        """A cleared proposal is expired with its time, kept expired_keep_s, then gone."""
        policy = ActionPolicy(TOPO, ActionConfig(expired_keep_s=600))
        run(policy, health(down_link(7)), 2 * HOLD)
        cleared = policy.update(health(), t_s=T0 + 3 * HOLD)
        advisory = cleared.for_node("s0/u1/n7")
        assert advisory is not None
        assert (advisory.state, advisory.expired_s, advisory.proposed_s) == ("expired", T0 + 3 * HOLD, T0 + HOLD)
        assert policy.update(health(), t_s=T0 + 3 * HOLD + 599).for_node("s0/u1/n7") is not None
        assert policy.update(health(), t_s=T0 + 3 * HOLD + 600).advisories == ()

    def test_escalation_raises_a_proposal(self) -> None:
        """A degraded link's reset, still degraded past the escalation time, becomes what follows it (a cordon
        here: in no job) through the brake at once, and is flagged."""
        policy = ActionPolicy(TOPO, ActionConfig(reset_escalate_s=900))
        view = run(policy, health({"neuronlink": [(link_of(4), "degraded", int(Reason.LANES))]}), 960)
        assert states(view) == {"n4": ("cordon", "proposed", None)}
        assert (policy.totals.proposed["reset_link"], policy.totals.proposed["cordon"]) == (1, 1)


class TestLedger:
    """Each node's proposals, remembered across restarts; K in D days make a lemon."""

    def test_third_proposal_marks_a_lemon(self) -> None:
        """A node proposed three times within the window is a lemon, in the view and on its advisory."""
        policy = ActionPolicy(TOPO, ActionConfig(lemon_flags=3, expired_keep_s=0))
        for episode in range(3):
            start = T0 + episode * 3_600
            view = run(policy, health(down_link(6)), 2 * HOLD, start=start)
            policy.update(health(), t_s=start + 3 * HOLD)
        assert [(r.node, r.flagged, r.lemon) for r in view.lemons] == [("n6", 3, True)]
        advisory = view.for_node("s0/u1/n6")
        assert advisory is not None
        assert advisory.lemon
        assert [a for _, a, _ in view.lemons[0].history] == ["cordon"] * 3

    def test_restore_keeps_the_record(self) -> None:
        """A ledger saved as JSON and restored into a new policy keeps every node's history."""
        first = ActionPolicy(TOPO, ActionConfig(lemon_flags=2))
        run(first, health(down_link(6)), 2 * HOLD)
        saved = json.loads(json.dumps(first.ledger.document()))
        ledger = Ledger(flags=2)
        assert ledger.restore(saved) == 1
        second = ActionPolicy(TOPO, ActionConfig(lemon_flags=2), ledger=ledger)
        run(second, health(), 0, start=T0 + 10 * HOLD)
        run(second, health(down_link(6)), 2 * HOLD, start=T0 + 20 * HOLD)
        record = second.ledger.record("n6")
        assert record is not None
        assert (record.flagged, record.lemon) == (2, True)

    def test_old_flags_are_forgotten(self) -> None:
        """Flags older than the window no longer count."""
        ledger = Ledger(flags=2, days=1)
        ledger.flag("n1", t_s=T0, action="drain", cause="x")
        ledger.flag("n1", t_s=T0 + 90_000, action="drain", cause="y")
        ledger.prune(T0 + 90_000)
        record = ledger.record("n1")
        assert record is not None
        assert (record.flagged, record.lemon, [c for _, _, c in record.history]) == (1, False, ["y"])

    @pytest.mark.parametrize("document", [
        {"version": 2, "nodes": {}}, [], {"version": 1, "nodes": []},
        {"version": 1, "nodes": {"n1": [[1.0, "explode", "x"]]}},
        {"version": 1, "nodes": {"n1": [["t", "drain", "x"]]}},
    ])
    def test_refuses_a_foreign_document(self, document: object) -> None:
        """A ledger of another version or shape is refused, saying why, and the ledger is unchanged."""
        ledger = Ledger()
        ledger.flag("n1", t_s=T0, action="drain", cause="x")
        with pytest.raises(LedgerError):
            ledger.restore(document)
        assert ledger.record("n1") is not None
