"""MQTT topic names under the one versioned root, and their parsing.

Each kind of message has its own fixed level right under the root, so a
subscription to one kind can never match another (as Sparkplug does)::

    rainier/v1/telemetry/s<site>/u<ultraserver>/n<node>                  a node's frames
    rainier/v1/telemetry/s<site>/facility                                 a site's cooling plant
    rainier/v1/telemetry/s<site>/batch/<name>                             batch frames of that site's nodes
    rainier/v1/events/<entity>/<id>                                       detections (monitor only)
    rainier/v1/status/<client-id>                                         online/offline (MQTT will)
    rainier/v1/truth/<publisher>                                          simulator ground truth

Ids are the topology's global ids (a node's is the same ``n<node>`` as its
``node`` label on every metric).  A monitor shard takes one site with
``rainier/v1/telemetry/s<site>/#``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "EVENTS_ROOT",
    "ROOT",
    "TELEMETRY_ROOT",
    "TopicAddress",
    "batch_topic",
    "facility_topic",
    "node_topic",
    "parse_topic",
    "status_topic",
    "telemetry_filters",
    "truth_topic",
]

ROOT: Final = "rainier/v1"
TELEMETRY_ROOT: Final = f"{ROOT}/telemetry"
EVENTS_ROOT: Final = f"{ROOT}/events"

# Matched whole (fullmatch: ``$`` would also match before a trailing newline) and
# ASCII only (``\d`` would take any Unicode digit, and int() reads "n\u0663" as n3):
# a topic that differs by a byte is not the node's topic.
_NODE_RE: Final = re.compile(r"rainier/v1/telemetry/s(\d{1,6})/u(\d{1,8})/n(\d{1,10})", re.ASCII)
_FACILITY_RE: Final = re.compile(r"rainier/v1/telemetry/s(\d{1,6})/facility", re.ASCII)
_BATCH_RE: Final = re.compile(r"rainier/v1/telemetry/s(\d{1,6})/batch/[A-Za-z0-9_.-]{1,64}", re.ASCII)

TopicKind = Literal["node", "facility", "batch"]


@dataclass(frozen=True, slots=True)
class TopicAddress:
    """What a telemetry topic names: a node's frames, a site's facility, or a batch of a site's nodes."""

    kind: TopicKind
    site: int
    ultraserver: int = -1
    node: int = -1

    @property
    def is_facility(self) -> bool:
        """Return True for a site facility topic."""
        return self.kind == "facility"


def node_topic(site: int, ultraserver: int, node: int) -> str:
    """Return the topic a node's frames are published on (global ids)."""
    return f"{TELEMETRY_ROOT}/s{site}/u{ultraserver}/n{node}"


def facility_topic(site: int) -> str:
    """Return the topic a site's facility frames are published on."""
    return f"{TELEMETRY_ROOT}/s{site}/facility"


def batch_topic(site: int, name: str) -> str:
    """Return the topic a batch of ``site``'s nodes is published on by the aggregator ``name``."""
    return f"{TELEMETRY_ROOT}/s{site}/batch/{name}"


def truth_topic(publisher: str) -> str:
    """Return the topic a simulator publishes its per-tick ground truth on."""
    return f"{ROOT}/truth/{publisher}"


def status_topic(client_id: str) -> str:
    """Return the retained online/offline topic of a client (its MQTT will)."""
    return f"{ROOT}/status/{client_id}"


def telemetry_filters() -> list[str]:
    """Return the subscription filters for all telemetry (and nothing else)."""
    return [f"{TELEMETRY_ROOT}/#"]


def parse_topic(topic: str) -> TopicAddress | None:
    """Return what a telemetry topic addresses, or None if it is not one."""
    if m := _NODE_RE.fullmatch(topic):
        return TopicAddress("node", int(m[1]), int(m[2]), int(m[3]))
    if m := _BATCH_RE.fullmatch(topic):
        return TopicAddress("batch", int(m[1]))
    if m := _FACILITY_RE.fullmatch(topic):
        return TopicAddress("facility", int(m[1]))
    return None
