"""The exporter's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on
a small asyncio server.

The scrape body is rendered in a worker thread once per analysis tick
(``refresh``, called by the monitor after each analysis) and every scrape
is served the latest finished render: a scrape never waits for a render, so
its latency is the time to write the bytes, and the body is at most one tick
old.  Before the first refresh a scrape renders on demand.

With a web configuration (``webconfig``) it speaks TLS only, and with
basic-auth users every path, the probes included, wants a valid password
(``basicauth``).  A failed handshake or a wrong password costs a closed
connection or a 401, never a log line per attempt.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from rainierd.exporter.basicauth import BasicAuth
from rainierd.exporter.webconfig import WebConfig

__all__ = ["Health", "MetricsServer"]

log = structlog.get_logger("rainierd.exporter")

_MAX_REQUEST_BYTES: Final = 8_192
_REQUEST_TIMEOUT_S: Final = 5.0
_UNAUTHORIZED: Final = (("WWW-Authenticate", 'Basic realm="rainierd"'),)


@dataclass(frozen=True, slots=True)
class Health:
    """A probe's verdict: ok, and a one-line reason."""

    ok: bool
    reason: str


class _Response(NamedTuple):
    status: str
    content_type: str
    body: bytes
    head_only: bool = False
    headers: tuple[tuple[str, str], ...] = ()


class MetricsServer:
    """Serves the registry and the health probes on ``host:port``.

    With ``web`` it serves over TLS if ``web.tls`` is set and asks for basic
    auth if ``web`` has users; building the server loads the certificate, so
    it raises ConfigError if that fails.
    """

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
        web: WebConfig | None = None,
    ) -> None:
        self.registry = registry
        self.host, self.port = host, port
        self._generation, self._healthy, self._ready = generation, healthy, ready
        self._extra = extra
        self._cache: tuple[int, bytes] | None = None
        self._server: asyncio.Server | None = None
        self._render_lock = asyncio.Lock()
        self.renders = 0
        self._ssl: ssl.SSLContext | None = None
        self.auth: BasicAuth | None = None
        if web is not None:
            self._ssl = web.tls.ssl_context() if web.tls is not None else None
            self.auth = BasicAuth(web.basic_auth_users) if web.basic_auth_users else None

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
        # A client that stalls its handshake is dropped like one that stalls its request.
        handshake_timeout = _REQUEST_TIMEOUT_S if self._ssl is not None else None
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, ssl=self._ssl, ssl_handshake_timeout=handshake_timeout,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        scheme = "https" if self._ssl is not None else "http"
        log.info("metrics endpoint listening", url=f"{scheme}://{self.host}:{self.port}/metrics",
                 tls=self._ssl is not None, basic_auth=self.auth is not None)
        return self.port

    async def serve_forever(self) -> None:
        """Serve until cancelled; ``start`` must have been awaited."""
        assert self._server is not None, "start() first"
        async with self._server:
            await self._server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # OSError covers a peer that resets and, under TLS, one that breaks the TLS stream.
        # A handshake that fails never gets here: asyncio closes it, logging only in debug mode.
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        response = await self._respond(head)
        extra = "".join(f"{name}: {value}\r\n" for name, value in response.headers)
        header = (
            f"HTTP/1.1 {response.status}\r\nContent-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n{extra}Connection: close\r\n\r\n"
        ).encode()
        try:
            writer.write(header if response.head_only else header + response.body)
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _respond(self, head: bytes) -> _Response:
        if len(head) > _MAX_REQUEST_BYTES:
            return _Response("431 Request Header Fields Too Large", "text/plain", b"request too large\n")
        lines = head.split(b"\r\n")
        try:
            method, target, _version = lines[0].decode("ascii").split(" ", 2)
        except (UnicodeDecodeError, ValueError):
            return _Response("400 Bad Request", "text/plain", b"bad request line\n")
        if self.auth is not None and not await self.auth.allows(_header(lines, b"authorization")):
            return _Response("401 Unauthorized", "text/plain", b"unauthorized\n", method == "HEAD", _UNAUTHORIZED)
        if method not in ("GET", "HEAD"):
            return _Response("405 Method Not Allowed", "text/plain", b"GET or HEAD only\n")
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if path == "/metrics":
            return _Response("200 OK", CONTENT_TYPE_LATEST, await self.metrics_body(), head_only)
        if path in ("/healthz", "/readyz"):
            verdict = self._healthy() if path == "/healthz" else self._ready()
            status = "200 OK" if verdict.ok else "503 Service Unavailable"
            return _Response(status, "text/plain; charset=utf-8", f"{verdict.reason}\n".encode(), head_only)
        if path == "/":
            page = b"rainierd exporter: /metrics /healthz /readyz\n"
            return _Response("200 OK", "text/plain; charset=utf-8", page, head_only)
        return _Response("404 Not Found", "text/plain", b"not found\n", head_only)


def _header(lines: list[bytes], name: bytes) -> bytes | None:
    """Return the value of the first header ``name`` (lower case) among a request's lines, or None."""
    for line in lines[1:]:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip()
    return None
