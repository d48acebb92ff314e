"""The exporter's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on
a small asyncio server.

The scrape body is rendered in a worker thread once per analysis tick
(``refresh``, called by the monitor after each analysis) and every scrape
is served the latest finished render: a scrape never waits for a render, so
its latency is the time to write the bytes, and the body is at most one tick
old.  Before the first refresh a scrape renders on demand.

A scraper that accepts gzip (Prometheus always does) gets the render
compressed once, in the same worker thread, as soon as one such scraper has
been seen: at ``rainier`` the body shrinks about tenfold and no scrape pays
for the compression.  Connections are HTTP/1.1 keep-alive: Prometheus keeps
one per target, so a scrape costs no TCP (or TLS) handshake; an idle
connection is closed after ``_IDLE_TIMEOUT_S``.

``/probe?target=u<id>`` and ``/probe/targets`` (exporter/drilldown.py) serve one
UltraServer's chips, links and ports on demand and the Prometheus HTTP
service discovery of the UltraServers worth probing.

With a web configuration (``webconfig``) it speaks TLS only, and with
basic-auth users every path, the probes included, wants a valid password
(``basicauth``).  A failed handshake or a wrong password costs a closed
connection or a 401, never a log line per attempt.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

import structlog
from prometheus_client import CONTENT_TYPE_LATEST

from rainierd.exporter.basicauth import BasicAuth
from rainierd.exporter.webconfig import WebConfig
from rainierd.probes import Verdict

__all__ = ["MetricsServer", "Prober", "accepts_gzip"]

log = structlog.get_logger("rainierd.exporter")

_MAX_REQUEST_BYTES: Final = 8_192
_REQUEST_TIMEOUT_S: Final = 5.0
# Longer than any sensible scrape interval (Prometheus's default is 1 m), so a
# scraper's connection lives from one scrape to the next.
_IDLE_TIMEOUT_S: Final = 130.0
_GZIP_LEVEL: Final = 1  # at rainier: 1.03 MB in 31 ms; level 6 saves 13 % for 3x the CPU (92 ms)
_UNAUTHORIZED: Final = (("WWW-Authenticate", 'Basic realm="rainierd"'),)


class Prober(Protocol):
    """What serves ``/probe`` (exporter/drilldown.py): one UltraServer's entities, and the targets worth probing."""

    def probe(self, query: str) -> Awaitable[tuple[str, bytes]]:
        """Return (HTTP status line, exposition text or a one-line error) for the query string ``query``."""
        ...

    def targets(self) -> bytes:
        """Return the Prometheus HTTP service-discovery JSON of the UltraServers worth probing now."""
        ...


class _Response(NamedTuple):
    status: str
    content_type: str
    body: bytes
    head_only: bool = False
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _Render:
    generation: int
    body: bytes
    gzipped: bytes | None


def _gzip(body: bytes) -> bytes:
    # wbits 31: the gzip container (what Content-Encoding: gzip means), not raw zlib.
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
    return compressor.compress(body) + compressor.flush()


