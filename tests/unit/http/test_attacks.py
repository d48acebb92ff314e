"""Specification of the exporter under attack (issue 19), in process: the
request parser refuses heads that could be framed two ways, a request
smuggled after a body is never served, the connection cap evicts idle
unauthenticated connections and never an authenticated one, accept errors
are counted and logged once, and a flood of wrong passwords cannot delay a
right one.  The whole attack against a real ``rainierd run`` is
tests/integration/test_exporter_attacks.py."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import socket
import time
from asyncio import sslproto
from base64 import b64encode
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.timing import within
from harness.waits import wait_until
from rainierd.http import basicauth
from rainierd.http.basicauth import BasicAuth
from rainierd.http.request import Rejection, Request, parse_head
from rainierd.http.server import HttpServer
from rainierd.http.webconfig import TLSServerConfig, WebConfig
from tests.certs import make_pki
from tests.serving import role_server

PASSWORD = b"correct horse"
HASH_4 = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(rounds=4))
# Cost 10, what docs/exporter-security.md tells users to make: the delay bounds are about its ~60 ms.
HASH_10 = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(rounds=10))
OTHER_10 = bcrypt.hashpw(b"other secret", bcrypt.gensalt(rounds=10))


def basic(user: bytes, password: bytes) -> bytes:
    return b"Basic " + b64encode(user + b":" + password)


def responses(data: bytes) -> list[bytes]:
    """Return the status lines of the HTTP/1.1 responses in ``data`` (framed by their Content-Length)."""
    found = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data
        lines = head.split(b"\r\n")
        found.append(lines[0])
        length = next(int(line.split(b":", 1)[1]) for line in lines[1:] if line.lower().startswith(b"content-length"))
        data = rest[length:]
    return found


def make_server(**kwargs: Any) -> HttpServer:
    return role_server(lambda: b"# metrics\n", **kwargs)


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    async with make_server() as running:
        yield running


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on one connection, half-close it, and return everything the server sent before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        writer.write_eof()
        async with asyncio.timeout(within(5)):
            return await reader.read()
    finally:
        writer.close()


class TestRequestParser:
    @pytest.mark.parametrize(("head", "reason"), [
        (b"GET / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 27\r\n\r\n", "content_length"),
        (b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", "content_length"),
        (b"GET / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", "content_length"),
        (b"GET / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", "content_length"),
        (b"GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "content_length"),
        (b"GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n", "header"),
        (b"GET / HTTP/1.1\r\nX: a\r\n Content-Length: 5\r\n\r\n", "header"),
        (b"GET / HTTP/1.1\r\nX: a\nContent-Length: 5\r\n\r\n", "header"),
        (b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", "header"),
        (b"GET / HTTP/1.1\r\nAuthorization: Basic a\r\nAuthorization: Basic b\r\n\r\n", "duplicate_header"),
        (b"GET / HTTP/2.0\r\n\r\n", "request_line"),
        (b"GET  / HTTP/1.1\r\n\r\n", "request_line"),
        (b"\r\n\r\n", "request_line"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", "too_large"),
    ])
    def test_ambiguous_heads_are_refused(self, head: bytes, reason: str) -> None:
        """Two Content-Lengths (equal or not), a list, a sign, Content-Length beside Transfer-Encoding, space
        before a colon, a folded line, a bare LF, a NUL, two Authorizations, another HTTP version or an
        oversized head: each is refused (400, or 431 for the size) with its own counted reason."""
        result = parse_head(head)
        assert isinstance(result, Rejection)
        assert (result.status[:3], result.reason) == ("431" if reason == "too_large" else "400", reason)

    def test_a_plain_request_parses(self) -> None:
        """An ordinary scrape's head parses to its method, target, lower-case headers and keep-alive."""
        result = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n"
                            b"Accept-Encoding: br\r\nContent-Length: 0\r\n\r\n")
        assert result == Request("GET", "/metrics?x=1", "HTTP/1.1",
                                 {b"host": b"a", b"accept-encoding": b"gzip, br", b"content-length": b"0"}, False)
        assert result.keep_alive

    @given(st.binary(max_size=300))
    def test_arbitrary_bytes_never_crash_the_parser_or_give_a_5xx(self, raw: bytes) -> None:
        """Any bytes at all, as a head: a Request or a 4xx Rejection, never an exception or a 5xx."""
        result = parse_head(raw + b"\r\n\r\n")
        assert isinstance(result, Request) or result.status.startswith("4")

    @given(st.lists(st.sampled_from([
        b"Content-Length: 0", b"Content-Length: 26", b"content-length:26", b"Content-Length: 026",
        b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity", b"Connection: keep-alive",
        b"Connection: close", b"Content-Length : 26", b" Content-Length: 26", b"X: y", b"Content-Length: 9" * 3,
        b"Host: h",
    ]), max_size=4), st.sampled_from([b"HTTP/1.1", b"HTTP/1.0"]))
    def test_no_head_keeps_a_connection_alive_after_a_body(self, fields: list[bytes], version: bytes) -> None:
        """Whatever mix of framing fields a head carries, it is refused or it announces no body or its
        connection is not kept alive: a body can never be read as the next request."""
        result = parse_head(b"GET / " + version + b"\r\n" + b"".join(f + b"\r\n" for f in fields) + b"\r\n")
        if isinstance(result, Request):
            assert not (result.has_body and result.keep_alive)
            lengths = [f for f in fields if f.lower().startswith(b"content-length:")]
            assert result.has_body or not any(f.split(b":")[1].strip(b" 0") for f in lengths)


