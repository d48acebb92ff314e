"""``/api/v1/events``: the monitor's most recent detection events, newest
first, from the bounded ring the event log keeps (monitor/events.py,
``EventLog.recent``), each as the log and MQTT carry it: its entity's
canonical ``id``, ``index``, ``ultraserver``, ``node`` and ``hostname``
where they apply (docs/ids.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def events(recent: Sequence[Mapping[str, Any]], *, limit: int, entity: str | None, announced: int,
           capacity: int) -> dict[str, Any]:
    """Return the newest ``limit`` events of ``recent`` (oldest first, as the ring of ``capacity`` holds them)
    of ``entity`` (or every kind); ``announced`` counts every event since the monitor started."""
    newest = [e for e in reversed(recent) if entity is None or e.get("entity") == entity]
    return {"total": len(newest), "limit": limit, "capacity": capacity,
            "announced": announced, "events": [dict(e) for e in newest[:limit]]}
