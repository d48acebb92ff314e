"""Specification of the exporter's basic auth: bcrypt once per user, off the
event loop, and nothing to learn from a refusal."""

from __future__ import annotations

import asyncio
import time
from base64 import b64encode
from collections.abc import AsyncIterator

import bcrypt
import pytest

from rainierd.http.basicauth import BasicAuth
from rainierd.http.server import HttpServer
from rainierd.http.webconfig import WebConfig
from tests.serving import role_server

PASSWORD = b"correct horse"
# Cost 4, bcrypt's least, except where the cost itself is the point.
HASH = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(rounds=4))


def basic(user: bytes, password: bytes) -> bytes:
    return b"Basic " + b64encode(user + b":" + password)


class TestBasicAuth:
    async def test_right_password_costs_one_bcrypt_check_ever(self) -> None:
        """The first success is checked with bcrypt; every later request with it is answered from memory."""
        auth = BasicAuth([("prometheus", HASH)])
        assert [await auth.allows(basic(b"prometheus", PASSWORD)) for _ in range(5)] == [True] * 5
        assert auth.bcrypt_checks == 1

    async def test_concurrent_first_requests_share_one_check(self) -> None:
        """Scrapes arriving together before any success wait for one bcrypt check, not one each."""
        auth = BasicAuth([("prometheus", HASH)])
        assert await asyncio.gather(*(auth.allows(basic(b"prometheus", PASSWORD)) for _ in range(5))) == [True] * 5
        assert auth.bcrypt_checks == 1

    async def test_wrong_password_is_refused_and_remembered_as_refused(self) -> None:
        """A wrong password is refused after one bcrypt check, and at once (from the refusal memo) when it
        comes again; the right one still gets in."""
        auth = BasicAuth([("prometheus", HASH)])
        assert [await auth.allows(basic(b"prometheus", b"wrong")) for _ in range(3)] == [False] * 3
        assert await auth.allows(basic(b"prometheus", PASSWORD)) is True
        assert (auth.bcrypt_checks, auth.results["refused"], auth.results["refused_cached"]) == (2, 1, 2)

    async def test_each_user_has_their_own_password(self) -> None:
        """With two users each is admitted with their own password only."""
        other = bcrypt.hashpw(b"other", bcrypt.gensalt(rounds=4))
        auth = BasicAuth([("prometheus", HASH), ("grafana", other)])
        assert [
            await auth.allows(basic(b"prometheus", PASSWORD)), await auth.allows(basic(b"grafana", b"other")),
            await auth.allows(basic(b"grafana", PASSWORD)), await auth.allows(basic(b"prometheus", b"other")),
        ] == [True, True, False, False]

    async def test_unknown_user_costs_a_check_and_is_refused(self) -> None:
        """An unknown user is refused after a bcrypt check like a known one's (even with a valid password),
        so timing does not tell which usernames exist."""
        auth = BasicAuth([("prometheus", HASH)])
        assert await auth.allows(basic(b"mallory", PASSWORD)) is False
        assert await auth.allows(basic(b"prometheu", PASSWORD)) is False
        assert auth.bcrypt_checks == 2

    @pytest.mark.parametrize(
        "header",
        [
            None,
            b"",
            b"Bearer abc",
            b"Basic",
            b"Basic !!!not-base64!!!",
            b"Basic " + b64encode(b"no-colon"),
            basic(b"prometheus", PASSWORD + b"x" * 72),
        ],
    )
    async def test_malformed_header_is_refused_without_bcrypt(self, header: bytes | None) -> None:
        """No header, another scheme, bad base64, no colon or a password bcrypt would truncate: refused, unchecked."""
        auth = BasicAuth([("prometheus", HASH)])
        assert await auth.allows(header) is False
        assert auth.bcrypt_checks == 0

    async def test_scheme_is_case_insensitive(self) -> None:
        """`basic` is the same scheme as `Basic` (RFC 7617)."""
        auth = BasicAuth([("prometheus", HASH)])
        assert await auth.allows(b"basic " + b64encode(b"prometheus:" + PASSWORD)) is True

    async def test_bcrypt_runs_off_the_event_loop(self) -> None:
        """While a slow bcrypt check (cost 12) runs the event loop keeps ticking."""
        auth = BasicAuth([("prometheus", bcrypt.hashpw(PASSWORD, bcrypt.gensalt(rounds=12)))])
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        assert await auth.allows(basic(b"prometheus", PASSWORD)) is True
        took_s = time.monotonic() - started
        ticker.cancel()
        assert took_s > 0.1  # slow enough for the loop to have had to wait
        assert ticks >= took_s / 0.01 / 3


class TestServer:
    @pytest.fixture
    async def server(self) -> AsyncIterator[HttpServer]:
        web = WebConfig(tls=None, basic_auth_users=(("prometheus", HASH),))
        async with role_server(web=web) as server:
            yield server

    async def request(self, port: int, head: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + b"\r\nConnection: close\r\n\r\n")  # read to EOF: one request
        response = await reader.read()
        writer.close()
        return response

    async def test_every_path_and_method_wants_credentials(self, server: HttpServer) -> None:
        """Without credentials every path, the probes and unknown ones included, and every method answer 401
        with a Basic challenge for realm rainierd."""
        for head in (b"GET /metrics HTTP/1.1", b"GET /healthz HTTP/1.1", b"GET /readyz HTTP/1.1", b"GET / HTTP/1.1",
                     b"GET /nope HTTP/1.1", b"POST /metrics HTTP/1.1", b"HEAD /metrics HTTP/1.1"):
            response = await self.request(server.port, head)
            assert response.split(b"\r\n", 1)[0] == b"HTTP/1.1 401 Unauthorized", head
            assert b'\r\nWWW-Authenticate: Basic realm="rainierd"\r\n' in response, head

    async def test_credentials_open_every_path(self, server: HttpServer) -> None:
        """With the right credentials the routes answer as without auth; the header name is case-insensitive."""
        authorization = b"\r\nauthorization: " + basic(b"prometheus", PASSWORD)
        statuses = [
            (await self.request(server.port, head + authorization)).split(b"\r\n", 1)[0]
            for head in (b"GET /metrics HTTP/1.1", b"GET /readyz HTTP/1.1", b"GET /nope HTTP/1.1",
                         b"POST /metrics HTTP/1.1")
        ]
        assert statuses == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found",
                            b"HTTP/1.1 405 Method Not Allowed"]
        assert server.auth is not None
        assert server.auth.bcrypt_checks == 1
