"""``GET /api/v1/actions``: the advisories of the latest analysis as JSON
(docs/actions.md, "Where actions go"; the document is ``ActionsView.document``).

Served from the latest snapshot's frozen ``ActionsView``: a request never
waits for an analysis and never reads live state.  The JSON is built in a
worker thread once the answer holds more than a few advisories, so a large
answer (about 2 KB an advisory) costs the event loop nothing but the write.

Query parameters, each at most once: ``node`` (a hostname or ``n<id>``),
``state`` (pending, proposed, suppressed, expired) and ``limit`` (0 ..
``max_limit``; default ``default_limit``).  ``total`` counts every advisory
that matched, so a client knows when ``limit`` cut the answer.  Anything
else is 400 with a JSON error; 503 (JSON) before the first analysis, or
while no advisory policy has run.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import Callable
from typing import Final

from rainierd.actions import STATES, ActionsView
from rainierd.http.routes import Get, Reply
from rainierd.monitor import MonitorSnapshot

DEFAULT_LIMIT: Final = 1_000
MAX_LIMIT: Final = 10_000  # ~20 MB of JSON at most
_INLINE_MAX: Final = 32  # answers of at most this many advisories are built on the loop (well under 1 ms)
_NODE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", re.ASCII)
_PARAMS: Final = frozenset({"node", "state", "limit"})


class ActionsApi:
    """Answers ``/api/v1/actions?<query>`` from ``snapshot().actions``."""

    def __init__(self, snapshot: Callable[[], MonitorSnapshot | None], *, default_limit: int = DEFAULT_LIMIT,
                 max_limit: int = MAX_LIMIT) -> None:
        if not 0 <= default_limit <= max_limit:
            raise ValueError(f"default limit {default_limit} must be within 0 .. {max_limit}")
        self._snapshot = snapshot
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
            return "node= wants a hostname or n<id>"
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
        snap = self._snapshot()
        if snap is None or not snap.computed:
            return "503 Service Unavailable", _error("no telemetry analysed yet")
        view = snap.actions
        if view is None:
            return "503 Service Unavailable", _error("no advisories yet: the advisory policy has not run")
        if node is not None:
            node = _resolve(view, node)
        if (node is None and state is None and len(view.advisories) <= _INLINE_MAX) or limit <= _INLINE_MAX:
            return "200 OK", render(view, node=node, state=state, limit=limit)
        return "200 OK", await asyncio.to_thread(render, view, node=node, state=state, limit=limit)

    async def serve(self, get: Get) -> Reply:
        """Answer ``/api/v1/actions`` over HTTP (never gzipped: a node's answer is a few KB)."""
        status, body = await self.answer(get.query)
        return Reply(status, "application/json", body)


def _resolve(view: ActionsView, node: str) -> str:
    """Return the advisory's node name that ``node`` (a hostname or ``n<id>``) names (or ``node`` itself)."""
    if view.for_node(node) is not None or not node.startswith("n") or not node[1:].isdigit():
        return node
    node_id = int(node[1:])
    return next((a.node for a in view.advisories if a.node_id == node_id), node)


def render(view: ActionsView, *, node: str | None, state: str | None, limit: int) -> bytes:
    """Return the JSON body of ``view``'s document for one query."""
    return (json.dumps(view.document(node=node, state=state, limit=limit), separators=(",", ":")) + "\n").encode()


def _error(message: str) -> bytes:
    return (json.dumps({"error": message}) + "\n").encode()