class MetricsServer:
    """Serves ``exposition`` (the exporter's render) and the health probes on ``host:port``.

    An async context manager: entering binds the socket (raising OSError
    before anything else starts), leaving closes it and every kept-alive
    connection.  With ``web`` it serves over TLS if ``web.tls`` is set and
    asks for basic auth if ``web`` has users; building the server loads the
    certificate, so it raises ConfigError if that fails.  With ``prober`` it
    also serves ``/probe`` and ``/probe/targets``.
    """

    def __init__(
        self,
        exposition: Callable[[], bytes],
        *,
        host: str,
        port: int,
        generation: Callable[[], int],
        healthy: Callable[[], Verdict],
        ready: Callable[[], Verdict],
        web: WebConfig | None = None,
        prober: Prober | None = None,
    ) -> None:
        self._exposition = exposition
        self.host, self.port = host, port
        self._generation, self._healthy, self._ready = generation, healthy, ready
        self._prober = prober
        self._cache: _Render | None = None
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.StreamWriter, asyncio.Task[None]] = {}  # open ones, with their handlers
        self._render_lock = asyncio.Lock()
        self.renders = 0
        self.compressions = 0
        self._gzip_wanted = False  # set by the first scraper that accepts gzip
        self._ssl: ssl.SSLContext | None = None
        self.auth: BasicAuth | None = None
        if web is not None:
            self._ssl = web.tls.ssl_context() if web.tls is not None else None
            self.auth = BasicAuth(web.basic_auth_users) if web.basic_auth_users else None

    def _render(self, gzip: bool) -> tuple[bytes, bytes | None]:
        body = self._exposition()
        return body, _gzip(body) if gzip else None

    async def refresh(self) -> None:
        """Render the current generation in a worker thread, unless it already is (and gzip it once a
        scraper has asked for gzip)."""
        generation = self._generation()
        async with self._render_lock:
            if self._cache is None or self._cache.generation != generation:
                gzip = self._gzip_wanted
                body, gzipped = await asyncio.to_thread(self._render, gzip)
                self._cache = _Render(generation, body, gzipped)
                self.renders += 1
                self.compressions += gzip

    async def metrics_body(self, *, gzip: bool = False) -> bytes:
        """Return the latest rendered exposition text, gzipped if ``gzip`` (rendering or compressing now if
        there is none yet)."""
        if gzip and not self._gzip_wanted:
            self._gzip_wanted = True
        if self._cache is None:
            await self.refresh()
        assert self._cache is not None
        if not gzip:
            return self._cache.body
        if self._cache.gzipped is None:
            async with self._render_lock:
                cache = self._cache
                if cache.gzipped is None:
                    self._cache = cache = _Render(cache.generation, cache.body,
                                                  await asyncio.to_thread(_gzip, cache.body))
                    self.compressions += 1
        assert self._cache.gzipped is not None
        return self._cache.gzipped

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

    async def close(self) -> None:
        """Stop listening and end every open connection."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await self._close_connections()
            await server.wait_closed()

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        """Serve until cancelled, then close; ``start`` must have been awaited."""
        assert self._server is not None, "start() first"
        try:
            await self._server.serve_forever()
        finally:
            await self.close()

    async def _close_connections(self) -> None:
        """End every open (kept-alive) connection, so no handler is left for the loop's shutdown to cancel.

        A handler cancelled while it waits for a request would be logged with
        a traceback by asyncio's stream callback (Python 3.11); closed, it
        reads end-of-stream and returns.
        """
        for writer in list(self._connections):
            writer.close()
        handlers = list(self._connections.values())
        if handlers:
            await asyncio.wait(handlers, timeout=1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # OSError covers a peer that resets and, under TLS, one that breaks the TLS stream.
        # A handshake that fails never gets here: asyncio closes it, logging only in debug mode.
        timeout_s = _REQUEST_TIMEOUT_S  # the first request must come promptly; later ones may idle
        task = asyncio.current_task()
        if task is not None:
            self._connections[writer] = task
        try:
            while True:
                try:
                    async with asyncio.timeout(timeout_s):
                        head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
                    return
                response, keep_alive = await self._respond(head)
                extra = "".join(f"{name}: {value}\r\n" for name, value in response.headers)
                header = (
                    f"HTTP/1.1 {response.status}\r\nContent-Type: {response.content_type}\r\n"
                    f"Content-Length: {len(response.body)}\r\n{extra}"
                    f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
                ).encode()
                try:
                    writer.write(header)
                    if not response.head_only:
                        writer.write(response.body)  # not header + body: a 13 MB copy on the event loop
                    await writer.drain()
                except OSError:
                    return
                if not keep_alive:
                    return
                timeout_s = _IDLE_TIMEOUT_S
        finally:
            self._connections.pop(writer, None)
            writer.close()

    async def _respond(self, head: bytes) -> tuple[_Response, bool]:
        """Return the response to one request head, and whether the connection may carry another."""
        if len(head) > _MAX_REQUEST_BYTES:
            return _Response("431 Request Header Fields Too Large", "text/plain", b"request too large\n"), False
        lines = head.split(b"\r\n")
        try:
            method, target, version = lines[0].decode("ascii").split(" ", 2)
        except (UnicodeDecodeError, ValueError):
            return _Response("400 Bad Request", "text/plain", b"bad request line\n"), False
        keep_alive = _keeps_alive(version, _header(lines, b"connection"), _header(lines, b"content-length"),
                                  _header(lines, b"transfer-encoding"))
        if self.auth is not None and not await self.auth.allows(_header(lines, b"authorization")):
            unauthorized = _Response("401 Unauthorized", "text/plain", b"unauthorized\n", method == "HEAD",
                                     _UNAUTHORIZED)
            return unauthorized, keep_alive
        if method not in ("GET", "HEAD"):
            # Whatever body it sent would be read as the next request: close instead.
            return _Response("405 Method Not Allowed", "text/plain", b"GET or HEAD only\n"), False
        path, _, query = target.partition("?")
        return await self._route(path, query, method == "HEAD", accepts_gzip(_header(lines, b"accept-encoding"))), \
            keep_alive

    async def _route(self, path: str, query: str, head_only: bool, gzip: bool) -> _Response:
        if path == "/metrics":
            body = await self.metrics_body(gzip=gzip)
            encoding = (("Content-Encoding", "gzip"),) if gzip else ()
            return _Response("200 OK", CONTENT_TYPE_LATEST, body, head_only,
                             (*encoding, ("Vary", "Accept-Encoding")))
        if path in ("/healthz", "/readyz"):
            verdict = self._healthy() if path == "/healthz" else self._ready()
            status = "200 OK" if verdict.ok else "503 Service Unavailable"
            return _Response(status, "text/plain; charset=utf-8", f"{verdict.reason}\n".encode(), head_only)
        if self._prober is not None and path == "/probe":
            status, body = await self._prober.probe(query)
            kind = CONTENT_TYPE_LATEST if status.startswith("200") else "text/plain; charset=utf-8"
            return _Response(status, kind, body, head_only)
        if self._prober is not None and path == "/probe/targets":
            return _Response("200 OK", "application/json", self._prober.targets(), head_only)
        if path == "/":
            routes = " /probe?target=u<id> /probe/targets" if self._prober is not None else ""
            page = f"rainierd exporter: /metrics /healthz /readyz{routes}\n".encode()
            return _Response("200 OK", "text/plain; charset=utf-8", page, head_only)
        return _Response("404 Not Found", "text/plain", b"not found\n", head_only)


def _keeps_alive(version: str, connection: bytes | None, length: bytes | None, transfer: bytes | None) -> bool:
    """Return whether a request lets the connection carry another: HTTP/1.1 unless it says close, HTTP/1.0
    only if it asks for keep-alive, and never after a request body (which is not read)."""
    if transfer is not None or (length is not None and length.strip() not in (b"0", b"")):
        return False
    tokens = {t.strip().lower() for t in (connection or b"").split(b",")}
    if version == "HTTP/1.1":
        return b"close" not in tokens
    return b"keep-alive" in tokens


def accepts_gzip(accept_encoding: bytes | None) -> bool:
    """Return whether an ``Accept-Encoding`` value admits gzip (``gzip`` or ``*`` without ``q=0``)."""
    if not accept_encoding:
        return False
    verdicts: dict[bytes, bool] = {}
    for item in accept_encoding.lower().split(b","):
        coding, *params = (part.strip() for part in item.split(b";"))
        refused = False
        for param in params:
            key, _, value = param.partition(b"=")
            if key.strip() == b"q":
                try:
                    refused = float(value) == 0
                except ValueError:
                    refused = True
        verdicts[coding] = not refused
    return verdicts.get(b"gzip", verdicts.get(b"x-gzip", verdicts.get(b"*", False)))


def _header(lines: list[bytes], name: bytes) -> bytes | None:
    """Return the value of the first header ``name`` (lower case) among a request's lines, or None."""
    for line in lines[1:]:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip()
    return None
