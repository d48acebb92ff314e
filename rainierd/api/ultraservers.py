"""``/api/v1/ultraservers`` (a page of UltraServers, any sort) and
``/api/v1/ultraservers/<id>`` (one UltraServer's nodes, chips, links and ports).
Every entity is named by its canonical ``id`` (``s0/u1``, ``s0/u1/n4/chip5``:
docs/ids.md) with its fleet-wide ``index`` beside it.

The list reads only the snapshot: ``UltraServerTable`` is built from it once
per generation (a ``reshape().sum()`` over the chips' freshness and a
``bincount`` per entity kind over the unhealthy ids; about 1 ms at
``rainier``) and every page is a slice of one sort of it.  The effective
share is the snapshot's effective over its peak, per UltraServer.

One UltraServer's detail is what ``/probe`` knows (``drilldown``, ``figures``):
the live per-entity state, read under the monitor's analysis lock (never a
half-applied tick) but only for as long as a few fancy-indexed copies take;
the JSON is built after the lock is released.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from rainierd._types import F64, I64, B
from rainierd.api._common import ApiError, Page, columns, floats, order
from rainierd.api.figures import ENTITY_FIGURES, live_values
from rainierd.core import MonitorCore
from rainierd.core.detect import STATE_NAMES, reason_names
from rainierd.fleet import CAUSES, LINK_KIND_NAMES, Topology
from rainierd.fleet.ids import chip_id, efa_id, link_id, node_id, parse, ultraserver_id
from rainierd.monitor import MonitorSnapshot

ENTITIES: Final = ("chip", "neuronlink", "efa", "node", "ultraserver")
"""The entity kinds counted per UltraServer (the feed is the monitor's own, not an UltraServer's)."""

FIELDS: Final = ("id", "index", "name", "site", "state", "chips_present", "chips_reporting", "peak_flops",
                  "effective_flops", "effective_share", "lost_flops", "lost_by_cause", "goodput_ratio", "unhealthy",
                  "unhealthy_total")
"""The fields of an UltraServer's row, in order (``fields=`` picks some; ``id`` and ``index`` are always there)."""

SORTS: Final = {"id": False, "effective_share": False, "lost": True, "unhealthy": True}
"""Sort keys of the list and whether each runs descending (worst first) by default."""

_ID: Final = re.compile(r"u?([0-9]{1,9})")


