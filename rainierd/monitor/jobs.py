"""The monitor's ear for jobs: the retained documents on ``rainier/v1/jobs/#``
(docs/jobs.md) kept in a ``JobBook``, and the tick's ``JobMembership``.

The session hands each job message here on the event loop (``hear``: a
64-node job's document decodes in ~45 us, one naming all 31,200 nodes of
rainier in ~8 ms, measured 2026-12-02 on the shared 2-core machine).  A refused document is counted by reason in the
book and logged once per episode: the first refusal of a reason says what
was wrong, and the episode ends (one line with its count) at the first tick
that hears no more of that reason.  Resolving the documents against the
fleet (~69 ms for a job over all of rainier) is the analysis thread's work:
``pending`` hands it the documents when, and only when, the book changed,
and ``resolve`` turns them into the membership that every later tick uses
until the next change.

A job that ended while the monitor was away is forgotten: its removal (an
empty retained message) went to nobody, and a new subscription hands over
only the documents the broker still holds.  So each subscription begins
with every known job *unheard* (``resubscribing``); the broker's retained
documents, which follow the SUBACK, confirm theirs; ``settle``, a while
after (``SETTLE_S``), forgets the rest.  A document that comes later
still is stored again when it comes: at worst a job of a slow reconnect is
missing from a few ticks, never kept after it ended.

A shard resolves the same documents against its own share of the fleet
(``shard_view``): a job's nodes in other shards are absent there, so its
per-job figures cover the job's nodes in this shard's share.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import structlog

from rainierd.core import JobMembership, NameIndex, resolve_jobs
from rainierd.errors import JobError
from rainierd.fleet import Topology
from rainierd.wire import JOB_REJECT_REASONS, JOBS_ROOT, JobBook, JobDocument, job_id_of_topic

log = structlog.get_logger("rainierd.monitor")

_PREFIX = JOBS_ROOT + "/"
# How long after a subscription the jobs its retained documents did not confirm are forgotten: the broker sends
# them right after the SUBACK (100,000 documents decode in ~4.5 s here, the book's most).
SETTLE_S: Final = 10.0


def is_job_topic(topic: str) -> bool:
    """Return whether ``topic`` is under the job documents' root (the session routes those here)."""
    return topic.startswith(_PREFIX)


class JobFeed:
    """The job documents heard, and the membership they resolve to (built once a change, off the loop)."""

    def __init__(self, topology: Topology) -> None:
        self._index = NameIndex.of(topology)
        self.book = JobBook()
        self.membership = JobMembership.empty(topology.n_nodes)
        self._changed = False
        self._episodes: Counter[str] = Counter()  # reason -> refusals in its open episode
        self._this_tick: set[str] = set()  # reasons refused since the last ``pending``
        self._unheard: set[str] = set()  # jobs known before this subscription and not heard since

    def hear(self, topic: str, payload: bytes) -> None:
        """Take one message on a job topic: store or forget its job, or count (and maybe log) its refusal."""
        if self._unheard:
            with contextlib.suppress(JobError):  # a bad topic: counted as refused by the book below
                self._unheard.discard(job_id_of_topic(topic))  # even a refused update: the broker holds the job
        error = self.book.apply(topic, payload)
        if error is None:
            self._changed = True
            return
        reason = error.reason
        self._this_tick.add(reason)
        if not self._episodes[reason]:
            log.warning("job document refused", reason=reason, topic=topic[:200], detail=str(error)[:300],
                        refused_total=self.book.rejected[reason])
        self._episodes[reason] += 1

    def resubscribing(self) -> None:
        """Begin a subscription: every job known now is unheard until the broker hands its document again."""
        self._unheard = set(self.book.jobs)

    def settle(self) -> None:
        """Forget the jobs the subscription's retained documents did not confirm: they ended while the monitor
        was away (their removal went to nobody)."""
        gone = sorted(job for job in self._unheard if job in self.book.jobs)
        self._unheard = set()
        for job in gone:
            self.book.jobs.pop(job, None)
            self.book.payloads.pop(job, None)
        if gone:
            self._changed = True
            log.info("jobs ended while disconnected", jobs=len(gone), first=gone[:5])

    def pending(self) -> tuple[JobDocument, ...] | None:
        """Return the documents to resolve for the next tick if the book changed since the last call, else None;
        close the refusal episodes of reasons not heard since the last call."""
        for reason in [r for r, n in self._episodes.items() if n and r not in self._this_tick]:
            log.info("job documents no longer refused", reason=reason, refused=self._episodes.pop(reason))
        self._this_tick.clear()
        if not self._changed:
            return None
        self._changed = False
        return tuple(self.book.jobs.values())

    def resolve(self, documents: tuple[JobDocument, ...] | None) -> JobMembership:
        """Return the membership of ``documents`` (None: the last one), and keep it; CPU-bound, off the loop."""
        if documents is not None:
            self.membership = resolve_jobs(self._index, documents)
        return self.membership

    def refused(self) -> Mapping[str, int]:
        """Return the documents refused so far, by reason (every reason, 0 included), copied."""
        return MappingProxyType({reason: self.book.rejected[reason] for reason in JOB_REJECT_REASONS})
