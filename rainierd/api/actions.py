"""``GET /api/v1/actions``: the advisories of the latest analysis as JSON
(docs/actions.md, "Where actions go"; the document is ``ActionsView.document``).

Served from the latest snapshot's frozen ``ActionsView``: a request never
waits for an analysis and never reads live state.  The JSON is built in a
worker thread once the answer holds more than a few advisories, so a large
answer (about 2 KB an advisory) costs the event loop nothing but the write.

Query parameters, each at most once: ``node`` (its canonical id
``s0/u1/n4``, its inventory hostname, or ``n<index>``), ``state`` (pending,
proposed, suppressed, expired) and ``limit`` (0 .. ``max_limit``; default
``default_limit``).  ``total`` counts every advisory that matched, so a
client knows when ``limit`` cut the answer.  With ``node`` the answer also
names the node (``"node": {"id", "index", "ultraserver", "hostname"}``,
docs/ids.md), so ``rainierd node-check`` can say which node it judged; a
node the monitor's fleet does not hold (a hostname the inventory does not
know, another shard's node) is 404, never an empty answer that would read
as healthy.  Anything else is 400 with a JSON error; 503 (JSON) before the
first analysis, or while no advisory policy has run.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import Callable
from typing import Final

from rainierd.actions import STATES, ActionsView
from rainierd.fleet import Topology
from rainierd.fleet.ids import entity_fields, parse
from rainierd.http.routes import Get, Reply
from rainierd.monitor import MonitorSnapshot

DEFAULT_LIMIT: Final = 1_000
MAX_LIMIT: Final = 10_000  # ~20 MB of JSON at most
_INLINE_MAX: Final = 32  # answers of at most this many advisories are built on the loop (well under 1 ms)
_NODE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}", re.ASCII)
_PARAMS: Final = frozenset({"node", "state", "limit"})


class ActionsApi:
    """Answers ``/api/v1/actions?<query>`` from ``snapshot().actions``."""

    def __init__(self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *,
                 default_limit: int = DEFAULT_LIMIT, max_limit: int = MAX_LIMIT) -> None:
        if not 0 <= default_limit <= max_limit:
            raise ValueError(f"default limit {default_limit} must be within 0 .. {max_limit}")
        self._topology, self._snapshot = topology, snapshot
        hostnames = topology.names.hostnames
        self._hosts = {h: n for n, h in enumerate(hostnames) if h is not None and topology.node_present[n]}
        self.default_limit, self.max_limit = default_limit, max_limit

    def parse(self, query: str) -> tuple[str | None, str | None, int] | str:
        """Return (node, state, limit) of a query string, or the one-line reason it is refused."""
        try:
            pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query),
                                           max_num_fields=len(_PARAMS))
        except ValueError:
            return f"want at most node=, state= and limit=, each once; e.g. ?state=proposed&limit={self.default_limit}"
        names = [name for name, _ in pairs]
        if unknown := sorted(set(names) - _PARAMS):
            return f"unknown parameter {unknown[0][:40]!r}: want node=, state=, limit="
        if len(set(names)) != len(names):
            return "each parameter at most once"
        params = dict(pairs)
        node, state, limit_text = params.get("node"), params.get("state"), params.get("limit")
        if node is not None and _NODE.fullmatch(node) is None:
            return "node= wants a node id (s0/u1/n4), a hostname or n<index>"
        if state is not None and state not in STATES:
            return f"state= wants one of {', '.join(STATES)}"
        limit = self.default_limit
        if limit_text is not None:
            if not (limit_text.isascii() and limit_text.isdigit()) or len(limit_text) > 9:
                return f"limit= wants a whole number 0 .. {self.max_limit}"
            limit = int(limit_text)
            if limit > self.max_limit:
                return f"limit= is at most {self.max_limit}"
        return node, state, limit

    async def answer(self, query: str) -> tuple[str, bytes]:
        """Return (HTTP status line, JSON body) for ``/api/v1/actions?<query>``."""
        parsed = self.parse(query)
        if isinstance(parsed, str):
            return "400 Bad Request", _error(parsed)
        node, state, limit = parsed
        named: dict[str, str | int] | None = None
        if node is not None:  # known or not, whatever the monitor has analysed
            index = self.node_index(node)
            if index is None:
                return "404 Not Found", _error(f"no node {node[:200]!r} in this monitor's fleet (want its id, "
                                               "s0/u1/n4, its inventory hostname or n<index>)")
            named = entity_fields(self._topology, "node", index)
            node = str(named["id"])
        snap = self._snapshot()
        if snap is None or not snap.computed:
            return "503 Service Unavailable", _error("no telemetry analysed yet")
        view = snap.actions
        if view is None:
            return "503 Service Unavailable", _error("no advisories yet: the advisory policy has not run")
        if (node is None and state is None and len(view.advisories) <= _INLINE_MAX) or limit <= _INLINE_MAX:
            return "200 OK", render(view, node=node, state=state, limit=limit, named=named)
        return "200 OK", await asyncio.to_thread(render, view, node=node, state=state, limit=limit, named=named)

    def node_index(self, text: str) -> int | None:
        """Return the index of the node ``text`` names (its id, inventory hostname or ``n<index>``), or None when
        this monitor's fleet holds no such node."""
        if text in self._hosts:
            return self._hosts[text]
        topo = self._topology
        if text.startswith("n") and text[1:].isascii() and text[1:].isdigit() and len(text) < 12:
            index = int(text[1:])
            return index if index < topo.n_nodes and topo.node_present[index] else None
        try:
            kind, index = parse(topo, text)
        except ValueError:
            return None
        return index if kind == "node" else None

    async def serve(self, get: Get) -> Reply:
        """Answer ``/api/v1/actions`` over HTTP (never gzipped: a node's answer is a few KB)."""
        status, body = await self.answer(get.query)
        return Reply(status, "application/json", body)


def render(view: ActionsView, *, node: str | None, state: str | None, limit: int,
           named: dict[str, str | int] | None = None) -> bytes:
    """Return the JSON body of ``view``'s document for one query (``node``: a node id), naming the node asked
    about (``named``) when there is one."""
    document = view.document(node=node, state=state, limit=limit)
    if named is not None:
        document["node"] = named
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def _error(message: str) -> bytes:
    return (json.dumps({"error": message}) + "\n").encode()