@dataclass(frozen=True, eq=False)
class UltraServerTable:
    """Per UltraServer of one snapshot (indexed by UltraServer id): what the list, sites and jobs read."""

    present: B  # has a present node (a shard: in its share)
    chips_present: I64
    chips_reporting: I64
    peak: F64
    effective: F64
    share: F64  # effective / peak (NaN: no peak)
    lost: dict[str, F64]  # by cause
    lost_total: F64
    unhealthy: dict[str, I64]  # by entity kind
    unhealthy_total: I64
    state: I64  # the ultraserver entity's own state (cooling)

    @property
    def goodput(self) -> F64:
        """Return each UltraServer's effective over effective plus lost (NaN: unknown, or nothing could run)."""
        whole = self.effective + self.lost_total
        out = np.full(whole.size, np.nan)
        np.divide(self.effective, whole, out=out, where=whole > 0)
        return out

    @classmethod
    def of(cls, topo: Topology, snap: MonitorSnapshot) -> UltraServerTable:
        """Return the table of ``snap`` (computed: its throughput applies)."""
        n = topo.n_ultraservers
        tp = snap.throughput
        chips_present = topo.chip_present.reshape(n, -1).sum(axis=1).astype(np.int64)
        reporting = (tp.chip_fresh & topo.chip_present).reshape(n, -1).sum(axis=1).astype(np.int64)
        share = np.full(n, np.nan)
        effective = tp.shown("effective", "ultraserver")  # NaN (null) where none of its chips knows it
        np.divide(effective, tp.ultraserver_peak, out=share, where=tp.ultraserver_peak > 0)
        lost = {c: (snap.lost.ultraserver[c] if snap.lost is not None else np.zeros(n)) for c in CAUSES}
        unhealthy = {e: np.zeros(n, np.int64) for e in ENTITIES}
        state = np.zeros(n, np.int64)
        if snap.health is not None:
            owner_node = {"chip": topo.chip_node, "neuronlink": topo.link_node, "efa": topo.efa_node}
            for entity in ENTITIES:
                ids = snap.health.ids.get(entity, np.zeros(0, np.int64))
                if entity == "ultraserver":
                    owners = ids
                    state[ids] = snap.health.states[entity]
                else:
                    nodes = owner_node[entity][ids] if entity in owner_node else ids
                    owners = topo.node_ultraserver[nodes]
                unhealthy[entity] = np.bincount(owners, minlength=n).astype(np.int64)
        return cls(
            present=np.asarray(topo.node_present.reshape(n, -1).any(axis=1), bool), chips_present=chips_present,
            chips_reporting=reporting, peak=tp.ultraserver_peak, effective=effective, share=share,
            lost=lost, lost_total=np.sum([lost[c] for c in CAUSES], axis=0, dtype=np.float64).reshape(n),
            unhealthy=unhealthy, unhealthy_total=np.sum(list(unhealthy.values()), axis=0).astype(np.int64),
            state=state,
        )

    def rows(self, topo: Topology, ids: I64, fields: tuple[str, ...] = FIELDS) -> list[dict[str, Any]]:
        """Return the rows of UltraServers ``ids``, in that order, with ``fields`` only (each of ``FIELDS``)."""
        names = topo.names.ultraservers

        def lost() -> list[dict[str, float | None]]:
            by_cause = [floats(self.lost[c][ids]) for c in CAUSES]
            return [dict(zip(CAUSES, v, strict=True)) for v in zip(*by_cause, strict=True)]

        def unhealthy() -> list[dict[str, int]]:
            by_kind = [self.unhealthy[e][ids].tolist() for e in ENTITIES]
            return [dict(zip(ENTITIES, v, strict=True)) for v in zip(*by_kind, strict=True)]

        column: dict[str, Callable[[], list[Any]]] = {
            "id": lambda: [ultraserver_id(topo, u) for u in ids.tolist()],
            "index": ids.tolist,
            "name": lambda: [names[u] for u in ids.tolist()] if names else [None] * ids.size,
            "site": lambda: [f"s{s}" for s in topo.ultraserver_site[ids].tolist()],
            "state": lambda: [STATE_NAMES["ultraserver"][s] for s in self.state[ids].tolist()],
            "chips_present": self.chips_present[ids].tolist,
            "chips_reporting": self.chips_reporting[ids].tolist,
            "peak_flops": lambda: floats(self.peak[ids]),
            "effective_flops": lambda: floats(self.effective[ids]),
            "effective_share": lambda: floats(self.share[ids]),
            "lost_flops": lambda: floats(self.lost_total[ids]),
            "lost_by_cause": lost,
            "goodput_ratio": lambda: floats(self.goodput[ids]),
            "unhealthy": unhealthy,
            "unhealthy_total": self.unhealthy_total[ids].tolist,
        }
        return columns(ids.size, {name: column[name]() for name in fields})


def wanted_fields(text: str | None) -> tuple[str, ...]:
    """Return the row fields ``fields=`` names (``id`` always, in ``FIELDS`` order), or raise a 400."""
    if text is None:
        return FIELDS
    named = set(text.split(","))
    if not named <= set(FIELDS):
        raise ApiError("400 Bad Request", f"fields= wants a comma-separated subset of {','.join(FIELDS)}")
    return tuple(f for f in FIELDS if f in named or f in ("id", "index"))


