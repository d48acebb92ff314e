"""Specification of ``GET /api/v1/actions`` (rainierd/api/actions.py) on a real in-process exporter HTTP server:
the document it serves, its query parameters and their bounds, its errors, and the same TLS and basic auth as
``/metrics``."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rainierd.api.actions import ActionsApi
from rainierd.http.client import HttpError, Response, parse_url, request
from rainierd.http.webconfig import load_web_config
from rainierd.monitor.snapshot import MonitorSnapshot
from tests.actions_views import NAMED_DEMO, advisory, named, snapshot, view
from tests.certs import Pki, make_pki
from tests.serving import OK, role_server
from tests.unit.http.test_webconfig import HASH

VIEW = view(named(1), named(2, state="pending"), named(3, action="reset_link"), t_s=1_700_000_000.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA with a server certificate, made once for the module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


class Served:
    """An exporter serving ``/api/v1/actions`` of a snapshot the test sets."""

    def __init__(self) -> None:
        self.snap: MonitorSnapshot | None = snapshot(VIEW)
        self.port = 0
        self.scheme = "http"
        self.context: ssl.SSLContext | None = None
        self.authorization: str | None = None

    async def get(self, target: str, *, authorization: str | None = None) -> Response:
        url = parse_url(f"{self.scheme}://127.0.0.1:{self.port}{target}")
        headers = {"Authorization": authorization or self.authorization or ""}
        async with asyncio.timeout(10):
            return await request(url, headers={k: v for k, v in headers.items() if v}, ssl_context=self.context)

    async def json(self, target: str) -> tuple[int, Any]:
        response = await self.get(target)
        assert response.headers["content-type"] == "application/json"
        return response.status, json.loads(response.body)


async def serve(served: Served, web_file: Path | None = None, **limits: int) -> AsyncIterator[Served]:
    web = None if web_file is None else load_web_config(web_file)
    server = role_server(ready=lambda: OK, web=web)
    server.route("/api/v1/actions", ActionsApi(NAMED_DEMO, lambda: served.snap, **limits).serve)
    async with server:
        served.port = server.port
        yield served


@pytest.fixture
async def plain() -> AsyncIterator[Served]:
    """An exporter over plain HTTP without auth."""
    async for served in serve(Served(), default_limit=2, max_limit=5):
        yield served


@pytest.fixture
async def secure(pki: Pki) -> AsyncIterator[Served]:
    """An exporter over TLS with one basic-auth user (prometheus, "correct horse")."""
    web_file = pki.directory / "web-actions.yml"
    web_file.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                        f"basic_auth_users:\n  prometheus: {HASH}\n")
    served = Served()
    served.scheme, served.context = "https", ssl.create_default_context(cafile=pki.ca_cert)
    async for ready in serve(served, web_file):
        yield ready


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class TestDocument:
    async def test_serves_the_views_document_up_to_the_default_limit(self, plain: Served) -> None:
        """Without parameters the body is the view's document with at most the default limit's advisories."""
        assert await plain.json("/api/v1/actions") == (200, VIEW.document(limit=2))

    @pytest.mark.parametrize("asked", ["s0/u0/n2", "trn2-a-0002", "n2"])
    async def test_node_by_id_hostname_or_index(self, plain: Served, asked: str) -> None:
        """node= with the node's id, its hostname or n<index> answers that node's advisory only, and names the
        node as every surface does (docs/ids.md)."""
        node = {"entity": "node", "id": "s0/u0/n2", "index": 2, "ultraserver": "s0/u0", "node": "s0/u0/n2",
                "hostname": "trn2-a-0002"}
        assert await plain.json(f"/api/v1/actions?node={asked}") == (
            200, VIEW.document(node="s0/u0/n2") | {"node": node})

    async def test_a_node_without_advisory_is_an_empty_list(self, plain: Served) -> None:
        """A node of the fleet without an advisory is 200 with no actions and total 0, not an error."""
        status, body = await plain.json("/api/v1/actions?node=trn2-a-0007")
        assert (status, body["actions"], body["total"], body["node"]["id"]) == (200, [], 0, "s0/u1/n7")

    @pytest.mark.parametrize("asked", ["trn2-a-0999", "n8", "s0/u0/n4", "s0/u1/n4/chip5"])
    async def test_a_node_the_fleet_does_not_hold_is_404(self, plain: Served, asked: str) -> None:
        """A hostname the inventory does not know, an index or id out of the fleet, or an id that is not a node's
        is 404 with one line: never an empty answer that a node-check would read as healthy."""
        status, body = await plain.json(f"/api/v1/actions?node={asked}")
        assert (status, body["error"].split(" (")[0]) == (404, f"no node {asked!r} in this monitor's fleet")

    async def test_state_and_limit(self, plain: Served) -> None:
        """state= filters and limit= cuts, while total counts every match."""
        status, body = await plain.json("/api/v1/actions?state=proposed&limit=1")
        assert (status, body) == (200, VIEW.document(state="proposed", limit=1))
        assert (body["total"], len(body["actions"])) == (2, 1)

    async def test_head_has_no_body(self, plain: Served) -> None:
        """HEAD answers the status without the document."""
        url = parse_url(f"http://127.0.0.1:{plain.port}/api/v1/actions")
        response = await request(url, method="HEAD")
        assert (response.status, response.body) == (200, b"")


class TestRefusals:
    @pytest.mark.parametrize("query", ["limit=6", "limit=-1", "limit=x", "limit=99999999999", "state=broken",
                                       "node=a%23b", "node=", "colour=red", "node=a&node=b", "limit=1&limit=2",
                                       "a=1&b=2&c=3&d=4"])
    async def test_bad_parameters_are_400_with_a_json_error(self, plain: Served, query: str) -> None:
        """A parameter out of bounds, unknown, repeated or malformed is 400 with a one-line JSON error."""
        status, body = await plain.json(f"/api/v1/actions?{query}")
        assert status == 400
        assert list(body) == ["error"]
        assert "\n" not in body["error"]

    @pytest.mark.parametrize(("snap", "message"), [
        (lambda: None, "no telemetry analysed yet"),
        (lambda: snapshot(VIEW, computed=False), "no telemetry analysed yet"),
        (lambda: snapshot(None), "no advisories yet: the advisory policy has not run"),
    ])
    async def test_without_analysis_or_advisories_503(self, plain: Served, snap: Callable[[], MonitorSnapshot | None],
                                                      message: str) -> None:
        """Before an analysis, or while no policy has run, the answer is 503 with a JSON error saying which."""
        plain.snap = snap()
        assert await plain.json("/api/v1/actions") == (503, {"error": message})


class TestBounds:
    async def test_a_large_view_is_cut_at_the_limit_and_built_off_the_loop(self) -> None:
        """With more advisories than the default limit the answer holds the default limit's worth, total all."""
        many = view(*(advisory(f"n{i}", node_id=i) for i in range(1_200)))
        served = Served()
        served.snap = snapshot(many)
        async for ready in serve(served):
            status, body = await ready.json("/api/v1/actions")
            assert (status, body["total"], len(body["actions"])) == (200, 1_200, 1_000)
            assert body == many.document(limit=1_000)


class TestSecurity:
    async def test_without_credentials_401(self, secure: Served) -> None:
        """Over TLS with basic auth, a request without credentials is 401, like /metrics."""
        assert (await secure.get("/api/v1/actions")).status == 401

    async def test_wrong_password_401(self, secure: Served) -> None:
        """A wrong password is 401."""
        assert (await secure.get("/api/v1/actions", authorization=basic("prometheus", "wrong"))).status == 401

    async def test_with_credentials_over_tls_200(self, secure: Served) -> None:
        """The right password over TLS gets the document."""
        secure.authorization = basic("prometheus", "correct horse")
        assert await secure.json("/api/v1/actions?limit=10") == (200, VIEW.document(limit=10))

    async def test_plain_http_to_a_tls_server_gets_no_document(self, secure: Served) -> None:
        """A client that does not speak TLS to the TLS server gets no document."""
        secure.scheme, secure.context = "http", None
        with pytest.raises((HttpError, ConnectionError)):
            await secure.get("/api/v1/actions")
