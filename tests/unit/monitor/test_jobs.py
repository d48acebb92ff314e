"""Specification of the monitor's jobs (rainierd/monitor/jobs.py and its use
in the tick): documents heard into a book, refusals counted and logged once
an episode, the membership resolved only when the book changed and handed to
the core with the tick's messages, so each analysis carries one membership
and the per-job figures priced on it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from structlog.testing import capture_logs

from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.jobs import JobMembership
from rainierd.fleet.topology import build_topology
from rainierd.monitor import Monitor
from rainierd.monitor.jobs import JobFeed, is_job_topic
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import encode_binary
from rainierd.wire.jobs import JOB_REJECT_REASONS, JobDocument, encode_job, job_topic
from tests.helpers import hear

TOPO = build_topology("demo")


def payload(job_id: str, *ultraservers: str) -> tuple[str, bytes]:
    doc = JobDocument(v=1, id=job_id, name=job_id, owner="bob", scheduler="kubernetes", source="test",
                      ultraservers=list(ultraservers), start_s=1.0)
    return job_topic(job_id), encode_job(doc)


class TestJobFeed:
    def test_a_change_is_pending_once(self) -> None:
        """A document heard makes the book's documents pending for the next tick, once; no change, nothing."""
        feed = JobFeed(TOPO)
        feed.hear(*payload("ml/a", "u0"))
        pending = feed.pending()
        assert pending is not None
        assert [d.id for d in pending] == ["ml/a"]
        assert feed.pending() is None

    def test_resolve_keeps_the_last_membership(self) -> None:
        """Resolving the pending documents gives their membership; resolving nothing keeps it."""
        feed = JobFeed(TOPO)
        feed.hear(*payload("ml/a", "u1"))
        first = feed.resolve(feed.pending())
        assert (first.ids, first.nodes_held.tolist()) == (("ml/a",), [4])
        assert feed.resolve(feed.pending()) is first

    def test_an_empty_retained_message_removes_the_job(self) -> None:
        """The empty message on a job's topic forgets it, and that is a change."""
        feed = JobFeed(TOPO)
        feed.hear(*payload("ml/a", "u0"))
        feed.resolve(feed.pending())
        feed.hear(job_topic("ml/a"), b"")
        assert feed.resolve(feed.pending()).n_jobs == 0

    def test_a_job_that_ended_while_the_monitor_was_away_is_forgotten_when_the_subscription_settles(self) -> None:
        """Its removal went to nobody: a new subscription hands over only what the broker still holds (a's
        retained document, and b's refused update, which leaves b standing at the broker); c, unheard, is
        forgotten at ``settle``, which is a change, and logged; a document that comes after is stored again."""
        feed = JobFeed(TOPO)
        for job in ("ml/a", "ml/b", "ml/c"):
            feed.hear(*payload(job, "u0"))
        feed.resolve(feed.pending())
        feed.resubscribing()
        feed.hear(*payload("ml/a", "u0"))
        feed.hear(job_topic("ml/b"), b"{not json")
        with capture_logs() as logs:
            feed.settle()
        assert feed.resolve(feed.pending()).ids == ("ml/a", "ml/b")
        assert [(e["event"], e["jobs"], e["first"]) for e in logs] == [("jobs ended while disconnected", 1, ["ml/c"])]
        feed.settle()  # once settled, nothing more is forgotten
        assert feed.pending() is None
        feed.hear(*payload("ml/c", "u0"))
        assert feed.resolve(feed.pending()).ids == ("ml/a", "ml/b", "ml/c")

    def test_a_settle_without_a_new_subscription_forgets_nothing(self) -> None:
        """Jobs heard in this subscription are never unheard: settling forgets nothing and changes nothing."""
        feed = JobFeed(TOPO)
        feed.resubscribing()
        feed.hear(*payload("ml/a", "u0"))
        feed.resolve(feed.pending())
        feed.settle()
        assert (feed.pending(), feed.membership.ids) == (None, ("ml/a",))

    def test_refusals_are_counted_and_logged_once_an_episode(self) -> None:
        """Three broken documents in a tick are three refusals and one log line; a tick without one ends the
        episode (one line); the next refusal opens a new one."""
        feed = JobFeed(TOPO)
        with capture_logs() as logs:
            for _ in range(3):
                feed.hear(job_topic("ml/a"), b"{not json")
            feed.pending()
            feed.hear(job_topic("ml/a"), b"{not json")
            feed.pending()
            feed.pending()
            feed.hear(job_topic("ml/a"), b"[]")
        assert feed.refused() == {r: 5 if r == "malformed" else 0 for r in JOB_REJECT_REASONS}
        assert [(e["event"], e.get("reason")) for e in logs] == [
            ("job document refused", "malformed"),
            ("job documents no longer refused", "malformed"),
            ("job document refused", "malformed"),
        ]
        assert feed.pending() is None  # a refusal changes nothing

    def test_only_job_topics_are_routed_to_it(self) -> None:
        """The job root's topics are jobs; telemetry and status topics are not."""
        assert [is_job_topic(t) for t in ("rainier/v1/jobs/ml/a", "rainier/v1/telemetry/s0/b0/n0",
                                          "rainier/v1/status/x", "rainier/v1/jobsx")] == [True, False, False, False]