def resolve(topo: Topology, text: str, names: dict[str, int]) -> int:
    """Return the UltraServer ``text`` names (its id ``s0/u1``, ``u<index>``, an index, or an inventory name);
    raise 400 or 404."""
    if text in names:
        return names[text]
    match = _ID.fullmatch(text)
    if match is None and "/" in text:
        try:
            kind, us = parse(topo, text)
        except ValueError as exc:
            raise ApiError("404 Not Found", str(exc)) from None
        if kind != "ultraserver":
            raise ApiError("400 Bad Request", f"{text[:200]!r} is a {kind}, not an UltraServer; e.g. "
                           "/api/v1/ultraservers/s0/u0")
        return us
    if match is None:
        raise ApiError("400 Bad Request", f"want an UltraServer id (s0/u0), u<index> (0 .. "
                       f"{topo.n_ultraservers - 1}), an index, or an inventory name; e.g. /api/v1/ultraservers/s0/u0")
    us = int(match.group(1))
    if us >= topo.n_ultraservers or not topo.node_present[us * topo.nodes_per_ultraserver:
                                                          (us + 1) * topo.nodes_per_ultraserver].any():
        raise ApiError("404 Not Found", f"no UltraServer u{us} here ({topo.n_ultraservers} UltraServers)")
    return us


def listing(topo: Topology, table: UltraServerTable, snap: MonitorSnapshot, paging: Page, *,
            site: int | None, fields: tuple[str, ...] = FIELDS) -> dict[str, Any]:
    """Return one page of the UltraServers (of ``site``, or all), sorted as ``paging`` says, their rows
    holding ``fields``."""
    ids = np.flatnonzero(table.present).astype(np.int64)
    if site is not None:
        ids = ids[topo.ultraserver_site[ids] == site]
    key = {"id": ids.astype(np.float64), "effective_share": table.share[ids], "lost": table.lost_total[ids],
           "unhealthy": table.unhealthy_total[ids].astype(np.float64)}[paging.sort]
    ranked = ids if paging.sort == "id" and not paging.descending else order(ids, key, descending=paging.descending)
    chosen = ranked[paging.offset:paging.offset + paging.limit]
    return {"generation": snap.generation, "tick": snap.throughput.tick, "total": int(ids.size),
            "offset": paging.offset, "limit": paging.limit, "sort": paging.sort,
            "order": "desc" if paging.descending else "asc", "ultraservers": table.rows(topo, chosen, fields)}


@dataclass(frozen=True, eq=False)
class _Slices:
    """One UltraServer's live per-entity figures, copied under the lock."""

    nodes: I64
    chips: I64
    links: I64
    ports: I64
    figures: dict[str, dict[str, F64]]  # entity -> field -> values
    states: dict[str, I64]
    reasons: dict[str, I64]
    onsets: dict[str, I64]
    chip_effective: F64
    chip_t_s: F64  # each chip's latest sample time, on its publisher's clock (NaN: never heard)


def _slices(topo: Topology, core: MonitorCore, snap: MonitorSnapshot, us: int) -> _Slices:
    """Copy UltraServer ``us``'s live figures (hold the analysis lock)."""
    state, trackers = core.state, core.detector.trackers()
    nodes = np.arange(us * topo.nodes_per_ultraserver, (us + 1) * topo.nodes_per_ultraserver)
    nodes = nodes[topo.node_present[nodes]]
    chips = (nodes[:, None] * topo.chips_per_node + np.arange(topo.chips_per_node)).ravel()
    links = (nodes[:, None] * topo.links_per_node + np.arange(topo.links_per_node)).ravel()
    ports = (nodes[:, None] * topo.efa_ports_per_node + np.arange(topo.efa_ports_per_node)).ravel()
    ids = {"chip": chips, "neuronlink": links, "efa": ports, "node": nodes}
    tables = {"chip": state.chips, "neuronlink": state.links, "efa": state.efa, "node": state.cooling}
    figures = {entity: {figure.field: live_values(table, figure.field, ids[entity])
                        for figure in ENTITY_FIGURES[entity]}
               for entity, table in tables.items()}
    ids["ultraserver"] = np.array([us])
    chip_effective = np.where(snap.throughput.chip_fresh[chips], snap.throughput.chip_effective[chips], np.nan)
    return _Slices(nodes, chips, links, ports, figures,
                   {e: trackers[e].state[i].astype(np.int64) for e, i in ids.items()},
                   {e: trackers[e].reason[i].astype(np.int64) for e, i in ids.items()},
                   {e: trackers[e].onset[i].astype(np.int64) for e, i in ids.items()}, chip_effective,
                   state.chips.t_s[chips].copy())


