"""The monitor's JSON read API, ``/api/v1/…`` (docs/api.md, schema in
docs/api.schema.json): the fleet, its sites, UltraServers (a page, or one
with its nodes, chips, links and ports), jobs (a page, or one) and recent
events, a route of the HTTP server (``serve``), behind its TLS and basic auth.
``/api/v1/actions`` is ``actions``'s; the index links it.

Every answer but one UltraServer's detail is built from the latest frozen
``MonitorSnapshot`` alone, so a request never waits for an analysis and
never reads live state.  The per-UltraServer table behind the lists, sites
and jobs is built once per snapshot and kept; answers that grow with the
fleet (lists, sites, one UltraServer, one job, events) are built in a
worker thread, and encoded a hundred rows per encoder call (the C encoder
holds the GIL for a whole call), so the event loop pays little but the
write.  One UltraServer's detail
copies its entities' live figures under the monitor's analysis lock (as
``/probe`` reads them) and builds the JSON after releasing it.

Every list is bounded: ``limit`` (default 500, at most 10,000) with
``offset`` and ``total``; events come from a ring of at most
``RECENT_EVENTS``.  A query the API does not know is 400, an entity it
does not have 404, anything before the first analysis 503; every error is
JSON ``{"error": "…"}``.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from rainierd.api import events as _events
from rainierd.api import fleet as _fleet
from rainierd.api import jobs as _jobs
from rainierd.api import ultraservers as _ultraservers
from rainierd.api._common import MAX_LIMIT, Answer, ApiError, body, page, params, whole
from rainierd.api.ultraservers import UltraServerTable
from rainierd.core import MonitorCore
from rainierd.core.detect import STATE_NAMES
from rainierd.fleet import Topology
from rainierd.http.routes import Get, Reply, gzip_large
from rainierd.monitor import MonitorSnapshot

DEFAULT_EVENTS: Final = 100
_PREFIX: Final = "/api/v1"
_SITE_WANTS: Final = "site= wants s<id>, an id or the inventory's site name"


class ReadApi:
    """Answers ``/api/v1/<path>?<query>`` (every path but ``actions``) for one monitor.

    ``snapshot`` returns the latest snapshot; ``core`` and ``lock`` are the
    monitor's live state and the lock its analysis holds (one UltraServer's
    detail reads them); ``events`` returns the recent events, oldest first
    (``EventLog.recent``, a bounded deque; without it ``/events`` is 404).
    """

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *, core: MonitorCore,
        lock: asyncio.Lock, events: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
        max_limit: int = MAX_LIMIT, actions: bool = True,
    ) -> None:
        self._topo, self._snapshot, self._core, self._lock, self._events = topology, snapshot, core, lock, events
        self.max_limit, self._actions = max_limit, actions
        self._names = {name: u for u, name in enumerate(topology.names.ultraservers)}
        self._sites = {name: s for s, name in enumerate(topology.names.sites)}
        self._table: tuple[MonitorSnapshot, UltraServerTable] | None = None
        self.builds = 0  # tables built: one per snapshot that a table-reading request saw

    def table(self, snap: MonitorSnapshot) -> UltraServerTable:
        """Return the per-UltraServer table of ``snap``, built once (safe in a worker thread)."""
        cached = self._table
        if cached is not None and cached[0] is snap:
            return cached[1]
        table = UltraServerTable.of(self._topo, snap)
        self._table = (snap, table)
        self.builds += 1
        return table

    async def answer(self, path: str, query: str) -> Answer:
        """Return (HTTP status line, JSON body) for ``path`` (under ``/api/v1``) and its query string."""
        try:
            return "200 OK", await self._route(path.removeprefix(_PREFIX).rstrip("/"), query)
        except ApiError as error:
            return error.answer()

    async def serve(self, get: Get) -> Reply:
        """Answer ``/api/v1/...`` over HTTP: the JSON answer, gzipped when large and the client accepts gzip (a
        page of every UltraServer is ~0.6-3.4 MB at rainier, about sevenfold smaller gzipped)."""
        status, body = await self.answer(get.path, get.query)
        return await gzip_large(get, Reply(status, "application/json", body))

    def _computed(self) -> MonitorSnapshot:
        snap = self._snapshot()
        if snap is None or not snap.computed:
            raise ApiError("503 Service Unavailable", "no telemetry analysed yet")
        return snap

    async def _route(self, path: str, query: str) -> bytes:
        topo = self._topo
        if path == "":
            params(query, {})
            return body(self.index())
        if path == "/fleet":
            params(query, {})
            return body(_fleet.fleet(topo, self._computed()))
        if path == "/sites":
            params(query, {})
            snap = self._computed()
            return await _threaded(lambda: _fleet.sites(topo, self.table(snap), snap))
        if path == "/ultraservers":
            given = params(query, {"site": "", "sort": "", "order": "", "offset": "", "limit": "", "fields": ""})
            paging = page(given, _ultraservers.SORTS, default_sort="id", max_limit=self.max_limit)
            site, fields = self._site(given.get("site")), _ultraservers.wanted_fields(given.get("fields"))
            snap = self._computed()
            return await _threaded(lambda: _ultraservers.listing(topo, self.table(snap), snap, paging, site=site,
                                                                 fields=fields))
        if path.startswith("/ultraservers/"):
            params(query, {})
            us = _ultraservers.resolve(topo, urllib.parse.unquote(path.removeprefix("/ultraservers/")), self._names)
            snap, slices = await _ultraservers.copy_live(topo, self._core, self._lock, self._snapshot, us)
            return await _threaded(lambda: _ultraservers.detail(topo, self.table(snap), snap, slices, us))
        if path == "/jobs":
            given = params(query, {"sort": "", "order": "", "offset": "", "limit": ""})
            paging = page(given, _jobs.SORTS, default_sort="lost", max_limit=self.max_limit)
            snap = self._computed()
            return await _threaded(lambda: _jobs.listing(topo, snap, paging))
        if path.startswith("/jobs/"):
            params(query, {})
            job_id = urllib.parse.unquote(path.removeprefix("/jobs/"))
            snap = self._computed()
            return await _threaded(lambda: _jobs.job(topo, self.table(snap), snap, job_id))
        if path == "/events" and self._events is not None:
            given = params(query, {"limit": "", "entity": ""})
            recent = self._events()
            capacity = getattr(recent, "maxlen", None) or len(recent)
            limit = whole(given.get("limit"), "limit", default=min(DEFAULT_EVENTS, capacity), maximum=capacity)
            entity = given.get("entity")
            if entity is not None and entity not in STATE_NAMES:
                raise ApiError("400 Bad Request", f"entity= wants one of {', '.join(STATE_NAMES)}")
            latest = self._snapshot()
            announced = sum(latest.events.values()) if latest is not None else 0
            # Copied here: the loop appends to the ring, and a deque changed while a thread reads it raises.
            held = list(recent)
            return await _threaded(lambda: _events.events(held, limit=limit, entity=entity,
                                                          announced=announced, capacity=capacity))
        raise ApiError("404 Not Found", f"no such endpoint {(_PREFIX + path)[:200]!r}: see {_PREFIX}/")

    def _site(self, text: str | None) -> int | None:
        if text is None:
            return None
        if text in self._sites:
            return self._sites[text]
        digits = text.removeprefix("s")
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 9 or int(digits) >= self._topo.n_sites:
            raise ApiError("400 Bad Request", f"{_SITE_WANTS} (s0 .. s{self._topo.n_sites - 1})")
        return int(digits)

    def index(self) -> dict[str, Any]:
        """Return the index document: every endpoint with what it serves."""
        endpoints = {
            "fleet": (f"{_PREFIX}/fleet", "the fleet: throughput, loss by cause, chips, unhealthy counts, lag"),
            "sites": (f"{_PREFIX}/sites", "one row a site"),
            "ultraservers": (f"{_PREFIX}/ultraservers?site=&sort=&order=&offset=&limit=&fields=",
                             "a page of UltraServers: effective share, loss by cause, unhealthy counts"),
            "ultraserver": (f"{_PREFIX}/ultraservers/{{id}}", "one UltraServer's nodes, chips, links and ports"),
            "jobs": (f"{_PREFIX}/jobs?sort=&order=&offset=&limit=", "a page of jobs, the costliest first"),
            "job": (f"{_PREFIX}/jobs/{{id}}", "one job: its UltraServers, culprits, phase and loss"),
        }
        if self._events is not None:
            endpoints["events"] = (f"{_PREFIX}/events?limit=&entity=", "recent detection events, newest first")
        if self._actions:
            endpoints["actions"] = (f"{_PREFIX}/actions?node=&state=&limit=", "remediation advisories")
        return {"api": "rainierd/v1", "max_limit": self.max_limit, "endpoints": {
            name: {"href": href, "description": text} for name, (href, text) in endpoints.items()}}


async def _threaded(build: Callable[[], dict[str, Any]]) -> bytes:
    """Return ``build()``'s JSON body, built in a worker thread."""
    return await asyncio.to_thread(lambda: body(build()))
