"""The exporter's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on
a small asyncio server.

The scrape body is rendered in a worker thread once per analysis tick
(``refresh``, called by the monitor after each analysis) and every scrape
is served the latest finished render: a scrape never waits for a render, so
its latency is the time to write the bytes, and the body is at most one tick
old.  Before the first refresh a scrape renders on demand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Health", "MetricsServer"]

log = structlog.get_logger("rainierd.exporter")

_MAX_REQUEST_BYTES: Final = 8_192
_REQUEST_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class Health:
    """A probe's verdict: ok, and a one-line reason."""

    ok: bool
    reason: str


class MetricsServer:
    """Serves the registry and the health probes on ``host:port``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str,
        port: int,
        generation: Callable[[], int],
        healthy: Callable[[], Health],
        ready: Callable[[], Health],
        extra: Callable[[], bytes] | None = None,
    ) -> None:
        self.registry = registry
        self.host, self.port = host, port
        self._generation, self._healthy, self._ready = generation, healthy, ready
        self._extra = extra
        self._cache: tuple[int, bytes] | None = None
        self._server: asyncio.Server | None = None
        self._render_lock = asyncio.Lock()
        self.renders = 0

    def _render(self) -> bytes:
        body = generate_latest(self.registry)
        return body + self._extra() if self._extra is not None else body

    async def refresh(self) -> None:
        """Render the current generation in a worker thread, unless it already is."""
        generation = self._generation()
        async with self._render_lock:
            if self._cache is None or self._cache[0] != generation:
                self._cache = (generation, await asyncio.to_thread(self._render))
                self.renders += 1

    async def metrics_body(self) -> bytes:
        """Return the latest rendered exposition text (rendering now if there is none)."""
        if self._cache is None:
            await self.refresh()
        assert self._cache is not None
        return self._cache[1]

    async def start(self) -> int:
        """Bind the listening socket and return its port.

        Raises OSError (address in use, permission) before any task starts.
        """
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics endpoint listening", url=f"http://{self.host}:{self.port}/metrics")
        return self.port

    async def serve_forever(self) -> None:
        """Serve until cancelled; ``start`` must have been awaited."""
        assert self._server is not None, "start() first"
        async with self._server:
            await self._server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status, ctype, body, head_only = await self._respond(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        try:
            writer.write(header if head_only else header + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _respond(self, head: bytes) -> tuple[str, str, bytes, bool]:
        if len(head) > _MAX_REQUEST_BYTES:
            return "431 Request Header Fields Too Large", "text/plain", b"request too large\n", False
        try:
            method, target, _version = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
        except (UnicodeDecodeError, ValueError):
            return "400 Bad Request", "text/plain", b"bad request line\n", False
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET or HEAD only\n", False
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, await self.metrics_body(), head_only
        if path in ("/healthz", "/readyz"):
            verdict = self._healthy() if path == "/healthz" else self._ready()
            status = "200 OK" if verdict.ok else "503 Service Unavailable"
            return status, "text/plain; charset=utf-8", f"{verdict.reason}\n".encode(), head_only
        if path == "/":
            page = b"rainierd exporter: /metrics /healthz /readyz\n"
            return "200 OK", "text/plain; charset=utf-8", page, head_only
        return "404 Not Found", "text/plain", b"not found\n", head_only