SMUGGLED = b"GET /smuggled HTTP/1.1\r\n\r\n"


class TestSmuggling:
    async def test_duplicate_content_length_is_400_and_the_body_is_not_a_request(self, server: HttpServer) -> None:
        """The issue's attack: Content-Length 0 then 26 and a request as the body gets one 400 and a closed
        connection, never a second response."""
        head = b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 26\r\n\r\n"
        assert responses(await exchange(server.port, head + SMUGGLED)) == [b"HTTP/1.1 400 Bad Request"]
        assert server.counters.bad_requests["content_length"] == 1

    async def test_a_bad_head_is_logged_once_per_episode(self, server: HttpServer) -> None:
        """Fifty refused heads make one JSON warning, not fifty."""
        with structlog.testing.capture_logs() as logs:
            for _ in range(50):
                await exchange(server.port, b"GET / HTTP/1.1\r\nContent-Length : 1\r\n\r\n")
        assert [e["event"] for e in logs] == ["exporter refused malformed requests"]
        assert server.counters.bad_requests["header"] == 50

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.sampled_from([
            b"Content-Length: 0", b"Content-Length: 26", b"Content-Length: 026", b"Transfer-Encoding: chunked",
            b"Connection: keep-alive", b"Content-Length : 26", b" Content-Length: 26", b"X: y",
        ]), max_size=4),
        st.sampled_from([b"GET", b"POST"]),
    )
    async def test_a_request_smuggled_after_any_head_is_never_served(self, fields: list[bytes], method: bytes) -> None:
        """Any head of framing fields, then a request in its would-be body: if the head announces a body, is
        refused or is a POST, exactly one response; only a head with no body gets the next request answered;
        never a 5xx (a server per example: hypothesis reruns the body, not the fixture)."""
        async with make_server() as server:
            head = method + b" /metrics HTTP/1.1\r\n" + b"".join(f + b"\r\n" for f in fields) + b"\r\n"
            found = responses(await exchange(server.port, head + SMUGGLED))
        benign = (set(fields) <= {b"Content-Length: 0", b"Connection: keep-alive", b"X: y"}
                  and fields.count(b"Content-Length: 0") <= 1 and method == b"GET")
        assert len(found) == (2 if benign else 1), (fields, found)
        assert all(not status.startswith(b"HTTP/1.1 5") for status in found)

    @settings(max_examples=80, deadline=None)
    @given(st.binary(max_size=200))
    async def test_arbitrary_heads_never_give_a_5xx_or_stop_the_server(self, raw: bytes) -> None:
        """Any bytes ending in a blank line get 4xx/2xx answers or a closed connection; the server still
        answers a plain request afterwards."""
        async with make_server() as server:
            found = responses(await exchange(server.port, raw + b"\r\n\r\n"))
            assert all(not status.startswith(b"HTTP/1.1 5") for status in found)
            ok = await exchange(server.port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert responses(ok) == [b"HTTP/1.1 200 OK"]


async def until_closed(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """Return whether the server closed the connection within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            return await reader.read() == b""
    except TimeoutError:
        return False


class TestConnectionCap:
    async def test_at_the_cap_idle_unauthenticated_connections_make_way_and_a_scraper_keeps_its_own(self) -> None:
        """With a cap of 8: a scraper's authenticated kept-alive connection survives 40 idle connections
        opened after it, the oldest idle ones are evicted for the newest, and a new scraper still gets in."""
        web = WebConfig(tls=None, basic_auth_users=(("prometheus", HASH_4),))
        async with make_server(web=web, max_connections=8) as server:
            scrape = (b"GET /metrics HTTP/1.1\r\nAuthorization: " + basic(b"prometheus", PASSWORD) + b"\r\n\r\n")
            s_reader, s_writer = await asyncio.open_connection("127.0.0.1", server.port)
            s_writer.write(scrape)
            async with asyncio.timeout(within(5)):
                assert (await s_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
                await s_reader.readexactly(len(b"# metrics\n"))
            idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(40)]
            closed = [await until_closed(reader, within(0.5)) for reader, _ in idle[:30]]
            assert closed == [True] * 30
            s_writer.write(scrape)
            async with asyncio.timeout(within(5)):
                assert (await s_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
                await s_reader.readexactly(len(b"# metrics\n"))
            fresh = await exchange(server.port, scrape.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            assert responses(fresh) == [b"HTTP/1.1 200 OK"]
            assert server.counters.dropped["evicted"] >= 33
            assert server.counters.connections["authenticated"] == 1
            for _reader, writer in [*idle, (s_reader, s_writer)]:
                writer.close()

    async def test_silent_connections_never_evict_one_that_speaks(self) -> None:
        """With a cap of 8: a client that has sent half its request keeps its slot while 40 connections that
        never send a byte come after it (they evict each other), and then gets its answer."""
        async with make_server(max_connections=8) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\n")
            await writer.drain()
            silent = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(40)]
            assert [await until_closed(r, within(0.5)) for r, _ in silent[:30]] == [True] * 30
            writer.write(b"Connection: close\r\n\r\n")
            async with asyncio.timeout(within(5)):
                assert responses(await reader.read()) == [b"HTTP/1.1 200 OK"]
            assert server.counters.dropped["evicted"] >= 33
            for _reader, other in [*silent, (reader, writer)]:
                other.close()

    async def test_connections_from_one_address_evict_only_their_own(self) -> None:
        """With a cap of 8: a client from 127.0.0.2 that has sent half its request keeps its slot while 40
        connections from 127.0.0.1 that have also spoken come after it (the address holding the most gives
        way first), then gets its answer."""
        async with make_server(max_connections=8) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.2", 0))
            writer.write(b"GET /healthz HTTP/1.1\r\n")
            await writer.drain()
            flood = []
            for _ in range(40):
                flood.append(await asyncio.open_connection("127.0.0.1", server.port))
                flood[-1][1].write(b"GET / HTTP/1.1\r\n")  # spoken, so not silent: a stalled request
            assert [await until_closed(r, within(0.5)) for r, _ in flood[:30]] == [True] * 30
            writer.write(b"Connection: close\r\n\r\n")
            async with asyncio.timeout(within(5)):
                assert responses(await reader.read()) == [b"HTTP/1.1 200 OK"]
            for _reader, other in [*flood, (reader, writer)]:
                other.close()

    async def test_evicted_handshakes_leave_no_tls_state_behind(self, tmp_path: Path) -> None:
        """600 TLS handshakes begun (a record header, then nothing) against a handshake cap of 64: 536 are
        evicted, and once they are gone at most 64 connections' TLS state is alive (~280 KiB each), not 600."""
        pki = make_pki(tmp_path)
        web = WebConfig(tls=TLSServerConfig(cert_file=pki.server_cert, key_file=pki.server_key),
                        basic_auth_users=())
        async with make_server(web=web) as server:
            sockets = []
            for _ in range(600):
                _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(b"\x16\x03\x01")
                sockets.append(writer)
            await wait_until(lambda: server.counters.dropped["handshake_evicted"] == 600 - 64, 10,
                             "536 handshakes evicted")
            gc.collect()
            alive = sum(isinstance(o, sslproto.SSLProtocol) for o in gc.get_objects())
            assert (alive, server.counters.connections["handshake"]) == (64, 64)
            for writer in sockets:
                writer.close()

    async def test_an_unauthenticated_connection_idles_briefly_even_after_a_401(self) -> None:
        """A connection that got a 401 is closed after the short unauthenticated idle time, not the 130 s
        an authenticated one may idle."""
        web = WebConfig(tls=None, basic_auth_users=(("prometheus", HASH_4),))
        async with make_server(web=web, unauthenticated_idle_s=0.2) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
            async with asyncio.timeout(within(5)):
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 401")
            await reader.readexactly(len(b"unauthorized\n"))
            assert await until_closed(reader, within(2))
            assert server.counters.dropped["unauthenticated_idle"] == 1
            writer.close()

    async def test_accept_errors_are_counted_logged_once_and_backed_off(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Out of descriptors (EMFILE) on four accepts in a row: four counted errors, one warning and one
        recovery line, no traceback, and the retries back off (0.05 s doubling) rather than spin; then the
        waiting connection is served."""
        real = socket.socket.accept
        failures = 4

        def accept(sock: socket.socket) -> tuple[socket.socket, Any]:
            nonlocal failures
            accepted = real(sock)
            if failures:
                failures -= 1
                accepted[0].close()  # as if accept(2) had failed: the client sees its connection dropped...
                raise OSError(errno.EMFILE, "Too many open files")
            return accepted

        monkeypatch.setattr(socket.socket, "accept", accept)  # the server's only accept(2) in this process
        with structlog.testing.capture_logs() as logs:
            async with make_server() as server:
                started = time.perf_counter()
                for _ in range(4):  # ...and tries again, as a scraper would
                    with contextlib.suppress(OSError, TimeoutError):
                        await exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
                ok = await exchange(server.port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
                took_s = time.perf_counter() - started
                errors = server.counters.accept_errors
        assert responses(ok) == [b"HTTP/1.1 200 OK"]
        assert errors == 4
        assert took_s >= 0.05 + 0.1 + 0.2 + 0.4  # it waited between failed accepts
        events = [e for e in logs if "accept" in e["event"]]
        assert [(e["event"], e["occurrences"]) for e in events] == [
            ("exporter cannot accept connections", 1), ("exporter accepting again", 3)]
        assert not any("exc_info" in e for e in logs)
        assert not [r for r in caplog.records if r.name == "asyncio"]


def concurrent(auth: BasicAuth, headers: list[bytes], peer: str) -> list[asyncio.Task[bool]]:
    return [asyncio.create_task(auth.allows(h, peer=peer)) for h in headers]


def wrong(n: int, tag: bytes = b"") -> list[bytes]:
    return [basic(b"prometheus", b"wrong-" + tag + str(i).encode()) for i in range(n)]


@pytest.fixture
def timed_checks(monkeypatch: pytest.MonkeyPatch) -> dict[bytes, float]:
    """Record how long bcrypt took for each password (the real check, timed where it runs), in the order
    the checks started."""
    took: dict[bytes, float] = {}
    real = basicauth._checkpw

    def checkpw(password: bytes, hashed: bytes) -> bool:
        took[password] = float("nan")  # started: its place in the order
        started = time.perf_counter()
        try:
            return real(password, hashed)
        finally:
            took[password] = time.perf_counter() - started

    monkeypatch.setattr(basicauth, "_checkpw", checkpw)
    return took


class TestPasswordFlood:
    async def test_300_wrong_passwords_from_its_address_delay_a_right_one_by_one_check_at_most(
        self, timed_checks: dict[bytes, float],
    ) -> None:
        """300 distinct wrong passwords from one address, then a right one not yet remembered from the same
        address: it waits only for the check already running (newest first), not behind the 300 (18 s of
        bcrypt): no other check starts before it, and its delay is within one check plus 100 ms."""
        auth = BasicAuth([("prometheus", HASH_10)])
        flood = concurrent(auth, wrong(300), "10.0.0.1")
        await asyncio.sleep(0)  # every flood check is queued
        started = time.perf_counter()
        async with asyncio.timeout(within(5)):
            assert await auth.allows(basic(b"prometheus", PASSWORD), peer="10.0.0.1") is True
        latency_s = time.perf_counter() - started
        assert list(timed_checks)[:2] == [b"wrong-0", PASSWORD]  # nothing of the flood's went ahead of it
        auth.close()
        assert not any(await asyncio.gather(*flood))
        running_s = timed_checks[b"wrong-0"]  # the one it waited for
        delay_s = latency_s - timed_checks[PASSWORD]
        print(f"\nsame address: latency {latency_s * 1e3:.0f} ms, own check {timed_checks[PASSWORD] * 1e3:.0f} ms, "
              f"the running one {running_s * 1e3:.0f} ms")
        assert delay_s <= running_s + within(0.1)
        assert auth.results["shed"] == 300 + 1 - 1 - 64  # all but the running one and the 64 newest waiting

    async def test_a_right_password_from_another_address_starts_at_once_while_the_flood_goes_on(
        self, timed_checks: dict[bytes, float],
    ) -> None:
        """A flood that keeps coming from one address (new wrong passwords while the right one is checked)
        cannot delay a right password from another address: it starts on the worker the flooder may not take,
        so its latency is its own check plus under 100 ms."""
        auth = BasicAuth([("prometheus", HASH_10), ("grafana", OTHER_10)])
        flood = concurrent(auth, wrong(100, b"a"), "10.0.0.1")
        await asyncio.sleep(0)
        started = time.perf_counter()
        right = asyncio.create_task(auth.allows(basic(b"grafana", b"other secret"), peer="10.0.0.2"))
        await asyncio.sleep(0)
        flood += concurrent(auth, wrong(100, b"b"), "10.0.0.1")
        async with asyncio.timeout(within(5)):
            assert await right is True
        latency_s = time.perf_counter() - started
        # It started second, beside the flooder's first check, not after it.
        assert list(timed_checks)[:2] == [b"wrong-a0", b"other secret"]
        auth.close()
        await asyncio.gather(*flood)
        print(f"\nanother address: latency {latency_s * 1e3:.0f} ms, own check "
              f"{timed_checks[b'other secret'] * 1e3:.0f} ms")
        assert latency_s - timed_checks[b"other secret"] <= within(0.1)

    async def test_a_remembered_password_waits_on_nothing_during_a_flood(self) -> None:
        """Once remembered, a scraper's password is answered without waiting while 300 wrong ones queue."""
        auth = BasicAuth([("prometheus", HASH_10)])
        assert await auth.allows(basic(b"prometheus", PASSWORD)) is True
        flood = concurrent(auth, wrong(300), "10.0.0.1")
        await asyncio.sleep(0)
        started = time.perf_counter()
        for _ in range(100):
            assert await auth.allows(basic(b"prometheus", PASSWORD), peer="10.0.0.1") is True
        assert time.perf_counter() - started <= within(0.1)
        auth.close()
        await asyncio.gather(*flood)

    async def test_waiting_checks_and_the_refusal_memo_are_bounded(self) -> None:
        """However many distinct wrong passwords come, at most ``max_waiting`` checks wait (the rest are shed,
        counted) and the refusal memo keeps only the most recent ``max_refused_memo``."""
        auth = BasicAuth([("prometheus", HASH_4)], max_waiting=4, max_refused_memo=3)
        flood = concurrent(auth, wrong(20), "10.0.0.1")
        await asyncio.sleep(0)
        assert auth.waiting == 4
        assert auth.results["shed"] == 20 - 4 - 1
        await asyncio.gather(*flood)
        assert auth.bcrypt_checks == 5  # the first, then the four that waited, newest first: 19, 18, 17, 16
        assert await auth.allows(wrong(20)[16]) is False  # refused last: remembered
        assert auth.bcrypt_checks == 5
        assert await auth.allows(wrong(20)[0]) is False  # refused first: forgotten, checked again
        assert auth.bcrypt_checks == 6