async def copy_live(topo: Topology, core: MonitorCore, lock: asyncio.Lock, snapshot: Any, us: int,
                    ) -> tuple[MonitorSnapshot, _Slices]:
    """Return the latest snapshot and UltraServer ``us``'s live figures, copied under ``lock``; 503 before any
    telemetry has been analysed."""
    async with lock:
        snap = snapshot()
        if snap is None or not snap.computed:
            raise ApiError("503 Service Unavailable", "no telemetry analysed yet")
        return snap, _slices(topo, core, snap, us)


def _health(entity: str, slices: _Slices) -> dict[str, list[Any]]:
    states = slices.states[entity].tolist()
    return {"state": [STATE_NAMES[entity][s] for s in states],
            "reasons": [list(reason_names(r)) if s else [] for s, r in
                        zip(states, slices.reasons[entity].tolist(), strict=True)],
            "onset_tick": [o if s else None for s, o in zip(states, slices.onsets[entity].tolist(), strict=True)]}


def detail(topo: Topology, table: UltraServerTable, snap: MonitorSnapshot, slices: _Slices, us: int,
           ) -> dict[str, Any]:
    """Return UltraServer ``us``'s document: its summary row and every node, chip, link and port."""
    [summary] = table.rows(topo, np.array([us], np.int64))
    summary["reasons"] = list(reason_names(int(slices.reasons["ultraserver"][0])))
    names = topo.names
    nodes, chips, links, ports = (slices.nodes.tolist(), slices.chips.tolist(), slices.links.tolist(),
                                  slices.ports.tolist())
    figure = {e: {name: floats(values) for name, values in fields.items()} for e, fields in slices.figures.items()}
    jobs: list[str | None] = [None] * len(nodes)
    if snap.jobs is not None and snap.jobs.node_job.size == topo.n_nodes:
        jobs = [snap.jobs.ids[j] if j >= 0 else None for j in snap.jobs.node_job[slices.nodes].tolist()]
    node_ids = [node_id(topo, n) for n in nodes]
    us_id = summary["id"]
    return {
        "generation": snap.generation, "tick": snap.throughput.tick, "ultraserver": summary,
        "nodes": columns(len(nodes), {
            "id": node_ids, "index": nodes, "ultraserver": [us_id] * len(nodes),
            "hostname": [names.hostnames[n] for n in nodes] if names.hostnames else [None] * len(nodes),
            "instance_id": [names.instance_ids[n] for n in nodes] if names.instance_ids else [None] * len(nodes),
            "job": jobs, **_health("node", slices), **figure["node"]}),
        "chips": columns(len(chips), {
            "id": [chip_id(topo, c) for c in chips], "index": chips,
            "node": _of_node(topo, topo.chip_node[slices.chips]), **_health("chip", slices),
            "effective_flops": floats(slices.chip_effective), "sample_t_s": floats(slices.chip_t_s),
            **figure["chip"]}),
        "links": columns(len(links), {
            "id": [link_id(topo, i) for i in links], "index": links,
            "kind": [LINK_KIND_NAMES[k] for k in topo.link_kind[slices.links].tolist()],
            "chip_a": [chip_id(topo, c) for c in topo.link_a[slices.links].tolist()],
            "chip_b": [chip_id(topo, c) for c in topo.link_b[slices.links].tolist()],
            "node": _of_node(topo, topo.link_node[slices.links]), **_health("neuronlink", slices),
            **figure["neuronlink"]}),
        "ports": columns(len(ports), {
            "id": [efa_id(topo, p) for p in ports], "index": ports,
            "chip": [chip_id(topo, c) for c in topo.efa_chip[slices.ports].tolist()],
            "node": _of_node(topo, topo.efa_node[slices.ports]), **_health("efa", slices),
            **figure["efa"]}),
    }


def _of_node(topo: Topology, nodes: I64) -> list[str]:
    """Return the id of each entity's node (an UltraServer's parts: four nodes, named once each)."""
    named = {n: node_id(topo, n) for n in np.unique(nodes).tolist()}
    return [named[n] for n in nodes.tolist()]
