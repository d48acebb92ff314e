"""Specification of the route table (rainierd/http/routes.py): which handler
answers a path, what ``/`` lists, the probes' handler, and when a reply
goes gzipped; and of how a server answers through it (HEAD, 404)."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from rainierd.http.config import HttpConfig
from rainierd.http.request import accepts_gzip
from rainierd.http.routes import API_GZIP_MIN_BYTES, Get, Handler, Reply, Routes, gzip_large, verdict_route
from rainierd.http.server import HttpServer
from rainierd.runtime.probes import Verdict


def get(path: str, *, query: str = "", head_only: bool = False, gzip_ok: bool = False) -> Get:
    return Get(path, query, head_only, gzip_ok)


def saying(text: str) -> Handler:
    """Return a handler whose reply's body is ``text`` and the path and query it was asked."""

    async def answer(asked: Get) -> Reply:
        return Reply("200 OK", "text/plain", f"{text} {asked.path} {asked.query}".encode())

    return answer


def table(*paths: str) -> Routes:
    routes = Routes()
    for path in paths:
        routes.add(path, saying(path))
    return routes


async def body(routes: Routes, path: str) -> bytes:
    return (await routes.answer(get(path, query="q=1"))).body


class TestRoutes:
    async def test_an_exact_path_beats_a_prefix_and_a_longer_prefix_a_shorter(self) -> None:
        """``/api/v1/actions`` is its own route beside the ``/api/v1/`` prefix, and ``/a/b/`` beside ``/a/``."""
        routes = table("/api/v1/", "/api/v1/actions", "/a/", "/a/b/")
        assert [await body(routes, path) for path in ("/api/v1/actions", "/api/v1/fleet", "/a/b/c", "/a/c")] == [
            b"/api/v1/actions /api/v1/actions q=1", b"/api/v1/ /api/v1/fleet q=1", b"/a/b/ /a/b/c q=1",
            b"/a/ /a/c q=1"]

    async def test_a_prefix_answers_its_own_name_without_the_slash(self) -> None:
        """``/api/v1/`` answers ``/api/v1`` (the read API's index), but not ``/api/v10``."""
        routes = table("/api/v1/")
        assert await body(routes, "/api/v1") == b"/api/v1/ /api/v1 q=1"
        assert (await routes.answer(get("/api/v10"))).status == "404 Not Found"

    async def test_an_exact_path_is_not_a_prefix(self) -> None:
        """``/metrics`` answers ``/metrics`` alone: ``/metrics/x`` and ``/metricsx`` are 404, as text."""
        routes = table("/metrics")
        for path in ("/metrics/x", "/metricsx", "/nope"):
            assert await routes.answer(get(path)) == Reply("404 Not Found", "text/plain", b"not found\n")

    async def test_the_index_lists_every_route_in_the_order_added(self) -> None:
        """``/`` lists the routes as they were added, each as shown; a role may route ``/`` itself."""
        routes = Routes()
        routes.add("/metrics", saying("m"))
        routes.add("/probe", saying("p"), shown="/probe?target=u<id>")
        routes.add("/api/v1/", saying("a"))
        assert await routes.answer(get("/")) == Reply(
            "200 OK", "text/plain; charset=utf-8", b"rainierd exporter: /metrics /probe?target=u<id> /api/v1/\n")
        routes.add("/", saying("root"))
        assert await body(routes, "/") == b"root / q=1"

    def test_a_path_is_routed_once_and_absolute(self) -> None:
        """A second route for a path, or a relative path, is refused."""
        routes = table("/metrics", "/api/")
        for path in ("/metrics", "/api/", "metrics"):
            with pytest.raises(ValueError, match=r"taken|absolute"):
                routes.add(path, saying("again"))


class TestVerdictRoute:
    @pytest.mark.parametrize(("verdict", "status"), [
        (Verdict(True, "ok"), "200 OK"), (Verdict(False, "mqtt not connected"), "503 Service Unavailable")])
    async def test_the_verdict_is_the_status_and_its_reason_the_body(self, verdict: Verdict, status: str) -> None:
        """A probe answers 200 or 503 as its judge decides when asked, the reason one line of text."""
        answer = verdict_route(lambda: verdict)
        assert await answer(get("/readyz")) == Reply(status, "text/plain; charset=utf-8",
                                                     f"{verdict.reason}\n".encode())


class TestGzip:
    @pytest.mark.parametrize(("value", "gzip_ok"), [
        (None, False), (b"", False), (b"gzip", True), (b"deflate, gzip;q=1.0, *;q=0.5", True),
        (b"gzip;q=0", False), (b"*", True), (b"*;q=0, identity", False), (b"GZIP", True), (b"br", False),
    ])
    def test_accept_encoding(self, value: bytes | None, gzip_ok: bool) -> None:
        """gzip is served for ``gzip`` or ``*`` unless its quality is 0."""
        assert accepts_gzip(value) is gzip_ok

    async def test_a_large_reply_is_gzipped_for_a_client_that_accepts_it(self) -> None:
        """At ``API_GZIP_MIN_BYTES`` and above, a client that accepts gzip gets the body gzipped; below, or
        without gzip, the body as it is; either way the reply varies with Accept-Encoding."""
        large, small = b"x" * API_GZIP_MIN_BYTES, b"x" * (API_GZIP_MIN_BYTES - 1)
        vary = ("Vary", "Accept-Encoding")
        zipped = await gzip_large(get("/a", gzip_ok=True), Reply("200 OK", "application/json", large))
        assert (zipped.headers, gzip.decompress(zipped.body)) == ((("Content-Encoding", "gzip"), vary), large)
        assert await gzip_large(get("/a", gzip_ok=True), Reply("200 OK", "application/json", small)) == Reply(
            "200 OK", "application/json", small, (vary,))
        assert await gzip_large(get("/a"), Reply("200 OK", "application/json", large)) == Reply(
            "200 OK", "application/json", large, (vary,))


class TestServing:
    async def test_head_sends_the_head_alone_and_the_handler_knows(self) -> None:
        """A HEAD gets the GET's status and Content-Length and no body; the handler is told it is a HEAD."""
        asked: list[Get] = []

        async def answer(request: Get) -> Reply:
            asked.append(request)
            return Reply("200 OK", "text/plain", b"twelve bytes")

        server = HttpServer(HttpConfig(host="127.0.0.1", port=0))
        server.route("/x", answer)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"HEAD /x?y=1 HTTP/1.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
            response = await asyncio.wait_for(reader.read(), 5)
            writer.close()
        assert response == (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n"
                            b"Connection: close\r\n\r\n")
        assert asked == [Get("/x", "y=1", head_only=True, accepts_gzip=True)]
