"""The monitor role's analysis loop: once a tick it takes the inbox's window,
analyses it in a worker thread (decoding, checks, detection: the core), and
publishes one frozen ``MonitorSnapshot`` — the tick's conclusions and the
monitor's own status — for everything that reads the monitor.

The parts it drives each have their room: the listening clock (``clock``),
the inbox (``inbox``), the load judgement (``load``), the MQTT session
(``session``), the event outbox (``events``) and the stream checkpoint
(``checkpointing``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import structlog

from rainierd.actions import RESETS, ActionConfig, ActionPolicy, ActionsView, MonitorCondition
from rainierd.admission import BURST_TICKS, Admission, Confirmed, SharePolicy
from rainierd.core import Analysis, MonitorConfig, MonitorCore
from rainierd.core.ingest import Message
from rainierd.fleet import Topology, shard_view
from rainierd.monitor.admission import confirmed_of
from rainierd.monitor.checkpointing import Checkpointer
from rainierd.monitor.clock import ListeningClock
from rainierd.monitor.events import EventLog
from rainierd.monitor.footprint import Footprint, rss_bytes
from rainierd.monitor.inbox import Inbox, backlog_bytes_for
from rainierd.monitor.jobs import JobFeed
from rainierd.monitor.ledger_file import ledger_path, restore_ledger, save_ledger
from rainierd.monitor.overload import LoadJudge
from rainierd.monitor.rejections import RejectionLog
from rainierd.monitor.session import Session
from rainierd.monitor.snapshot import IngestCounts, MonitorSnapshot, MonitorStatus
from rainierd.mqtt import ConnectionState
from rainierd.runtime import LagHistogram, LoopLag, Verdict, release_freed_memory, worth_logging
from rainierd.sinks.retained import RetainedActions
from rainierd.wire import WHOLE_FLEET, JobDocument, Shard

log = structlog.get_logger("rainierd.monitor")

# Events announced between yields to the event loop: ~25 us each (a log line,
# an outbox entry), and a probe waits out two batches, so ~7 ms of loop lag.
_ANNOUNCE_BATCH: Final = 128
_DEFAULT_SHARE: Final = SharePolicy()
_BURST_MESSAGES: Final = 10_000
_STOP_ANALYSIS_S: Final = 0.5  # the last window is analysed on a stop only if an analysis takes less (2 s grace)


class Monitor:
    """Holds the fleet state (of its shard's share, when sharded) and turns MQTT messages into snapshots."""

    def __init__(
        self,
        topology: Topology,
        config: MonitorConfig,
        *,
        max_backlog_bytes: int | None = None,
        qos: int = 0,
        clock: ListeningClock | None = None,
        checkpoint_file: Path | None = None,
        reconnect_grace_s: float = 0.0,
        shard: Shard = WHOLE_FLEET,
        loop_lag: LoopLag | None = None,
        share: SharePolicy | None = _DEFAULT_SHARE,
        batches_only: bool = False,
        actions: ActionConfig | None = None,
    ) -> None:
        self.shard = shard
        self.topology = topology = shard_view(topology, shard)
        self.tick_s = config.tick_s
        self.core = MonitorCore(topology, config)
        self.clock = clock = clock or ListeningClock()
        self._rejections = RejectionLog()
        if max_backlog_bytes is None:
            max_backlog_bytes = backlog_bytes_for(topology, max_frame_bytes=config.max_frame_bytes)
        self.inbox = Inbox(max_frame_bytes=config.max_frame_bytes, max_backlog_bytes=max_backlog_bytes,
                           listening_s=clock.now, rejections=self._rejections,
                           admission=None if share is None else Admission(share, tick_s=config.tick_s))
        # Whose frames each topic carries, as the last analysis left the streams: built in its thread, handed to
        # the inbox's admission on the loop (admission.py).
        self._confirmed: Confirmed | None = None
        self.load = LoadJudge(tick_s=config.tick_s, clock=clock)
        self.events = EventLog(topology, qos=qos)
        # The shard's view of the fleet: a job's nodes in other shards are absent, so its figures are its share's.
        self.jobs = JobFeed(topology)
        # The advisories' retained documents (docs/actions.md), published by the session like the events.
        self.actions_out = RetainedActions(qos=qos, shard=shard)
        self.session = Session(shard=shard, n_sites=topology.n_sites, qos=qos, inbox=self.inbox,
                               events=self.events, clock=clock, reconnect_grace_s=reconnect_grace_s,
                               batches_only=batches_only, jobs=self.jobs, actions=self.actions_out)
        fleet = f"{topology.name}: {topology.n_nodes} nodes, {topology.n_sites} sites"
        if not shard.whole:  # another shard's accounting is not this one's
            fleet += f", shard {shard}"
        self.checkpointer = None if checkpoint_file is None else Checkpointer(checkpoint_file, self.core.ingest,
                                                                              fleet=fleet, learned=self.core)
        # The advisories (docs/actions.md): judged on the loop after each analysis, from its frozen results and
        # the monitor's own condition; their ledger is kept beside the checkpoint.
        self.actions = ActionPolicy(topology, actions)
        self._ledger_path = None if checkpoint_file is None else ledger_path(checkpoint_file)
        self._ledger_failures = 0
        self._advising = threading.Lock()
        self._sample_lag = LagHistogram()
        self._loop_lag = loop_lag
        # The one value every reader takes: replaced, never mutated, once per analysis.
        self.snapshot: MonitorSnapshot | None = None
        # Held while an analysis mutates the state in its worker thread: a drill-down probe
        # (api/drilldown.py) reads one UltraServer's live state under it, never a half-applied tick.
        self.state_lock = asyncio.Lock()
        self.generation = 0
        self._recorded = True  # the last analysis's counts are recorded (False while one runs)
        self._last_analysis: float | None = None
        # A backlog of this many messages is a burst (a genuine fleet queues about one a stream a tick).
        self._burst_messages = _BURST_MESSAGES + 4 * topology.n_nodes
        self._release_again = -1  # the analysis after which a burst's memory is released a second time
        self.footprint = Footprint()  # releases after input that grew the heap without being a burst

    @property
    def connection(self) -> ConnectionState:
        """Return the MQTT session's live connection state (``mqtt.supervise`` writes it)."""
        return self.session.connection

    def restore(self) -> bool:
        """Continue the sequence accounting of the checkpoint file, if there is a usable one, and take back the
        action ledger beside it."""
        if self._ledger_path is not None:
            restore_ledger(self._ledger_path, self.actions.ledger)
        restored = self.checkpointer.restore() if self.checkpointer is not None else False
        if restored:
            self._learn(confirmed_of(self.core.ingest))  # the streams' publishers are known from the first frame
        return restored

    def _learn(self, confirmed: Confirmed | None) -> None:
        """Hand the streams as they stand to the inbox's admission (on the loop)."""
        self._confirmed = confirmed
        if confirmed is not None and self.inbox.admission is not None:
            self.inbox.admission.learn(confirmed)

    def status(self) -> MonitorStatus:
        """Return the monitor's own status as of now (call it on the loop, between analyses)."""
        inbox, loop_lag, checkpointer = self.inbox, self._loop_lag, self.checkpointer
        return MonitorStatus(
            ingest=IngestCounts.of(self.core.stats, inbox.receipts,
                                   withhold_accounting=checkpointer is not None and checkpointer.stale_left),
            connection=self.connection.frozen(),
            backlog=self.load.backlog(messages=len(inbox), bytes_=inbox.bytes,
                                      dropped_messages=inbox.dropped_messages, dropped_bytes=inbox.dropped_bytes),
            sample_lag=self._sample_lag.frozen(),
            checkpoint=None if checkpointer is None else checkpointer.frozen(),
            loop_lag_worst_s=None if loop_lag is None else loop_lag.worst_s,
            loop_lag=None if loop_lag is None else loop_lag.histogram.frozen(),
            events_dropped=self.events.outbox.dropped,
            share_topics=None if inbox.admission is None else len(inbox.admission),
            jobs_refused=self.jobs.refused(),
        )

    async def analyse_once(self) -> MonitorSnapshot:
        """Analyse what arrived since the last call and publish a new snapshot."""
        started = time.perf_counter()
        window = self.inbox.take_window()
        drained = not len(self.inbox)  # a capped window leaves a backlog behind (load.py: then no credit)
        waited_s = self.inbox.receive_clock.now() - window[0].rx_wall_s if window else 0.0
        # Events are numbered by the monitor's own analyses: publishers' ticks
        # are each their own and are never compared.
        job = asyncio.ensure_future(self._analyse_locked(window, tick=self.generation + 1))
        self._recorded = False
        ingest = self.core.ingest
        try:
            analysis = await asyncio.shield(job)
        except asyncio.CancelledError:
            # A stop: the thread runs on regardless and advances the streams, so wait for it and record what it
            # applied and lost; a checkpoint saved on the way out then stays consistent (its frames counted once).
            ingest.record((await job).flush)
            self._recorded = True
            raise
        finished_wall = time.time()
        self._learn(self._confirmed)
        ingest.record(analysis.flush)
        self._recorded = True
        self._rejections.window(analysis.flush.rejected)
        self._rejections.counters(analysis.flush.refused)
        self._sample_lag.observe(finished_wall - analysis.flush.applied_t_s)
        elapsed = time.perf_counter() - started
        self.load.judge(waited_s=waited_s, elapsed_s=elapsed, dropped_messages=self.inbox.dropped_messages,
                        receive_lag_s=analysis.flush.receive_lag_s, receive_excess_s=analysis.flush.receive_excess_s,
                        receive_entity=analysis.flush.receive_entity, streams_heard=analysis.flush.streams_heard,
                        heard_t_s=math.nan if self._confirmed is None else self._confirmed.heard_t_s,
                        drained=drained)
        for count, event in enumerate(analysis.events, 1):
            # One feed a monitor: its id is the shard's, so shards' retained events never meet.
            self.events.announce(dataclasses.replace(event, id=self.shard.index) if event.entity == "feed" else event)
            if count % _ANNOUNCE_BATCH == 0:
                await asyncio.sleep(0)  # rainier falling silent is 31,200 node events: 0.8 s in one go
        self.generation += 1
        if self.checkpointer is not None:
            # Before the status is taken: the counts a snapshot shows never run ahead of the checkpoint a later
            # start would take back (checkpointing.py).
            await self.checkpointer.save_accounting()
        status = self.status()
        # In a thread: ~4 ms of CPU a tick with 1,000 unhealthy entities at rainier, ~80 ms wall the tick all appear
        # (benchmarks/results/actions.json); one analysis at a time, so the policy is never shared.
        actions = await asyncio.to_thread(self._advise, analysis, t_s=finished_wall, status=status)
        self.snapshot = MonitorSnapshot.of(
            analysis, generation=self.generation, chips_total=self.topology.n_present_chips, analysis_s=elapsed,
            analysed_ticks=self.generation, events=self.events.counts,
            lag_s=finished_wall - self.core.state.latest_t_s, status=status, actions=actions,
            action_totals=self.actions.totals,
        )
        self._last_analysis = time.monotonic()
        self.actions_out.offer(self.snapshot.actions)  # a diff and an outbox append: the session publishes
        return self.snapshot

    def _advise(self, analysis: Analysis, *, t_s: float, status: MonitorStatus) -> ActionsView:
        """Return the analysis's advisories, and log each new proposal and each trip of the brake."""
        with self._advising:  # a stop's last analysis may start while a cancelled one's thread still advises
            return self._advise_locked(analysis, t_s=t_s, status=status)

    def _advise_locked(self, analysis: Analysis, *, t_s: float, status: MonitorStatus) -> ActionsView:
        policy = self.actions
        trips = (policy.brake.trips, policy.reset_brake.trips)
        backlog = status.backlog
        view = policy.update(analysis.health, t_s=t_s, jobs=analysis.jobs, loss=analysis.job_loss,
                             phases=analysis.job_phases,
                             condition=MonitorCondition(connected=status.connection.connected,
                                                        overloaded=backlog is not None and backlog.overloaded))
        for advisory in view.advisories:
            if advisory.proposed_s == t_s and advisory.state == "proposed":
                # Named as the events name it (docs/ids.md): the node's id, its UltraServer's, its hostname.
                named = {"hostname": advisory.hostname} if advisory.hostname is not None else {}
                log.warning("action proposed", node=advisory.node, ultraserver=advisory.ultraserver, **named,
                            action=advisory.action, reason=advisory.reason,
                            protects=[p.document() for p in advisory.protects], dry_run=view.dry_run,
                            lemon=advisory.lemon)
        # Resets have their own brake (docs/actions.md, "The brake"): the line says which one tripped.
        for name, brake, before, now in (("drains", view.brake, trips[0], policy.brake.trips),
                                         ("resets", view.reset_brake, trips[1], policy.reset_brake.trips)):
            if now != before:
                log.warning("action brake tripped", brake=name, scope=brake.scope,
                            under_action=brake.under_action, max_nodes=brake.max_nodes,
                            max_fraction=brake.max_fraction, window_s=brake.window_s,
                            held=sum(1 for a in view.advisories if a.suppressed_by == "brake"
                                     and (a.action in RESETS) == (name == "resets")))
        return view

    async def _save_ledger(self) -> None:
        """Write the action ledger beside the checkpoint if it changed (off the loop); a failure is counted and
        logged, never raised (the ledger stays in memory and is written again at the next change)."""
        if self._ledger_path is None or not self.actions.ledger.changed:
            return
        try:
            await asyncio.to_thread(save_ledger, self._ledger_path, self.actions.ledger.document())
        except OSError as exc:
            self.actions.ledger.changed = True
            self._ledger_failures += 1
            if worth_logging(self._ledger_failures - 1, self._ledger_failures):
                log.warning("action ledger not saved", path=str(self._ledger_path), error=str(exc)[:300],
                            occurrences=self._ledger_failures)

    async def _analyse_locked(self, window: list[Message], *, tick: int) -> Analysis:
        # Its own task: the lock is held until the thread is done, even when the caller is cancelled.
        documents = self.jobs.pending()  # taken on the loop, where the session changes the book
        async with self.state_lock:
            return await asyncio.to_thread(self._analyse_in_thread, window, documents, now_s=self.clock.now(),
                                           tick=tick)

    def _analyse_in_thread(self, window: list[Message], documents: tuple[JobDocument, ...] | None, *, now_s: float,
                           tick: int) -> Analysis:
        """Resolve the jobs if their documents changed (tens of ms at rainier: never on the loop), then analyse
        the window with them: one membership a tick, the same for every reader of its analysis; and the streams
        as it leaves them, for the inbox's admission."""
        analysis = self.core.analyse(window, now_s=now_s, tick=tick, jobs=self.jobs.resolve(documents))
        self._confirmed = confirmed_of(self.core.ingest, self._confirmed)
        return analysis

    async def save_checkpoint_now(self) -> None:
        """Save the sequence accounting as of the analysis just finished, if there is a checkpoint file (and the
        learned state, once a minute), and the action ledger."""
        if self.checkpointer is not None:
            await self.checkpointer.save()
        await self._save_ledger()

    async def _save_beside(self, *, final: bool = False) -> None:
        """Save what is kept beside the accounting (which ``analyse_once`` saved): the learned state when due or
        ``final``, and the action ledger."""
        if self.checkpointer is not None:
            await self.checkpointer.save_learned_when_due(final=final)
        await self._save_ledger()

    async def analyse(self, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run ``analyse_once`` (then ``after``) about once a tick until cancelled.

        An analysis runs a tick after the last one began, or earlier (but not
        before half a tick) once a burst of messages has ended: publishers that
        send a tick's frames together then wait ~0.1 s for analysis instead of
        up to a whole tick, however their clock's phase falls against ours.
        """
        loop = asyncio.get_running_loop()
        quiet_s = min(0.1, self.tick_s / 10)
        inbox = self.inbox
        try:
            while True:
                began = loop.time()
                await self.analyse_once()  # the accounting is saved before its snapshot is published
                await self._release_freed_memory()
                await self._save_beside()
                if after is not None:
                    await after()
                due, earliest = began + self.tick_s, began + self.tick_s / 2
                if inbox.full_window_waiting:
                    continue  # a capped window left a full one behind: take it at once
                while (now := loop.time()) < due:
                    if len(inbox) and now >= earliest and now - inbox.last_rx_s >= quiet_s:
                        break
                    await asyncio.sleep(min(quiet_s / 2, due - now))
        except asyncio.CancelledError:
            await self._last_checkpoint()
            raise

    async def _release_freed_memory(self) -> None:
        """Hand freed memory back to the system once a burst is analysed, again once the share table has forgotten
        the burst's topics (two share windows later), and whenever the monitor has grown past the footprint it
        settled at (``footprint.py``: hostile input spread over many windows is never a burst): the heap keeps
        freed pages otherwise."""
        if self.inbox.burst_over(messages=self._burst_messages):
            self._release_again = self.generation + 2 * BURST_TICKS + 1
            why = "burst over"
        elif self.generation == self._release_again:
            why = "burst's topics forgotten"
        elif self.footprint.due(refused=self._refused_so_far()):
            why = "grown past its footprint"
        else:
            return
        # A burst's rejected payloads leave reference cycles (a decode error's traceback holds its frame) that
        # outlive the young generations while the window is analysed; only a full collection frees them, and
        # after gc.freeze() (daemon.py) it walks only what came since, a few ms.
        before = rss_bytes()
        collected = gc.collect()
        await asyncio.to_thread(release_freed_memory)
        log.info("freed memory released", why=why, rss_bytes_before=before, rss_bytes=rss_bytes(),
                 floor_bytes=self.footprint.floor_bytes, collected=collected)

    def _refused_so_far(self) -> int:
        """Return every message rejected (after decoding) or refused (before) so far."""
        return sum(self.core.stats.rejected.values()) + sum(self.inbox.receipts.refused.values())

    async def _last_checkpoint(self) -> None:
        """On a stop, account for the frames already received and save the checkpoint.

        Frames received but not analysed would otherwise be lost to the next
        run, and a stream first heard among them would be first heard by the
        next run, its earlier frames outside the accounting (nothing before a
        stream's first frame can be counted lost: it may predate the monitor).
        The stop stays within its grace: the last window is analysed only if
        the monitor is keeping up and its last analysis took under
        ``_STOP_ANALYSIS_S``.  An analysis left unrecorded leaves the last
        checkpoint as it is.
        """
        if self.checkpointer is None or not self._recorded:
            return
        last = self.snapshot.analysis_s if self.snapshot is not None else 0.0
        try:
            if len(self.inbox) and not self.load.overloaded and last < _STOP_ANALYSIS_S:
                await self.analyse_once()  # saves the accounting
            else:  # an analysis cancelled mid-way recorded its counts without saving them
                await self.checkpointer.save_accounting()
            await self._save_beside(final=True)
        except asyncio.CancelledError:  # stopped again: keep the last checkpoint
            log.warning("stopped again while saving the last stream checkpoint; the previous one stands")

    # -- probes -------------------------------------------------------------------------

    def healthy(self) -> Verdict:
        """Return healthy unless analysis has stalled for 10 ticks."""
        if self._last_analysis is not None and time.monotonic() - self._last_analysis > 10 * self.tick_s + 5:
            return Verdict(False, "analysis stalled")
        return Verdict(True, "ok")

    def ready(self) -> Verdict:
        """Return ready once connected, a tick has been analysed, while keeping up and while its feed is not
        lost (most of its nodes silent together: it is connected, but hears almost nothing)."""
        if not self.connection.connected:
            return Verdict(False, "mqtt not connected")
        if self.snapshot is None or not self.snapshot.computed:
            return Verdict(False, "no telemetry analysed yet")
        if self.load.overloaded:
            return Verdict(False, f"overloaded: {', '.join(self.load.reasons)}")
        feed = self.snapshot.health.feed if self.snapshot.health is not None else None
        if feed is not None and feed.lost:
            return Verdict(False, feed.reason)
        return Verdict(True, "ready")
