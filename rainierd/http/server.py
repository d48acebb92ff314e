"""The exporter's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on
a small asyncio server that anyone who can reach it cannot exhaust.

The scrape body is rendered in a worker thread once per analysis tick
(``refresh``, called by the monitor after each analysis) and every scrape
is served the latest finished render: a scrape never waits for a render, so
its latency is the time to write the bytes, and the body is at most one tick
old.  Before the first refresh a scrape renders on demand.

A scraper that accepts gzip (Prometheus always does) gets the render
compressed once, in the same worker thread, as soon as one such scraper has
been seen: at ``rainier`` the body shrinks about tenfold and no scrape pays
for the compression.  Connections are HTTP/1.1 keep-alive: Prometheus keeps
one per target, so a scrape costs no TCP (or TLS) handshake.

``/probe?target=u<id>`` and ``/probe/targets`` (exporter/drilldown.py) serve one
UltraServer's chips, links and ports on demand and the Prometheus HTTP
service discovery of the UltraServers worth probing.

``/api/v1/actions`` (exporter/actions_api.py) serves the latest analysis's
remediation advisories as JSON (docs/actions.md); the rest of ``/api/v1/``
(exporter/api/) the read API: fleet, sites, UltraServers, jobs, events
(docs/api.md).

With a web configuration (``webconfig``) it speaks TLS only, and with
basic-auth users every path, the probes included, wants a valid password
(``basicauth``).

Against a hostile client (docs/exporter-security.md):

- the server accepts connections itself, so a full process (EMFILE) is a
  counted accept error logged once per episode, after which accepting
  backs off briefly instead of spinning;
- it holds at most ``max_connections``, below the descriptor limit with
  descriptors kept back (``descriptors``); a connection holds no TLS state
  until its client speaks, and at most ``max_handshakes`` handshakes run
  at once; at the cap a new connection evicts one that has not
  authenticated, of the address holding the most (``_slots``);
- a connection that has not been served an authenticated request may idle
  ``unauthenticated_idle_s`` (handshake and first request included; again
  after a 401); only after one that authenticated does it keep the long
  ``_IDLE_TIMEOUT_S``;
- a head that could be framed two ways is refused with 400 and the
  connection closed (``_request``), counted and logged once per episode.

A failed handshake or a wrong password costs a closed connection or a 401,
never a log line per attempt.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import socket
import ssl
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

import structlog
from prometheus_client import CONTENT_TYPE_LATEST

from rainierd.api import ReadApi
from rainierd.api.actions import ActionsApi
from rainierd.http.basicauth import BasicAuth
from rainierd.http.descriptors import connection_budget
from rainierd.http.request import MAX_HEAD_BYTES, Rejection, Request, parse_head
from rainierd.http.slots import Slots, Standing
from rainierd.http.status import ServerCounters
from rainierd.http.webconfig import WebConfig
from rainierd.runtime.episodes import Episode
from rainierd.runtime.probes import Verdict

__all__ = ["MetricsServer", "Prober", "accepts_gzip"]

log = structlog.get_logger("rainierd.exporter")

# Longer than any sensible scrape interval (Prometheus's default is 1 m), so a
# scraper's connection lives from one scrape to the next.
_IDLE_TIMEOUT_S: Final = 130.0
_API_GZIP_MIN_BYTES: Final = 16_384  # smaller read-API answers go as they are (a thread hop costs more)
_GZIP_LEVEL: Final = 1  # at rainier: 1.03 MB in 31 ms; level 6 saves 13 % for 3x the CPU (92 ms)
_UNAUTHORIZED: Final = (("WWW-Authenticate", 'Basic realm="rainierd"'),)
DEFAULT_MAX_CONNECTIONS: Final = 256  # a TLS connection holds ~280 KiB: ~70 MiB at the cap
DEFAULT_MAX_HANDSHAKES: Final = 64
DEFAULT_UNAUTHENTICATED_IDLE_S: Final = 5.0
# After a failed accept (out of descriptors, memory or buffers), wait this long before the next, doubling up
# to the maximum: the listening socket stays readable, and retrying at once would spin a core.
_ACCEPT_BACKOFF_S: Final = 0.05
_ACCEPT_BACKOFF_MAX_S: Final = 1.0
# Closing a TLS connection waits this long at most for the client's close_notify.
_SHUTDOWN_TIMEOUT_S: Final = 2.0
# The longest a response may take to reach a client that reads slowly (13 MB at rainier, uncompressed).
_WRITE_TIMEOUT_S: Final = 30.0
# A peer that gave up between connect and accept: nothing went wrong on our side.
_PEER_GONE: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


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
    before anything else starts) and starts accepting, leaving closes it and
    every open connection.  With ``web`` it serves over TLS if ``web.tls`` is
    set and asks for basic auth if ``web`` has users; building the server
    loads the certificate, so it raises ConfigError if that fails.  With
    ``prober`` it also serves ``/probe`` and ``/probe/targets``, with
    ``actions`` ``/api/v1/actions``, with ``api`` the rest of ``/api/v1/``.  It counts
    into ``counters`` (``serverstatus``), a fresh one if none is given.
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
        actions: ActionsApi | None = None,
        api: ReadApi | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_handshakes: int = DEFAULT_MAX_HANDSHAKES,
        unauthenticated_idle_s: float = DEFAULT_UNAUTHENTICATED_IDLE_S,
        counters: ServerCounters | None = None,
    ) -> None:
        self._exposition = exposition
        self.host, self.port = host, port
        self._generation, self._healthy, self._ready = generation, healthy, ready
        self._prober = prober
        self._actions = actions
        self._api = api
        self._cache: _Render | None = None
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._closed: asyncio.Event | None = None
        self._render_lock = asyncio.Lock()
        self.renders = 0
        self.compressions = 0
        self._gzip_wanted = False  # set by the first scraper that accepts gzip
        self._ssl: ssl.SSLContext | None = None
        self.auth: BasicAuth | None = None
        if web is not None:
            self._ssl = web.tls.ssl_context() if web.tls is not None else None
            self.auth = BasicAuth(web.basic_auth_users) if web.basic_auth_users else None
        self.counters = counters if counters is not None else ServerCounters()
        if self.auth is not None:
            self.counters.auth = self.auth.results
            auth = self.auth
            self.counters.auth_waiting = lambda: auth.waiting
        self._max_connections, self._max_handshakes = max_connections, max_handshakes
        self._unauthenticated_idle_s = unauthenticated_idle_s
        self._slots = Slots(limit=max_connections, handshake_limit=max_handshakes, counters=self.counters)
        self._ids = itertools.count()
        self._accept_failing = Episode(log, "exporter cannot accept connections", ended="exporter accepting again")
        self._bad_heads = Episode(log, "exporter refused malformed requests")

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
        """Bind the listening sockets, start accepting and return the port.

        Raises OSError (address in use, permission) before any task starts.
        """
        budget = connection_budget(self._max_connections)
        if budget < self._max_connections:
            log.warning("exporter connection cap lowered to fit the descriptor limit",
                        max_connections=self._max_connections, lowered_to=budget)
        self._slots.limit = self.counters.max_connections = budget
        self._slots.handshake_limit = min(self._max_handshakes, budget)
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _name, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio does
                sock.bind((address[0], self.port, *address[2:]))  # port 0: the first picks, the others follow
                sock.listen(socket.SOMAXCONN)
                sock.setblocking(False)
                self.port = int(sock.getsockname()[1])
        except OSError:
            self._close_sockets()
            raise
        self._closed = asyncio.Event()
        self._acceptors = [asyncio.create_task(self._accept(sock), name="exporter-accept") for sock in self._sockets]
        scheme = "https" if self._ssl is not None else "http"
        log.info("metrics endpoint listening", url=f"{scheme}://{self.host}:{self.port}/metrics",
                 tls=self._ssl is not None, basic_auth=self.auth is not None, max_connections=budget,
                 max_handshakes=self._slots.handshake_limit)
        return self.port

    async def close(self) -> None:
        """Stop listening and end every open connection."""
        acceptors, self._acceptors = self._acceptors, []
        for task in acceptors:
            task.cancel()
        if acceptors:
            await asyncio.wait(acceptors)
        self._close_sockets()
        handlers = self._slots.tasks()
        for task in handlers:
            task.cancel()
        if handlers:
            await asyncio.wait(handlers, timeout=1.0)
        if self.auth is not None:
            self.auth.close()
        if self._closed is not None:
            self._closed.set()

    def _close_sockets(self) -> None:
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        """Serve until cancelled, then close; ``start`` must have been awaited."""
        assert self._closed is not None, "start() first"
        try:
            await self._closed.wait()
        finally:
            await self.close()

    async def _accept(self, sock: socket.socket) -> None:
        try:
            await self._accept_forever(sock)
        except Exception:
            # A defect here would stop the exporter answering without a word: say so, loudly, once.
            log.exception("exporter stopped accepting connections")
            raise

    async def _accept_forever(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = _ACCEPT_BACKOFF_S
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _PEER_GONE:
                    continue
                # EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection waits in the backlog; try again shortly.
                self.counters.accept_errors += 1
                self._accept_failing.occurred(error=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
                                              open_connections=len(self._slots))
                await asyncio.sleep(backoff_s)
                backoff_s = min(2 * backoff_s, _ACCEPT_BACKOFF_MAX_S)
                continue
            backoff_s = _ACCEPT_BACKOFF_S
            self._accept_failing.end()
            conn.setblocking(False)
            conn_id = next(self._ids)
            peer_host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            task = asyncio.create_task(self._serve(conn_id, conn, peer_host), name="exporter-connection")
            if not self._slots.admit(conn_id, task, peer_host):
                task.cancel()  # before it ever ran, so the socket is still ours to close
                conn.close()
            # Let the handler start (and take the socket over) before the next accept: an accept that is
            # ready returns without yielding, and a handler evicted before it ran could not close its socket.
            await asyncio.sleep(0)

    async def _open(self, sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Return the streams of an accepted socket, after its TLS handshake if the server speaks TLS."""
        loop = asyncio.get_running_loop()
        # The limit makes an oversized head a LimitOverrunError (answered 431), not a buffer of any size.
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        tls = self._ssl is not None
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock, ssl=self._ssl,
            ssl_handshake_timeout=self._unauthenticated_idle_s if tls else None,
            ssl_shutdown_timeout=_SHUTDOWN_TIMEOUT_S if tls else None,
        )
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _serve(self, conn: int, sock: socket.socket, peer: str) -> None:
        writer: asyncio.StreamWriter | None = None
        graceful = False
        owned = True  # the socket is ours to close until _open hands it to a transport (which then closes it)
        tls = self._ssl is not None
        # One allowance from accept for the first byte, the handshake and the first request together.
        deadline = asyncio.get_running_loop().time() + self._unauthenticated_idle_s
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    # Silent until the client speaks: no TLS state (~280 KiB) for a connection that never does.
                    await _readable(sock)
                    if _hung_up(sock):
                        return
                    await self._spoke(conn)
                    owned = False
                    reader, writer = await self._open(sock)
            except (OSError, TimeoutError):  # ssl.SSLError is an OSError; asyncio logs it only in debug mode
                self.counters.dropped["unauthenticated_idle" if owned else "handshake_failed"] += 1
                return
            if tls:
                self._slots.move(conn, Standing.UNAUTHENTICATED)
            graceful = await self._requests(conn, reader, writer, peer, deadline)
        finally:
            self._slots.release(conn)
            if writer is not None and graceful:
                writer.close()
            elif writer is not None:
                # Evicted, timed out or broken: no TLS close_notify to wait on (up to _SHUTDOWN_TIMEOUT_S with
                # the descriptor held), and no unsent bytes worth keeping.
                writer.transport.abort()
            elif owned:
                sock.close()

    async def _spoke(self, conn: int) -> None:
        """Move ``conn`` from silent to a TLS handshake (or, without TLS, to awaiting its request); if that
        evicts another handshake, return once the evicted handler has ended, so that its TLS state is gone
        before ours comes: a burst of first bytes on many connections holds the cap's worth, not the burst's."""
        evicted = self._slots.move(conn, Standing.HANDSHAKE if self._ssl is not None else Standing.UNAUTHENTICATED)
        if evicted is None:
            return
        try:
            await asyncio.wait([evicted])
        finally:
            # A finished handler holds its traceback, and with it its frames: kept here (in our frame, in a
            # traceback of ours) it would chain every evicted handler's TLS state to the living ones.
            del evicted

    async def _requests(self, conn: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        peer: str, deadline: float) -> bool:
        """Serve requests until the connection ends (the first head due by ``deadline``, loop time); return
        whether it ended in good order (the last response sent, or the client closed), so that it may be
        closed gracefully rather than aborted."""
        loop = asyncio.get_running_loop()
        authenticated = False
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                head = b"x" * (MAX_HEAD_BYTES + 1)  # answered 431 below
            except TimeoutError:
                if not authenticated:
                    self.counters.dropped["unauthenticated_idle"] += 1
                return False
            except asyncio.IncompleteReadError:
                return True
            except OSError:
                return False
            if authenticated:
                self._slots.move(conn, Standing.BUSY)
            response, keep_alive, authenticated = await self._respond(head, peer)
            if authenticated:
                self._slots.move(conn, Standing.BUSY)
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
                async with asyncio.timeout(_WRITE_TIMEOUT_S):  # a client that never reads holds no slot for ever
                    await writer.drain()
            except (OSError, TimeoutError):
                return False
            if not keep_alive:
                return True
            # A connection's standing is that of its last request: refused, it is evictable again.
            self._slots.move(conn, Standing.IDLE if authenticated else Standing.UNAUTHENTICATED)
            deadline = loop.time() + (_IDLE_TIMEOUT_S if authenticated else self._unauthenticated_idle_s)

    async def _respond(self, head: bytes, peer: str) -> tuple[_Response, bool, bool]:
        """Return the response to one request head, whether the connection may carry another, and whether
        the request authenticated (or needed no authentication)."""
        request = parse_head(head)
        if isinstance(request, Rejection):
            self.counters.bad_requests[request.reason] += 1
            self._bad_heads.occurred(reason=request.reason, peer=peer)
            return _Response(request.status, "text/plain", request.message), False, False
        return await self._answer(request, peer)

    async def _answer(self, request: Request, peer: str) -> tuple[_Response, bool, bool]:
        method, headers = request.method, request.headers
        if self.auth is not None and not await self.auth.allows(headers.get(b"authorization"), peer=peer):
            unauthorized = _Response("401 Unauthorized", "text/plain", b"unauthorized\n", method == "HEAD",
                                     _UNAUTHORIZED)
            return unauthorized, request.keep_alive, False
        if method not in ("GET", "HEAD"):
            # Whatever body it sent would be read as the next request: close instead.
            return _Response("405 Method Not Allowed", "text/plain", b"GET or HEAD only\n"), False, True
        path, _, query = request.target.partition("?")
        response = await self._route(path, query, method == "HEAD", accepts_gzip(headers.get(b"accept-encoding")))
        return response, request.keep_alive, True

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
        if self._actions is not None and path == "/api/v1/actions":
            status, body = await self._actions.answer(query)
            return _Response(status, "application/json", body, head_only)
        if self._api is not None and (path == "/api/v1" or path.startswith("/api/v1/")):
            status, body = await self._api.answer(path, query)
            # A page of every UltraServer is ~0.6-3.4 MB at rainier; level 1 in a worker thread (zlib lets go of
            # the GIL) shrinks it about sevenfold for a client that follows the fleet over a network.
            gzipped = gzip and len(body) >= _API_GZIP_MIN_BYTES
            if gzipped:
                body = await asyncio.to_thread(_gzip, body)
            encoding = (("Content-Encoding", "gzip"),) if gzipped else ()
            return _Response(status, "application/json", body, head_only, (*encoding, ("Vary", "Accept-Encoding")))
        if path == "/":
            routes = " /probe?target=u<id> /probe/targets" if self._prober is not None else ""
            routes += " /api/v1/actions" if self._actions is not None else ""
            routes += " /api/v1/" if self._api is not None else ""
            page = f"rainierd exporter: /metrics /healthz /readyz{routes}\n".encode()
            return _Response("200 OK", "text/plain; charset=utf-8", page, head_only)
        return _Response("404 Not Found", "text/plain", b"not found\n", head_only)


async def _readable(sock: socket.socket) -> None:
    """Return once ``sock`` has bytes to read (or its peer closed it)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def _hung_up(sock: socket.socket) -> bool:
    """Return whether the client of a readable socket has closed it without sending anything."""
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


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
