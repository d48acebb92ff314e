"""rainierd's HTTP/1.1 server: the routes a role registers (``routes``), on
a small asyncio server that anyone who can reach it cannot exhaust.

It knows none of its applications: a role registers each path it serves
(``route``: ``/metrics``, ``/healthz``, ``/readyz``, ``/probe``,
``/api/v1/...``) and the server answers everything else itself (``/``, 404,
405, 401, 400).  Connections are HTTP/1.1 keep-alive: Prometheus keeps one
per target, so a scrape costs no TCP (or TLS) handshake.

With a web configuration (``webconfig``) it speaks TLS only, and with
basic-auth users every path wants a valid password (``basicauth``).

Against a hostile client (docs/exporter-security.md):

- the server accepts connections itself, so a full process (EMFILE) is a
  counted accept error logged once per episode, after which accepting
  backs off briefly instead of spinning;
- it holds at most ``max_connections``, below the descriptor limit with
  descriptors kept back (``descriptors``); a connection holds no TLS state
  until its client speaks, and at most ``max_handshakes`` handshakes run
  at once; at the cap a new connection evicts one that has not
  authenticated, of the address holding the most (``slots``);
- a connection that has not been served an authenticated request may idle
  ``unauthenticated_idle_s`` (handshake and first request included; again
  after a 401); only after one that authenticated does it keep the long
  ``_IDLE_TIMEOUT_S``;
- a head that could be framed two ways is refused with 400 and the
  connection closed (``request``), counted and logged once per episode.

A failed handshake or a wrong password costs a closed connection or a 401,
never a log line per attempt.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import socket
import ssl
from dataclasses import dataclass
from typing import Final

import structlog

from rainierd.http.basicauth import BasicAuth
from rainierd.http.config import HttpConfig
from rainierd.http.descriptors import connection_budget
from rainierd.http.request import MAX_HEAD_BYTES, Rejection, Request, accepts_gzip, parse_head
from rainierd.http.routes import Get, Handler, Reply, Routes
from rainierd.http.slots import Slots, Standing
from rainierd.http.status import ServerCounters
from rainierd.runtime import Episode

log = structlog.get_logger("rainierd.exporter")

# Longer than any sensible scrape interval (Prometheus's default is 1 m), so a
# scraper's connection lives from one scrape to the next.
_IDLE_TIMEOUT_S: Final = 130.0
_UNAUTHORIZED: Final = (("WWW-Authenticate", 'Basic realm="rainierd"'),)
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


class HttpServer:
    """Serves the routes registered on it (``route``) as ``config`` says.

    An async context manager: entering binds the socket (raising OSError
    before anything else starts) and starts accepting, leaving closes it and
    every open connection.  Building the server loads the TLS certificate
    of ``config.web``, so it raises ConfigError if that fails.  It counts
    into ``counters`` (``status``), a fresh one if none is given.
    """

    def __init__(self, config: HttpConfig, *, counters: ServerCounters | None = None) -> None:
        self.config = config
        self.port = config.port  # the bound port once started
        self._routes = Routes()
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        web = config.web
        self._ssl: ssl.SSLContext | None = web.tls.ssl_context() if web is not None and web.tls is not None else None
        self.auth = BasicAuth(web.basic_auth_users) if web is not None and web.basic_auth_users else None
        self.counters = counters if counters is not None else ServerCounters()
        if self.auth is not None:
            self.counters.auth = self.auth.results
            auth = self.auth
            self.counters.auth_waiting = lambda: auth.waiting
        self._slots = Slots(limit=config.max_connections, handshake_limit=config.max_handshakes,
                            counters=self.counters)
        self._ids = itertools.count()
        # Accepted sockets whose handler has not run yet: a handler cancelled before its first step never enters
        # its ``finally``, so the socket is closed by the task's done callback instead (``_unstarted_done``).
        self._unstarted: dict[int, socket.socket] = {}
        self._accept_failing = Episode(log, "exporter cannot accept connections", ended="exporter accepting again")
        self._bad_heads = Episode(log, "exporter refused malformed requests")

    def route(self, path: str, handler: Handler, *, shown: str | None = None) -> None:
        """Answer GET and HEAD of ``path`` (every path below it if it ends in ``/``) with ``handler``; ``/``
        lists it as ``shown`` (default the path).

        Raises ValueError if ``path`` is not absolute or already routed.
        """
        self._routes.add(path, handler, shown=shown)

    async def start(self) -> int:
        """Bind the listening sockets, start accepting and return the port.

        Raises OSError (address in use, permission) before any task starts.
        """
        config = self.config
        budget = connection_budget(config.max_connections)
        if budget < config.max_connections:
            log.warning("exporter connection cap lowered to fit the descriptor limit",
                        max_connections=config.max_connections, lowered_to=budget)
        self._slots.limit = self.counters.max_connections = budget
        self._slots.handshake_limit = min(config.max_handshakes, budget)
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(config.host or None, self.port, type=socket.SOCK_STREAM,
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
        self._acceptors = [asyncio.create_task(self._accept(sock), name="exporter-accept") for sock in self._sockets]
        scheme = "https" if self._ssl is not None else "http"
        # The operators' name for it, whatever it serves; the URL is of the role's first route (its /metrics).
        log.info("metrics endpoint listening", url=f"{scheme}://{config.host}:{self.port}{self._routes.first()}",
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

    def _close_sockets(self) -> None:
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()

    async def __aenter__(self) -> HttpServer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _accept(self, sock: socket.socket) -> None:
        try:
            await self._accept_forever(sock)
        except Exception:
            # A defect here would stop the exporter answering without a word: say so, loudly, once.
            log.exception("exporter stopped accepting connections")
            raise

    async def _accept_forever(self, sock: socket.socket) -> None:
        backoff_s = _ACCEPT_BACKOFF_S
        while True:
            # Wait until a connection is pending, then take it without awaiting: a task cancelled (by close())
            # as ``loop.sock_accept`` completes loses the accepted socket, left open with its client waiting on
            # a connection nobody serves (seen in the unit tier, 2026-12-07); here the only await comes before
            # anything is accepted.
            try:
                await _readable(sock)
                conn, peer = sock.accept()
            except BlockingIOError:
                continue  # the pending connection went away before it was taken
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
            self._unstarted[conn_id] = conn
            task = asyncio.create_task(self._serve(conn_id, conn, peer_host), name="exporter-connection")
            task.add_done_callback(functools.partial(self._unstarted_done, conn_id))
            if not self._slots.admit(conn_id, task, peer_host):
                task.cancel()  # before it ever ran, so the socket is still ours to close (the done callback)
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
            ssl_handshake_timeout=self.config.unauthenticated_idle_s if tls else None,
            ssl_shutdown_timeout=_SHUTDOWN_TIMEOUT_S if tls else None,
        )
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    def _unstarted_done(self, conn: int, _task: asyncio.Task[None]) -> None:
        """Close ``conn``'s socket if its handler ended without ever running (cancelled by eviction or by
        ``close()`` in the step between accept and its start): nothing else would, and the client would wait on
        a connection nobody serves (seen as a ResourceWarning and a client that timed out instead of being
        refused, 2026-12-07)."""
        sock = self._unstarted.pop(conn, None)
        if sock is not None:
            sock.close()

    async def _serve(self, conn: int, sock: socket.socket, peer: str) -> None:
        del self._unstarted[conn]  # from here on the handler's own ``finally`` closes the socket
        writer: asyncio.StreamWriter | None = None
        graceful = False
        owned = True  # the socket is ours to close until _open hands it to a transport (which then closes it)
        tls = self._ssl is not None
        # One allowance from accept for the first byte, the handshake and the first request together.
        deadline = asyncio.get_running_loop().time() + self.config.unauthenticated_idle_s
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
            outcome = await self._respond(head, peer)
            reply, keep_alive, authenticated = outcome.reply, outcome.keep_alive, outcome.authenticated
            if authenticated:
                self._slots.move(conn, Standing.BUSY)
            extra = "".join(f"{name}: {value}\r\n" for name, value in reply.headers)
            header = (
                f"HTTP/1.1 {reply.status}\r\nContent-Type: {reply.content_type}\r\n"
                f"Content-Length: {len(reply.body)}\r\n{extra}"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
            ).encode()
            try:
                writer.write(header)
                if not outcome.head_only:
                    writer.write(reply.body)  # not header + body: a 13 MB copy on the event loop
                async with asyncio.timeout(_WRITE_TIMEOUT_S):  # a client that never reads holds no slot for ever
                    await writer.drain()
            except (OSError, TimeoutError):
                return False
            if not keep_alive:
                return True
            # A connection's standing is that of its last request: refused, it is evictable again.
            self._slots.move(conn, Standing.IDLE if authenticated else Standing.UNAUTHENTICATED)
            deadline = loop.time() + (_IDLE_TIMEOUT_S if authenticated else self.config.unauthenticated_idle_s)

    async def _respond(self, head: bytes, peer: str) -> _Outcome:
        """Return the reply to one request head and what becomes of the connection."""
        request = parse_head(head)
        if isinstance(request, Rejection):
            self.counters.bad_requests[request.reason] += 1
            self._bad_heads.occurred(reason=request.reason, peer=peer)
            return _Outcome(Reply(request.status, "text/plain", request.message), keep_alive=False)
        return await self._answer(request, peer)

    async def _answer(self, request: Request, peer: str) -> _Outcome:
        method, headers = request.method, request.headers
        head_only = method == "HEAD"
        if self.auth is not None and not await self.auth.allows(headers.get(b"authorization"), peer=peer):
            unauthorized = Reply("401 Unauthorized", "text/plain", b"unauthorized\n", _UNAUTHORIZED)
            return _Outcome(unauthorized, keep_alive=request.keep_alive, head_only=head_only)
        if method not in ("GET", "HEAD"):
            # Whatever body it sent would be read as the next request: close instead.
            return _Outcome(Reply("405 Method Not Allowed", "text/plain", b"GET or HEAD only\n"), keep_alive=False,
                            authenticated=True)
        path, _, query = request.target.partition("?")
        reply = await self._routes.answer(Get(path, query, head_only, accepts_gzip(headers.get(b"accept-encoding"))))
        return _Outcome(reply, keep_alive=request.keep_alive, head_only=head_only, authenticated=True)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A request's reply, and what follows: whether only its head is sent, whether the connection may carry
    another request, and whether it authenticated (or needed no authentication)."""

    reply: Reply
    keep_alive: bool
    head_only: bool = False
    authenticated: bool = False


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
