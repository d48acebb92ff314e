"""Specification of what counts as an advisory change (sinks/changes.py) and of the retained documents' outbox
(sinks/retained.py) without a broker: one pending payload a topic, the oldest dropped beyond the bound, stale
documents judged once the first view is known."""

from __future__ import annotations

import dataclasses
import json

from rainierd.actions.model import BrakeStatus, Protected
from rainierd.sinks.changes import brake_changed, diff
from rainierd.sinks.retained import RetainedActions
from rainierd.wire.topics import ACTIONS_ROOT, Shard
from tests.actions_views import advisory, view


class TestDiff:
    def test_new_changed_and_cleared(self) -> None:
        """A node that appears is new, one whose state moved is changed, one that left is cleared (last)."""
        before = view(advisory("a", state="pending"), advisory("b"))
        after = view(advisory("c"), advisory("a"))
        assert [(c.kind, c.node, c.event_type) for c in diff(before, after)] == [
            ("new", "c", "proposed"), ("changed", "a", "proposed"), ("cleared", "b", "cleared")]

    def test_moving_figures_are_no_change(self) -> None:
        """The same advisory with other FLOP/s protected and a later view time is no change."""
        a = advisory("a")
        moved = dataclasses.replace(a, protects=(Protected("llama-70b", 1.0e15),))
        assert diff(view(a, t_s=1.0), view(moved, t_s=2.0)) == []

    def test_a_cause_changing_state_is_a_change(self) -> None:
        """The same node and action with its cause now failed instead of degraded is a change."""
        assert [c.kind for c in diff(view(advisory("a", link_state="degraded")),
                                     view(advisory("a", link_state="failed")))] == ["changed"]

    def test_from_nothing_everything_is_new(self) -> None:
        """The first view's advisories are all new."""
        assert [c.kind for c in diff(None, view(advisory("a"), advisory("b")))] == ["new", "new"]

    def test_the_brake(self) -> None:
        """The brake tripping or its count moving is a change; the same status is not; the first view's is."""
        calm = view()
        tripped = view(brake=dataclasses.replace(calm.brake, tripped=True, scope="fleet"))
        assert (brake_changed(None, calm), brake_changed(calm, view()), brake_changed(calm, tripped),
                brake_changed(calm, view(brake=BrakeStatus(10, 0.05, 3_600.0, 2)))) == (True, False, True, True)


def pending_of(outbox: RetainedActions) -> dict[str, bytes]:
    # The outbox's content is what these tests specify.
    return {topic: document.payload for topic, document in outbox._pending.items()}


class TestOutbox:
    def test_one_payload_a_topic_the_latest(self) -> None:
        """Two changes of one node before the session publishes leave one payload, the latest, at the back."""
        outbox = RetainedActions(qos=1)
        first, second = view(advisory("a", state="pending"), advisory("b")), view(advisory("a"), advisory("b"))
        outbox.offer(first)
        outbox.offer(second)
        pending = pending_of(outbox)
        assert list(pending) == [f"{ACTIONS_ROOT}/b", f"{ACTIONS_ROOT}/_brake", f"{ACTIONS_ROOT}/a"]
        assert json.loads(pending[f"{ACTIONS_ROOT}/a"])["advisory"] == second.advisories[0].document()

    def test_a_clearing_is_an_empty_payload(self) -> None:
        """An advisory that leaves is MQTT's removal of a retained message: an empty payload."""
        outbox = RetainedActions(qos=1)
        outbox.offer(view(advisory("a")))
        outbox.offer(view())
        assert pending_of(outbox)[f"{ACTIONS_ROOT}/a"] == b""

    def test_beyond_the_bound_the_oldest_is_dropped_and_counted(self) -> None:
        """With room for two topics, a third change drops the oldest pending topic and counts it."""
        outbox = RetainedActions(qos=1, max_pending=2)
        outbox.offer(view(advisory("a"), advisory("b")))
        assert (list(pending_of(outbox)), outbox.dropped) == ([f"{ACTIONS_ROOT}/b", f"{ACTIONS_ROOT}/_brake"], 1)

    def test_a_node_id_is_its_topic_s_levels(self) -> None:
        """A node's advisory is retained under its id's levels (rainier/v1/actions/s0/u1/n4: docs/ids.md)."""
        outbox = RetainedActions(qos=1)
        outbox.offer(view(advisory("s0/u1/n4", node_id=4)))
        assert sorted(pending_of(outbox)) == [f"{ACTIONS_ROOT}/_brake", f"{ACTIONS_ROOT}/s0/u1/n4"]

    def test_a_node_name_that_cannot_be_a_topic_is_refused_and_counted(self) -> None:
        """A node named with a + or # (a wildcard) is not published, and counted."""
        outbox = RetainedActions(qos=1)
        outbox.offer(view(advisory("a+b"), advisory("c#"), advisory("c")))
        assert (sorted(pending_of(outbox)), outbox.refused) == (
            [f"{ACTIONS_ROOT}/_brake", f"{ACTIONS_ROOT}/c"], 2)

    def test_a_shards_brake_has_its_own_topic(self) -> None:
        """Shard 1 of 2 publishes its brake at _brake-1, so shards never overwrite each other's."""
        assert RetainedActions(qos=1, shard=Shard(1, 2)).brake_topic == f"{ACTIONS_ROOT}/_brake-1"


class TestStaleDocuments:
    @staticmethod
    def stored(node: str, shard: str) -> bytes:
        return json.dumps({"schema_version": 1, "shard": shard, "advisory": advisory(node).document()}).encode()

    def test_heard_before_the_first_view_judged_with_it(self) -> None:
        """Documents heard before the first view wait for it: this shard's without an advisory are removed,
        a standing node's is not, another shard's is left alone."""
        outbox = RetainedActions(qos=1)
        for node, shard in (("gone", "0/1"), ("a", "0/1"), ("theirs", "1/2")):
            outbox.hear(f"{ACTIONS_ROOT}/{node}", self.stored(node, shard), retained=True)
        assert pending_of(outbox) == {}
        outbox.offer(view(advisory("a")))
        pending = pending_of(outbox)
        assert (pending[f"{ACTIONS_ROOT}/gone"], f"{ACTIONS_ROOT}/theirs" in pending, outbox.removed_stale) == (
            b"", False, 1)

    def test_own_publications_echoed_back_are_ignored(self) -> None:
        """A message that is not retained (our own publication, delivered live) changes nothing."""
        outbox = RetainedActions(qos=1)
        outbox.offer(view())
        outbox.hear(f"{ACTIONS_ROOT}/gone", self.stored("gone", "0/1"), retained=False)
        assert (f"{ACTIONS_ROOT}/gone" in pending_of(outbox), outbox.heard) == (False, 0)
