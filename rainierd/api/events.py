"""``/api/v1/events``: the monitor's most recent detection events, newest
first, from the bounded ring the event log keeps (monitor/events.py,
``EventLog.recent``), each with the UltraServer its entity belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rainierd.fleet import Topology


def _ultraserver(topo: Topology, entity: str, entity_id: int) -> str | None:
    if entity_id < 0:
        return None
    node = {"chip": topo.chip_node, "neuronlink": topo.link_node, "efa": topo.efa_node}
    try:
        if entity in node:
            return f"u{topo.node_ultraserver[node[entity][entity_id]]}"
        if entity == "node":
            return f"u{topo.node_ultraserver[entity_id]}"
    except IndexError:
        return None
    return f"u{entity_id}" if entity == "ultraserver" else None


def events(topo: Topology, recent: Sequence[Mapping[str, Any]], *, limit: int, entity: str | None,
           announced: int, capacity: int) -> dict[str, Any]:
    """Return the newest ``limit`` events of ``recent`` (oldest first, as the ring of ``capacity`` holds them)
    of ``entity`` (or every kind); ``announced`` counts every event since the monitor started."""
    newest = [e for e in reversed(recent) if entity is None or e.get("entity") == entity]
    out = [dict(e) | {"ultraserver": _ultraserver(topo, str(e.get("entity")), int(e.get("id", -1)))}
           for e in newest[:limit]]
    return {"total": len(newest), "limit": limit, "capacity": capacity,
            "announced": announced, "events": out}
