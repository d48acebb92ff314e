"""The advisories as retained MQTT documents: ``rainier/v1/actions/<node>``
holds each node's current advisory (``<node>`` its canonical id, so
``rainier/v1/actions/s0/u1/n4``, and ``rainier/v1/actions/s0/u1/#`` is one
UltraServer's: docs/ids.md), ``rainier/v1/actions/_brake`` the
brake (``_brake-<i>`` for monitor shard ``i``), so a subscriber that comes
late gets every node's standing advisory from the broker at once, and an
empty retained payload (MQTT's removal) clears a node whose advisory left.

A node's document is published when its advisory changes (``sinks/changes.py``:
new, a new state or action, its causes changed, cleared), not every tick::

    {"schema_version": 1, "t_s": ..., "dry_run": true, "shard": "0/1", "advisory": {...Advisory.document()}}
    {"schema_version": 1, "t_s": ..., "dry_run": true, "shard": "0/1", "brake": {...BrakeStatus.document()}}

The outbox keeps one payload a topic, the latest (what a retained topic
should hold is only ever its latest document), in the order topics
changed, at most ``max_pending`` topics: beyond that the oldest is dropped
and counted.  The analysis only calls ``offer``; ``publish`` drains the
outbox on a connected client, in the monitor's session.

Nothing is left standing that no longer holds, even across an outage, an
overflow or a restart: on each connection the monitor republishes every
current document (a few hundred at ``rainier``), and it subscribes to
``rainier/v1/actions/#``, so the broker hands it every retained document;
one that names this monitor's shard but no current advisory (a node that
cleared while the monitor was down or its removal was dropped) is removed.
Another shard's documents are left alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Final

import aiomqtt
import structlog

from rainierd.actions import SCHEMA_VERSION, ActionsView
from rainierd.sinks.changes import brake_changed, diff
from rainierd.wire import ACTIONS_ROOT, WHOLE_FLEET, Shard

log = structlog.get_logger("rainierd.sinks")

OUTBOX_TOPICS: Final = 10_000
ACTIONS_FILTER: Final = f"{ACTIONS_ROOT}/#"
_BAD_TOPIC_CHARS: Final = frozenset("+#\0")  # a node's id spans levels (s0/u1/n4): "/" is its own


def action_topic(node: str) -> str:
    """Return the retained topic of ``node``'s advisory."""
    return f"{ACTIONS_ROOT}/{node}"


def is_action_topic(topic: str) -> bool:
    """Return whether ``topic`` is one of the advisories' retained topics."""
    return topic.startswith(ACTIONS_ROOT + "/")


class _Document:
    """One retained document, encoded when first needed: the analysis only queues it, and 1,000 new advisories
    encoded at once would hold the event loop ~35 ms (``python -m benchmarks sinks``); the publishing task
    encodes one at a time.  ``b""`` is a removal."""

    __slots__ = ("_encode", "_encoded")

    def __init__(self, encode: Callable[[], bytes] | None = None) -> None:
        self._encode = encode
        self._encoded: bytes | None = None if encode is not None else b""

    @property
    def payload(self) -> bytes:
        """Return the document's bytes (encoding it the first time)."""
        if self._encoded is None:
            assert self._encode is not None
            self._encoded, self._encode = self._encode(), None
        return self._encoded


_REMOVAL: Final = _Document()


