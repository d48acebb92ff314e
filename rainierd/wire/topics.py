"""MQTT topic names under the one versioned root, and their parsing.

``rainier/v1/s<site>/u<ultraserver>/n<node-in-ultraserver>`` carries a node's
frames, ``rainier/v1/s<site>/facility`` a site's cooling plant,
``rainier/v1/events/...`` detections, ``rainier/v1/truth/...`` the simulator's
ground truth and ``rainier/v1/status/<client>`` each client's online/offline
state (its MQTT will).  Ids are the topology's global ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "EVENTS_ROOT",
    "ROOT",
    "TopicAddress",
    "facility_topic",
    "node_topic",
    "parse_topic",
    "status_topic",
    "telemetry_filters",
    "truth_topic",
]

ROOT: Final = "rainier/v1"
EVENTS_ROOT: Final = f"{ROOT}/events"

_NODE_RE: Final = re.compile(r"^rainier/v1/s(\d{1,6})/u(\d{1,8})/n(\d{1,2})$")
_FACILITY_RE: Final = re.compile(r"^rainier/v1/s(\d{1,6})/facility$")


@dataclass(frozen=True, slots=True)
class TopicAddress:
    """What a telemetry topic names: a node's frame or a site's facility."""

    site: int
    ultraserver: int | None = None
    node_in_ultraserver: int | None = None

    @property
    def is_facility(self) -> bool:
        """Return True for a site facility topic."""
        return self.ultraserver is None


def node_topic(site: int, ultraserver: int, node_in_ultraserver: int) -> str:
    """Return the topic a node's frames are published on."""
    return f"{ROOT}/s{site}/u{ultraserver}/n{node_in_ultraserver}"


def facility_topic(site: int) -> str:
    """Return the topic a site's facility frames are published on."""
    return f"{ROOT}/s{site}/facility"


def truth_topic(publisher: str) -> str:
    """Return the topic a simulator publishes its per-tick ground truth on."""
    return f"{ROOT}/truth/{publisher}"


def status_topic(client_id: str) -> str:
    """Return the retained online/offline topic of a client (its MQTT will)."""
    return f"{ROOT}/status/{client_id}"


def telemetry_filters() -> list[str]:
    """Return the subscription filters for all node and facility telemetry."""
    return [f"{ROOT}/+/+/+", f"{ROOT}/+/facility"]


def parse_topic(topic: str) -> TopicAddress | None:
    """Return what a telemetry topic addresses, or None if it is not one."""
    if m := _NODE_RE.match(topic):
        return TopicAddress(int(m[1]), int(m[2]), int(m[3]))
    if m := _FACILITY_RE.match(topic):
        return TopicAddress(int(m[1]))
    return None
