"""Specification of the event log (rainierd/monitor/events.py): each event names its entity as every surface
does (docs/ids.md) in its log line, its MQTT payload and the read API's ring, and its topic keeps the index."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import aiomqtt
from structlog.testing import capture_logs

from rainierd.core.detect import Event
from rainierd.fleet.inventory import load_inventory
from rainierd.monitor.events import EventLog
from rainierd.wire import EVENTS_ROOT

INVENTORY = load_inventory(Path(__file__).parents[2] / "data" / "inventory-two-sites.toml")
LINK = 6 * 48 + 5  # chip 5's x link of node 6 (ip-10-0-18-10), UltraServer 1
NAMED = {"entity": "neuronlink", "id": "s0/u1/n6/chip5/link0", "index": LINK, "ultraserver": "s0/u1",
         "node": "s0/u1/n6", "hostname": "ip-10-0-18-10"}


def degraded(entity: str = "neuronlink", index: int = LINK) -> Event:
    return Event(tick=40, entity=entity, id=index, before="healthy", after="degraded", reasons=("lanes",),
                 onset_tick=38)


class Client:
    """Records what is published (the part of aiomqtt.Client the event log uses)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, Any]]] = []

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool) -> None:
        self.published.append((topic, json.loads(payload)))


async def published(log: EventLog) -> list[tuple[str, dict[str, Any]]]:
    """Return what ``log.publish`` sends of its outbox."""
    client = Client()
    task = asyncio.create_task(log.publish(cast(aiomqtt.Client, client)))
    await log.outbox.join()
    task.cancel()
    return client.published


class TestNames:
    def test_the_log_line_names_the_entity_its_node_and_ultraserver(self) -> None:
        """The health-degraded line carries the link's id, index, UltraServer, node and hostname."""
        log = EventLog(INVENTORY, qos=1)
        with capture_logs() as lines:
            log.announce(degraded())
        [line] = lines
        assert line["event"] == "health degraded"
        assert {k: line[k] for k in NAMED} == NAMED

    async def test_the_mqtt_payload_says_the_same_on_the_index_topic(self) -> None:
        """The retained event is published on …/events/neuronlink/<index> with the same names as the log line."""
        log = EventLog(INVENTORY, qos=1)
        with capture_logs():
            log.announce(degraded())
        [(topic, payload)] = await published(log)
        assert topic == f"{EVENTS_ROOT}/neuronlink/{LINK}"
        assert {k: payload[k] for k in NAMED} == NAMED
        assert (payload["tick"], payload["after"], payload["reasons"]) == (40, "degraded", ["lanes"])

    def test_the_api_ring_holds_the_same_document(self) -> None:
        """What /api/v1/events serves is the log line's fields."""
        log = EventLog(INVENTORY, qos=1)
        with capture_logs():
            log.announce(degraded())
        assert {k: log.recent[-1][k] for k in NAMED} == NAMED

    def test_an_ultraserver_event_has_no_node(self) -> None:
        """An UltraServer's cooling event names the UltraServer, and no node or hostname."""
        log = EventLog(INVENTORY, qos=1)
        with capture_logs():
            log.announce(degraded("ultraserver", 2))
        assert {k: v for k, v in log.recent[-1].items() if k in ("entity", "id", "index", "ultraserver", "node",
                                                                  "hostname")} == {
            "entity": "ultraserver", "id": "s1/u2", "index": 2, "ultraserver": "s1/u2"}
