"""``/metrics`` as a route of the HTTP server: the exposition rendered once
per generation, off the event loop, and served from that render.

The body is rendered in a worker thread after each analysis tick
(``refresh``, called by the monitor after each analysis) while scrapes take
each render, so a scraper as fast as the ticks never waits for one.  A
render nobody scraped is not followed by another: at ``rainier`` a render
costs ~0.13 s of CPU (140,000 per-UltraServer series), and a Prometheus
scraping every 15 s at a 1 s tick took one of fifteen, while the monitor
rendered every tick (a sixth of its core, beside an analysis that needs
it).  A scrape that finds the body older than the latest analysis renders
it then, in the worker thread, and waits for that one render: what a scrape
sees is never older than the last analysis.  Before the first refresh a
scrape renders on demand.

A scraper that accepts gzip (Prometheus always does) gets the render
compressed once, in the same worker thread, as soon as one such scraper has
been seen: at ``rainier`` the body shrinks about tenfold and no scrape pays
for the compression.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST

from rainierd.http.routes import Get, Reply, gzip_body, verdict_route
from rainierd.http.server import HttpServer
from rainierd.runtime import Verdict

_GZIPPED: Final = (("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding"))
_PLAIN: Final = (("Vary", "Accept-Encoding"),)


@dataclass(frozen=True, slots=True)
class _Render:
    generation: int
    body: bytes
    gzipped: bytes | None


class MetricsRoute:
    """Serves ``render()`` (an exporter's exposition), rendered again only when ``generation()`` has moved."""

    def __init__(self, render: Callable[[], bytes], *, generation: Callable[[], int]) -> None:
        self._exposition, self._generation = render, generation
        self._cache: _Render | None = None
        self._lock = asyncio.Lock()
        self._gzip_wanted = False  # set by the first scraper that accepts gzip
        self._scraped = False  # a scrape has taken the latest render
        self.renders = 0
        self.compressions = 0

    def _render(self, gzip: bool) -> tuple[bytes, bytes | None]:
        body = self._exposition()
        return body, gzip_body(body) if gzip else None

    async def refresh(self) -> None:
        """Render the current generation in a worker thread (and gzip it once a scraper has asked for gzip),
        unless it already is, or a render is there that no scrape has taken (the next scrape renders)."""
        if self._cache is None or self._scraped:
            await self._render_current()

    async def _render_current(self) -> None:
        generation = self._generation()
        async with self._lock:
            if self._cache is None or self._cache.generation != generation:
                gzip = self._gzip_wanted
                body, gzipped = await asyncio.to_thread(self._render, gzip)
                self._cache = _Render(generation, body, gzipped)
                self._scraped = False
                self.renders += 1
                self.compressions += gzip

    async def body(self, *, gzip: bool = False) -> bytes:
        """Return the exposition text of the latest generation, gzipped if ``gzip`` (rendering or compressing
        now if no render of it is there yet)."""
        if gzip and not self._gzip_wanted:
            self._gzip_wanted = True
        if self._cache is None or self._cache.generation != self._generation():
            await self._render_current()
        assert self._cache is not None
        self._scraped = True
        if not gzip:
            return self._cache.body
        if self._cache.gzipped is None:
            async with self._lock:
                cache = self._cache
                if cache.gzipped is None:
                    self._cache = cache = _Render(cache.generation, cache.body,
                                                  await asyncio.to_thread(gzip_body, cache.body))
                    self.compressions += 1
        assert self._cache.gzipped is not None
        return self._cache.gzipped

    async def __call__(self, get: Get) -> Reply:
        """Return the scrape: the latest render, gzipped if ``get`` accepts gzip."""
        body = await self.body(gzip=get.accepts_gzip)
        return Reply("200 OK", CONTENT_TYPE_LATEST, body, _GZIPPED if get.accepts_gzip else _PLAIN)


def route_metrics_and_probes(server: HttpServer, render: Callable[[], bytes], *, generation: Callable[[], int],
                             healthy: Callable[[], Verdict], ready: Callable[[], Verdict]) -> MetricsRoute:
    """Route ``/metrics`` (``render``, rendered again when ``generation`` moves), ``/healthz`` and ``/readyz``
    (``healthy``'s and ``ready``'s verdicts) on ``server``, what every role with metrics serves; return the
    metrics route, whose ``refresh`` the role calls when its figures have moved."""
    metrics = MetricsRoute(render, generation=generation)
    server.route("/metrics", metrics)
    server.route("/healthz", verdict_route(healthy))
    server.route("/readyz", verdict_route(ready))
    return metrics
