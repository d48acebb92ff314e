"""The monitor's MQTT session, one connection's worth: subscribe to its
shard's telemetry, hand every message to the inbox, publish the event
outbox and the advisories' retained documents (sinks/retained.py), and keep
its own retained status saying ``online``.

``mqtt.supervise`` runs ``consume`` once per connection and is the only
place that catches the transport's errors; it also ends ``consume`` when
the connection drops.  Messages reach the inbox straight from the client's
read callback (``mqtt.deliver``), so none waits in a queue of the client's
own that could discard it uncounted.
"""

from __future__ import annotations

import asyncio

import aiomqtt
import structlog

from rainierd.monitor.clock import ListeningClock
from rainierd.monitor.events import EventLog
from rainierd.monitor.inbox import Inbox
from rainierd.monitor.jobs import SETTLE_S, JobFeed, is_job_topic
from rainierd.mqtt import ConnectionState, deliver
from rainierd.sinks.retained import RetainedActions, is_action_topic
from rainierd.wire import JOBS_FILTER, Shard, status_topic, telemetry_filters

log = structlog.get_logger("rainierd.monitor")


class Session:
    """What the monitor does while connected."""

    def __init__(
        self, *, shard: Shard, n_sites: int, qos: int, inbox: Inbox, events: EventLog, clock: ListeningClock,
        reconnect_grace_s: float = 0.0, batches_only: bool = False, jobs: JobFeed | None = None,
        actions: RetainedActions | None = None,
    ) -> None:
        self._filters = telemetry_filters(shard, n_sites=n_sites, batches_only=batches_only)
        self._qos, self._inbox, self._events, self._clock = qos, inbox, events, clock
        self._reconnect_grace_s = reconnect_grace_s
        self.connection = ConnectionState()  # written by mqtt.supervise
        self._status_restore: asyncio.Task[None] | None = None
        self._jobs = jobs  # None: a session that does not hear jobs
        self._actions = actions  # None: a session that publishes no advisories

    async def consume(self, client: aiomqtt.Client) -> None:
        """Subscribe to telemetry and jobs, queue messages and publish events until cancelled.

        Job documents (retained, QoS 1, docs/jobs.md) go to the job feed, never
        to the telemetry inbox, which refuses retained messages as replays.

        It also watches its own retained status: while it serves, nothing but
        ``online`` may stand there, whoever wrote it (the broker's ACL should
        keep others out; docs/security.md).
        """
        own_status = status_topic(client.identifier)
        inbox, jobs, actions = self._inbox, self._jobs, self._actions
        serving = [True]  # paho may still deliver after the TaskGroup ended (our own "offline" on the way out)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._events.publish(client), name="monitor-publish-events")
                tg.create_task(self._grace(), name="monitor-reconnect-grace")
                if actions is not None:  # it subscribes to the advisories' retained documents itself
                    tg.create_task(actions.publish(client), name="monitor-publish-actions")

                def on_message(topic: str, payload: bytes, retained: bool) -> None:
                    if topic == own_status:
                        if serving[0] and payload != b"online" and (
                                self._status_restore is None or self._status_restore.done()):
                            self._status_restore = tg.create_task(self._restore_status(client, own_status, payload),
                                                                  name="monitor-restore-status")
                        return
                    if jobs is not None and is_job_topic(topic):
                        jobs.hear(topic, payload)
                        return
                    if actions is not None and is_action_topic(topic):
                        actions.hear(topic, payload, retained=retained)
                        return
                    inbox.put(topic, payload, retained=retained)

                deliver(client, on_message)  # before subscribing: retained messages come with the SUBACK
                if len(self._filters) == 1:
                    await client.subscribe(self._filters[0], qos=self._qos)
                else:  # a shard's filters (up to 129) in one SUBSCRIBE: one round trip, not one each
                    await client.subscribe([(topic_filter, self._qos) for topic_filter in self._filters])
                await client.subscribe(own_status, qos=1)
                if jobs is not None:  # every retained document comes with the SUBACK: the current jobs at once
                    jobs.resubscribing()
                    await client.subscribe(JOBS_FILTER, qos=1)
                    tg.create_task(self._settle(jobs), name="monitor-settle-jobs")
                self._clock.hear("disconnected")
                # Messages arrive through on_message; this waits until mqtt.supervise ends the session.
                await asyncio.get_running_loop().create_future()
        finally:
            serving[0] = False
            self._clock.deafen("disconnected")

    @staticmethod
    async def _settle(jobs: JobFeed) -> None:
        """Forget, ``SETTLE_S`` after subscribing, the jobs the broker's retained documents did not confirm."""
        await asyncio.sleep(SETTLE_S)
        jobs.settle()

    async def _grace(self) -> None:
        """Judge no silence for ``reconnect_grace_s`` after connecting.

        When the broker comes back, every publisher reconnects on its own
        backoff (rainierd's retry at least every ``mqtt_reconnect_max_s``, 2 s): until they have, a node that
        is quiet is a node still reconnecting, not a lost one.
        """
        if self._reconnect_grace_s <= 0:
            return
        self._clock.deafen("publishers_reconnecting")
        try:
            await asyncio.sleep(self._reconnect_grace_s)
        finally:
            self._clock.hear("publishers_reconnecting")

    async def _restore_status(self, client: aiomqtt.Client, topic: str, payload: bytes) -> None:
        """Say online again.  Another client wrote here, or this id's previous session's will fired late."""
        self.connection.status_overwritten += 1
        log.warning("this monitor's status was overwritten while it serves; saying online again", topic=topic,
                    status=payload[:16].decode(errors="replace"), occurrences=self.connection.status_overwritten)
        await client.publish(topic, b"online", qos=1, retain=True)
