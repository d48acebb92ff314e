"""Detection events on their way out: counted by entity and state, logged,
and published to MQTT (retained, so a late subscriber sees each entity's
last change) from an outbox that drops its oldest when the session is down.
Each carries its entity's canonical id, index, UltraServer, node and hostname
(``Event.as_dict``, docs/ids.md), built once when announced; the topic keeps
the index (``…/events/<entity>/<index>``).
The newest ``RECENT_EVENTS`` are also kept as plain dicts for the read API's
``/api/v1/events`` (docs/api.md): a ring, so a burst (rainier falling silent
is 31,200 node events) costs a bounded ~1,000 dicts, not the burst.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from typing import Any, Final

import aiomqtt
import structlog

from rainierd.core.detect import Event
from rainierd.fleet import Topology
from rainierd.runtime import DropOldestQueue
from rainierd.wire import EVENTS_ROOT

log = structlog.get_logger("rainierd.monitor")

OUTBOX_EVENTS: Final = 10_000
RECENT_EVENTS: Final = 1_000


class EventLog:
    """Counts, logs and queues each event; ``publish`` drains the queue on a connected client."""

    def __init__(self, topology: Topology, *, qos: int) -> None:
        self._topology = topology
        self._qos = max(qos, 1)
        self.counts: Counter[tuple[str, str]] = Counter()  # cumulative, by (entity, new state)
        # Each event, its plain data (without the time) and when it was announced.
        self.outbox: DropOldestQueue[tuple[Event, dict[str, Any], float]] = DropOldestQueue(OUTBOX_EVENTS)
        # The newest events as the log writes them (with ``t_s``), oldest first; appended on the event loop.
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)

    def announce(self, event: Event) -> None:
        """Count, log and queue one event for publishing."""
        self.counts[event.entity, event.after] += 1
        t_s = time.time()
        data = event.as_dict(self._topology)
        fields = data | {"t_s": round(t_s, 3)}
        if event.after == "healthy":
            log.info("health recovered", **fields)
        else:
            log.warning("health degraded", **fields)
        self.outbox.offer((event, data, t_s))
        self.recent.append(fields)

    async def publish(self, client: aiomqtt.Client) -> None:
        """Publish queued events on ``client`` until cancelled."""
        while True:
            event, data, t_s = await self.outbox.get()
            try:
                await client.publish(
                    f"{EVENTS_ROOT}/{event.entity}/{event.id}", json.dumps(data | {"t_s": t_s}).encode(),
                    qos=self._qos, retain=True,
                )
            finally:
                self.outbox.task_done()