class TestCore:
    def test_an_analysis_carries_its_membership_and_the_next_keeps_it(self) -> None:
        """The membership given with a tick is the analysis's, priced there; a tick given none keeps it."""
        feed = JobFeed(TOPO)
        feed.hear(*payload("ml/a", "u0"))
        jobs = feed.resolve(feed.pending())
        core = MonitorCore(TOPO)
        model = FleetModel(TOPO, np.random.default_rng(0), tick_s=1.0, start_s=0.0)
        first = core.step([f for _t, f in tick_frames(TOPO, model.step(0), publisher="t")], jobs=jobs)
        second = core.step([f for _t, f in tick_frames(TOPO, model.step(1), publisher="t")])
        assert first.jobs is jobs
        assert second.jobs is jobs
        assert second.job_loss is not None
        assert second.job_loss.chips.tolist() == [64]

    def test_a_membership_of_another_fleet_is_refused(self) -> None:
        """A membership resolved against another topology is a programming error, raised at once."""
        core = MonitorCore(TOPO)
        with pytest.raises(ValueError, match="resolve it against this core's topology"):
            core.step([], now_s=0.0, jobs=JobMembership.empty(TOPO.n_nodes + 4))


class TestMonitor:
    async def test_the_snapshot_prices_the_jobs_heard(self) -> None:
        """Job documents and telemetry handed to the monitor as its session hands them: the next snapshot has the
        jobs, their figures, and the refusals in its status; a removal takes the job out at the following tick."""
        monitor = Monitor(TOPO, MonitorConfig(max_frame_bytes=65_536))
        model = FleetModel(TOPO, np.random.default_rng(0), tick_s=1.0, start_s=time.time() - 2)
        hear(monitor, *payload("ml/a", "u0"))
        hear(monitor, *payload("ml/b", "u1"))
        hear(monitor, job_topic("ml/c"), b"{}")
        for tick in range(2):
            for topic, frame in tick_frames(TOPO, model.step(tick), publisher="sim"):
                hear(monitor, topic, encode_binary(frame))
        snap = await monitor.analyse_once()
        assert snap.jobs is not None
        assert snap.job_loss is not None
        assert (snap.jobs.ids, snap.job_loss.chips.tolist()) == (("ml/a", "ml/b"), [64, 64])
        assert snap.job_loss.unallocated_peak == 0.0
        assert snap.status.jobs_refused["schema"] == 1
        hear(monitor, job_topic("ml/b"), b"")
        snap = await monitor.analyse_once()
        assert snap.jobs is not None
        assert snap.jobs.ids == ("ml/a",)
