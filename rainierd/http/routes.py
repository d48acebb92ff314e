"""What the HTTP server serves, as a table the roles fill: a path (or a
prefix, ending in ``/``) and the handler that answers it.

The server knows none of its applications.  A handler takes the request as
a route sees it (``Get``: a GET or a HEAD, already authenticated) and returns
a ``Reply``; the server writes the head, and the body unless the request
was a HEAD.  Each role registers what it serves (``HttpServer.route``):
``/metrics`` (``rainierd.exporter.route``), the probes (``verdict_route``),
``/probe``, ``/api/v1/...`` (``rainierd.api``).

An exact path wins over a prefix, a longer prefix over a shorter; a prefix
also answers its own name without the slash (``/api/v1/`` answers
``/api/v1``).  ``/`` lists the routes, unless a role registers it; anything
else is 404.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

from rainierd.runtime import Verdict

API_GZIP_MIN_BYTES: Final = 16_384  # smaller answers go as they are (a thread hop costs more)
_GZIP_LEVEL: Final = 1  # at rainier: 1.03 MB in 31 ms; level 6 saves 13 % for 3x the CPU (92 ms)
_TEXT: Final = "text/plain; charset=utf-8"
_VARY: Final = ("Vary", "Accept-Encoding")
_GZIPPED: Final = ("Content-Encoding", "gzip")


@dataclass(frozen=True, slots=True)
class Get:
    """A request as a handler sees it: a GET or a HEAD whose credentials (if any were wanted) passed."""

    path: str  # the target before ``?``
    query: str  # the target after ``?`` ("" without one)
    head_only: bool  # a HEAD: the server sends the head alone, whatever the body
    accepts_gzip: bool  # its Accept-Encoding admits gzip


@dataclass(frozen=True, slots=True)
class Reply:
    """What a handler answers: the status line, the body's type, the body and any further header fields."""

    status: str  # e.g. "200 OK"
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


Handler: TypeAlias = Callable[[Get], Awaitable[Reply]]
"""Answers one route: any async callable of a ``Get`` (a function, a bound method, an object)."""

NOT_FOUND: Final = Reply("404 Not Found", "text/plain", b"not found\n")


@dataclass(frozen=True, slots=True)
class _Route:
    path: str
    handler: Handler
    shown: str  # how the index lists it


class Routes:
    """The paths and prefixes a server answers, in the order they were added."""

    def __init__(self) -> None:
        self._exact: dict[str, _Route] = {}
        self._prefixes: list[_Route] = []  # longest first
        self._order: list[_Route] = []

    def add(self, path: str, handler: Handler, *, shown: str | None = None) -> None:
        """Answer ``path`` (a prefix if it ends in ``/``) with ``handler``; the index lists it as ``shown``
        (default the path).

        Raises ValueError for a path that is not absolute or is taken.
        """
        if not path.startswith("/"):
            raise ValueError(f"a route is an absolute path, not {path!r}")
        if path in self._exact or any(route.path == path for route in self._prefixes):
            raise ValueError(f"route {path!r} is taken")
        route = _Route(path, handler, path if shown is None else shown)
        if path.endswith("/") and path != "/":
            self._prefixes.append(route)
            self._prefixes.sort(key=lambda r: -len(r.path))
        else:
            self._exact[path] = route
        self._order.append(route)

    def find(self, path: str) -> Handler | None:
        """Return the handler of ``path``: its exact route, else its longest prefix; None if none answers it."""
        if (route := self._exact.get(path)) is not None:
            return route.handler
        for route in self._prefixes:
            if path.startswith(route.path) or path == route.path[:-1]:
                return route.handler
        return None

    def index(self) -> bytes:
        """Return the page ``/`` serves: every route, in the order they were added."""
        return f"rainierd exporter: {' '.join(route.shown for route in self._order)}\n".encode()

    def first(self) -> str:
        """Return the first route's path (``/`` if there is none): where a role's log line points."""
        return self._order[0].path if self._order else "/"

    async def answer(self, get: Get) -> Reply:
        """Return the reply of the route ``get`` asks for: its handler's, the index, or 404."""
        handler = self.find(get.path)
        if handler is not None:
            return await handler(get)
        if get.path == "/":
            return Reply("200 OK", _TEXT, self.index())
        return NOT_FOUND


def verdict_route(judge: Callable[[], Verdict]) -> Handler:
    """Return a probe's handler (``/healthz``, ``/readyz``): 200 or 503 as ``judge()`` decides, its reason the
    body."""

    async def answer(_get: Get) -> Reply:
        verdict = judge()
        return Reply("200 OK" if verdict.ok else "503 Service Unavailable", _TEXT, f"{verdict.reason}\n".encode())

    return answer


def gzip_body(body: bytes) -> bytes:
    """Return ``body`` gzipped (the container ``Content-Encoding: gzip`` means), at the fast level."""
    # wbits 31: the gzip container, not raw zlib.
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
    return compressor.compress(body) + compressor.flush()


async def gzip_large(get: Get, reply: Reply, *, min_bytes: int = API_GZIP_MIN_BYTES) -> Reply:
    """Return ``reply`` gzipped in a worker thread (zlib lets go of the GIL) if ``get`` accepts gzip and the body
    holds at least ``min_bytes``, as it is otherwise; either way it varies with Accept-Encoding."""
    if get.accepts_gzip and len(reply.body) >= min_bytes:
        body = await asyncio.to_thread(gzip_body, reply.body)
        return Reply(reply.status, reply.content_type, body, (*reply.headers, _GZIPPED, _VARY))
    return Reply(reply.status, reply.content_type, reply.body, (*reply.headers, _VARY))