class RetainedActions:
    """Publishes each advisory change as a retained document (see the module docstring)."""

    def __init__(self, *, qos: int, shard: Shard = WHOLE_FLEET, max_pending: int = OUTBOX_TOPICS) -> None:
        if max_pending < 1:
            raise ValueError(f"the actions outbox needs a bound, not {max_pending}")
        self._qos = max(qos, 1)
        self._shard = str(shard)
        self.brake_topic = f"{ACTIONS_ROOT}/_brake" if shard.whole else f"{ACTIONS_ROOT}/_brake-{shard.index}"
        self._max_pending = max_pending
        self._pending: dict[str, _Document] = {}  # topic -> latest document, oldest change first
        self._current: dict[str, _Document] = {}  # topic -> the document that should stand now
        self._ready = asyncio.Event()
        self._last: ActionsView | None = None
        self.published = 0
        self.dropped = 0  # topics whose pending payload was dropped from the full outbox
        self.refused = 0  # advisories whose node name cannot be a topic level
        self.removed_stale = 0  # retained documents of this shard that stood for no current advisory
        self.heard = 0  # retained documents the broker handed over (on subscribing)
        # Heard before the first view: judged once it is known, so a restart does not remove and then republish
        # every standing document (a subscriber would see each node clear and come back).
        self._unjudged: set[str] = set()

    @property
    def pending(self) -> int:
        """Return how many topics wait to be published."""
        return len(self._pending)

    def offer(self, view: ActionsView | None) -> None:
        """Queue the documents of what changed since the last view offered (None changes nothing); never blocks."""
        if view is None:
            return
        before, self._last = self._last, view
        for change in diff(before, view):
            if not change.node or _BAD_TOPIC_CHARS.intersection(change.node):
                self.refused += 1
                log.warning("advisory's node id cannot be an MQTT topic; not published",
                            node=change.node[:80], refused=self.refused)
                continue
            topic = action_topic(change.node)
            if change.kind == "cleared":
                self._current.pop(topic, None)
                self._put(topic, _REMOVAL)
            else:
                document = self._document(view, "advisory", change.advisory.document)
                self._current[topic] = document
                self._put(topic, document)
        if brake_changed(before, view):
            document = self._document(view, "brake", view.brake.document)
            self._current[self.brake_topic] = document
            self._put(self.brake_topic, document)
        for topic in self._unjudged - self._current.keys():
            self._remove_stale(topic)
        self._unjudged.clear()

    def _document(self, view: ActionsView, key: str, body: Callable[[], dict[str, Any]]) -> _Document:
        head = {"schema_version": SCHEMA_VERSION, "t_s": view.t_s, "dry_run": view.dry_run, "shard": self._shard}
        return _Document(lambda: json.dumps(head | {key: body()}, separators=(",", ":")).encode())

    def _put(self, topic: str, document: _Document) -> None:
        self._pending.pop(topic, None)  # to the back: the order is that of the latest changes
        self._pending[topic] = document
        if len(self._pending) > self._max_pending:
            del self._pending[next(iter(self._pending))]
            self.dropped += 1
        self._ready.set()

    def hear(self, topic: str, payload: bytes, *, retained: bool) -> None:
        """Take a message on ``rainier/v1/actions/#``: a retained document of this shard that stands for no
        current advisory is removed, one that is out of date is republished."""
        if not retained or not payload:
            return  # our own publications echoed back, or removals
        self.heard += 1
        if topic in self._current:
            if payload != self._current[topic].payload and topic not in self._pending:
                self._put(topic, self._current[topic])
            return
        try:
            document = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(document, dict) or document.get("shard") != self._shard:
            return
        if self._last is None:
            if len(self._unjudged) < self._max_pending:
                self._unjudged.add(topic)
        elif topic not in self._pending:
            self._remove_stale(topic)

    def _remove_stale(self, topic: str) -> None:
        self.removed_stale += 1
        self._put(topic, _REMOVAL)

    async def publish(self, client: aiomqtt.Client) -> None:
        """Republish every current document, hear the retained ones, then publish changes until cancelled."""
        for topic, document in self._current.items():
            if topic not in self._pending:
                self._put(topic, document)
        await client.subscribe(ACTIONS_FILTER, qos=1)
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._pending:
                topic, document = next(iter(self._pending.items()))
                # Left pending until the broker has it: a session that ends here publishes it on the next.
                await client.publish(topic, document.payload, qos=self._qos, retain=True)
                if self._pending.get(topic) is document:
                    del self._pending[topic]
                self.published += 1
