"""Specification of the JSON read API, ``/api/v1/…`` (rainierd/api/, docs/api.md), on a real in-process exporter
HTTP server over a real monitor core (tests/read_api_fixture.py): each endpoint's document, its parameters and
bounds, its 400/404/503 errors, the event ring behind ``/events``, and the same TLS and basic auth as
``/metrics``."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rainierd.api import ReadApi
from rainierd.api._common import body, floats
from rainierd.core.detect import Event
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.topology import build_topology
from rainierd.http.client import Response, parse_url, request
from rainierd.http.webconfig import load_web_config
from rainierd.monitor.events import RECENT_EVENTS, EventLog
from tests.certs import Pki, make_pki
from tests.read_api_fixture import FAULTY_LINK, FAULTY_US, JOBS, Monitored, monitored
from tests.serving import OK, role_server
from tests.unit.api.test_actions import basic
from tests.unit.http.test_webconfig import HASH


@pytest.fixture(scope="module")
def monitor() -> Monitored:
    """The demo monitor with NeuronLink 224 of u1 degraded, built once for the module."""
    return monitored()


class Served:
    """An exporter serving the read API of ``api``."""

    def __init__(self, api: ReadApi) -> None:
        self.api, self.port, self.scheme = api, 0, "http"
        self.context: ssl.SSLContext | None = None
        self.authorization: str | None = None

    async def get(self, target: str, *, method: str = "GET", gzip: bool = False) -> Response:
        url = parse_url(f"{self.scheme}://127.0.0.1:{self.port}{target}")
        headers = {"Authorization": self.authorization} if self.authorization else {}
        if gzip:
            headers["Accept-Encoding"] = "gzip"
        async with asyncio.timeout(10):
            return await request(url, method=method, headers=headers, ssl_context=self.context)

    async def json(self, target: str) -> tuple[int, Any]:
        response = await self.get(target)
        assert response.headers["content-type"] == "application/json"
        return response.status, json.loads(response.body)

    async def ok(self, target: str) -> Any:
        status, document = await self.json(target)
        assert status == 200, document
        return document


async def serve(api: ReadApi, web_file: Path | None = None) -> AsyncIterator[Served]:
    served = Served(api)
    server = role_server(ready=lambda: OK, web=None if web_file is None else load_web_config(web_file))
    server.route("/api/v1/", api.serve)
    async with server:
        served.port = server.port
        yield served


@pytest.fixture
async def plain(monitor: Monitored) -> AsyncIterator[Served]:
    """The read API over plain HTTP without auth, at most 5 rows a page."""
    async for served in serve(monitor.api(max_limit=5)):
        yield served


FAULTY_US_ID = "s0/u1"  # FAULTY_US (u1) as every surface names it (docs/ids.md)


def by_id(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {row["id"]: row for row in rows}


class TestIndex:
    async def test_lists_every_endpoint(self, plain: Served) -> None:
        """/api/v1/ names every endpoint family, /api/v1/actions included."""
        document = await plain.ok("/api/v1/")
        assert set(document["endpoints"]) == {"fleet", "sites", "ultraservers", "ultraserver", "jobs", "job",
                                              "events", "actions"}
        assert document["max_limit"] == 5

    async def test_without_slash_the_same(self, plain: Served) -> None:
        """/api/v1 is the index too."""
        assert await plain.ok("/api/v1") == await plain.ok("/api/v1/")


class TestFleet:
    async def test_figures_are_the_snapshots(self, plain: Served, monitor: Monitored) -> None:
        """The fleet's peak, effective, loss by cause and chips are the snapshot's, its one degraded link
        counted."""
        tp, snap = monitor.snap.throughput, monitor.snap
        document = await plain.ok("/api/v1/fleet")
        assert (document["peak_flops"], document["effective_flops"], document["chips"]) == (
            tp.fleet_peak, tp.fleet_effective, {"total": 128, "reporting": tp.chips_fresh, "delivered_unknown": 0,
                                                 "effective_unknown": 0})
        assert document["lost_by_cause"] == pytest.approx(snap.lost.fleet() if snap.lost else {})
        assert document["lost_by_cause"]["degraded_neuronlink"] > 0
        assert document["unhealthy"]["neuronlink"] == {"degraded": 1, "down": 0}
        assert (document["generation"], document["jobs"], document["ultraservers"]) == (45, 2, 2)
        assert document["monitor"] == {"lag_s": 0.5, "analysis_s": 0.01, "overloaded": False, "backlog_messages": 0,
                                       "connected": False}


class TestSites:
    async def test_one_row_whose_sums_are_the_fleets(self, plain: Served) -> None:
        """The demo's one site holds both UltraServers, every chip and the fleet's loss."""
        fleet, document = await plain.ok("/api/v1/fleet"), await plain.ok("/api/v1/sites")
        [site] = document["sites"]
        assert (site["id"], site["ultraservers"], site["chips_present"]) == ("s0", 2, 128)
        assert site["lost_flops"] == pytest.approx(fleet["lost_flops"])
        assert site["unhealthy"]["neuronlink"] == 1


class TestUltraServers:
    async def test_worst_share_first_is_the_faulty_one(self, plain: Served) -> None:
        """Sorted by effective share (ascending by default) the UltraServer losing FLOP/s to its link is first."""
        document = await plain.ok("/api/v1/ultraservers?sort=effective_share")
        assert [u["id"] for u in document["ultraservers"]] == [FAULTY_US_ID, "s0/u0"]
        assert [u["index"] for u in document["ultraservers"]] == [1, 0]
        assert (document["total"], document["order"]) == (2, "asc")

    async def test_by_lost_descending_by_default(self, plain: Served) -> None:
        """sort=lost puts the costliest first, and its row carries the loss by cause and unhealthy counts."""
        document = await plain.ok("/api/v1/ultraservers?sort=lost")
        first = document["ultraservers"][0]
        assert (first["id"], document["order"]) == (FAULTY_US_ID, "desc")
        assert first["lost_by_cause"]["degraded_neuronlink"] == first["lost_flops"] > 0
        assert set(first["lost_by_cause"]) == set(CAUSES)
        assert first["unhealthy"] == {"chip": 0, "neuronlink": 1, "efa": 0, "node": 0, "ultraserver": 0}

    async def test_share_is_effective_over_peak(self, plain: Served, monitor: Monitored) -> None:
        """Each row's effective share is the snapshot's effective over its peak."""
        tp = monitor.snap.throughput
        rows = by_id((await plain.ok("/api/v1/ultraservers"))["ultraservers"])
        assert {u: r["effective_share"] for u, r in rows.items()} == pytest.approx(
            {f"s0/u{u}": tp.ultraserver_effective[u] / tp.ultraserver_peak[u] for u in range(2)})

    async def test_order_reverses(self, plain: Served) -> None:
        """order=desc on id lists the highest id first."""
        document = await plain.ok("/api/v1/ultraservers?sort=id&order=desc")
        assert [u["id"] for u in document["ultraservers"]] == ["s0/u1", "s0/u0"]

    async def test_offset_and_limit_page_while_total_counts_all(self, plain: Served) -> None:
        """offset=1&limit=1 answers the second row only, total still 2."""
        document = await plain.ok("/api/v1/ultraservers?offset=1&limit=1")
        assert ([u["id"] for u in document["ultraservers"]], document["total"]) == (["s0/u1"], 2)

    async def test_site_filter(self, plain: Served) -> None:
        """site=s0 (or 0) answers that site's UltraServers."""
        assert (await plain.ok("/api/v1/ultraservers?site=s0"))["total"] == 2
        assert (await plain.ok("/api/v1/ultraservers?site=0"))["total"] == 2

    async def test_fields_pick_columns(self, plain: Served) -> None:
        """fields= answers only those fields of each row (id and index always), in the rows' own order."""
        document = await plain.ok("/api/v1/ultraservers?sort=effective_share&fields=unhealthy_total,effective_share")
        assert [list(row) for row in document["ultraservers"]] == [
            ["id", "index", "effective_share", "unhealthy_total"]] * 2
        assert document["ultraservers"][0]["id"] == FAULTY_US_ID

    @pytest.mark.parametrize("query", ["limit=6", "limit=-1", "offset=x", "sort=name", "order=up", "site=s1",
                                       "site=east", "colour=red", "limit=1&limit=2", "fields=id,colour", "fields=",
                                       "a=1&b=2&c=3&d=4&e=5&f=6&g=7"])
    async def test_bad_parameters_are_400(self, plain: Served, query: str) -> None:
        """A parameter out of bounds, unknown, repeated or malformed is 400 with a one-line JSON error."""
        status, document = await plain.json(f"/api/v1/ultraservers?{query}")
        assert (status, list(document)) == (400, ["error"])
        assert "\n" not in document["error"]


class TestUltraServer:
    async def test_every_entity_of_it(self, plain: Served) -> None:
        """u1's detail holds its 4 nodes, 64 chips, 192 NeuronLinks and 64 EFA ports, each of u1's nodes."""
        document = await plain.ok(f"/api/v1/ultraservers/{FAULTY_US}")
        sizes = {kind: len(document[kind]) for kind in ("nodes", "chips", "links", "ports")}
        assert sizes == {"nodes": 4, "chips": 64, "links": 192, "ports": 64}
        assert {(n["id"], n["index"]) for n in document["nodes"]} == {(f"s0/u1/n{n}", n) for n in range(4, 8)}
        assert document["ultraserver"]["id"] == FAULTY_US_ID
        assert {c["node"] for c in document["chips"]} == {f"s0/u1/n{n}" for n in range(4, 8)}
        assert (document["chips"][5]["id"], document["ports"][6]["id"]) == ("s0/u1/n4/chip5", "s0/u1/n4/efa6")

    async def test_the_faulty_link_is_the_one_unhealthy_entity(self, plain: Served) -> None:
        """Link 224 (ring, chips 64-80, node 4) is degraded since tick 35 with its reasons; nothing else is."""
        document = await plain.ok(f"/api/v1/ultraservers/{FAULTY_US}")
        unhealthy = [e for kind in ("nodes", "chips", "links", "ports") for e in document[kind]
                     if e["state"] != "healthy"]
        [link] = unhealthy
        assert {k: link[k] for k in ("id", "index", "kind", "chip_a", "chip_b", "node", "state", "onset_tick")} == {
            "id": "s0/u1/n4/chip0/link2", "index": FAULTY_LINK, "kind": "ring", "chip_a": "s0/u1/n4/chip0",
            "chip_b": "s0/u1/n5/chip0", "node": "s0/u1/n4", "state": "degraded", "onset_tick": 35}
        assert link["reasons"]
        assert link["lanes_up"] < 8

    async def test_figures_are_the_probes(self, plain: Served, monitor: Monitored) -> None:
        """A chip's temperature and a node's job are the live state's."""
        document = await plain.ok("/api/v1/ultraservers/u0")
        chip = by_id(document["chips"])["s0/u0/n0/chip3"]
        assert chip["temp_c"] == pytest.approx(float(monitor.core.state.chips.gauges["temp_c"][3]))
        assert {n["job"] for n in document["nodes"]} == {"lab/finetune"}

    async def test_a_chips_figures_say_when_they_were_sampled(self, plain: Served, monitor: Monitored) -> None:
        """Each chip's sample_t_s is its latest sample's time on its publisher's clock: what its figures are as of."""
        document = await plain.ok("/api/v1/ultraservers/u0")
        times = [chip["sample_t_s"] for chip in sorted(document["chips"], key=lambda c: c["index"])]
        assert times == monitor.core.state.chips.t_s[:64].tolist()

    @pytest.mark.parametrize("target", ["s0/u1", "s0%2Fu1", "u1", "1"])
    async def test_its_id_u_index_or_index_names_it(self, plain: Served, target: str) -> None:
        """/ultraservers/s0/u1 (its id, as every surface prints it), u1 and 1 are the same UltraServer."""
        assert (await plain.ok(f"/api/v1/ultraservers/{target}"))["ultraserver"]["id"] == "s0/u1"

    @pytest.mark.parametrize(("target", "status"), [("u2", 404), ("u999999", 404), ("x7", 400), ("u1?limit=1", 400),
                                                    ("s0/u2", 404), ("s1/u0", 404), ("s0/u1/n4", 400)])
    async def test_unknown_404_malformed_400(self, plain: Served, target: str, status: int) -> None:
        """An UltraServer the fleet lacks is 404; a malformed id or any parameter 400."""
        got, document = await plain.json(f"/api/v1/ultraservers/{target}")
        assert (got, list(document)) == (status, ["error"])

    async def test_head_has_no_body(self, plain: Served) -> None:
        """HEAD answers the status without the document."""
        response = await plain.get("/api/v1/ultraservers/u1", method="HEAD")
        assert (response.status, response.body) == (200, b"")


class TestJobs:
    async def test_costliest_first(self, plain: Served) -> None:
        """The job on the faulty UltraServer leads the list, with its loss by cause and phase."""
        document = await plain.ok("/api/v1/jobs")
        assert [j["id"] for j in document["jobs"]] == ["lab/pretrain", "lab/finetune"]
        first = document["jobs"][0]
        assert first["lost_by_cause"]["degraded_neuronlink"] > 0
        assert (first["ultraservers"], first["chips"], first["phase"], document["total"]) == (1, 64, "running", 2)

    async def test_sort_by_id(self, plain: Served) -> None:
        """sort=id lists the jobs in id order."""
        document = await plain.ok("/api/v1/jobs?sort=id")
        assert [j["id"] for j in document["jobs"]] == sorted(JOBS)

    async def test_one_job_with_its_culprit_and_ultraservers(self, plain: Served) -> None:
        """lab/pretrain's culprit is link 224 on u1, its one UltraServer, named as every surface names it."""
        document = await plain.ok("/api/v1/jobs/lab/pretrain")
        [culprit] = document["culprits"]
        assert {k: culprit[k] for k in ("entity", "id", "index", "ultraserver", "node")} == {
            "entity": "neuronlink", "id": "s0/u1/n4/chip0/link2", "index": FAULTY_LINK, "ultraserver": FAULTY_US_ID,
            "node": "s0/u1/n4"}
        assert [u["id"] for u in document["ultraservers"]] == [FAULTY_US_ID]
        assert (document["job"]["id"], document["job"]["nodes_held"]) == ("lab/pretrain", 4)

    async def test_percent_encoded_id(self, plain: Served) -> None:
        """A job id with its slash percent-encoded names the same job."""
        assert (await plain.ok("/api/v1/jobs/lab%2Fpretrain"))["job"]["id"] == "lab/pretrain"

    async def test_unknown_job_404(self, plain: Served) -> None:
        """A job no document names is 404."""
        assert (await plain.json("/api/v1/jobs/lab/none"))[0] == 404

    @pytest.mark.parametrize("query", ["sort=effective_share", "limit=6", "order=sideways"])
    async def test_bad_parameters_are_400(self, plain: Served, query: str) -> None:
        """An unknown sort, a limit over the maximum or a bad order is 400."""
        assert (await plain.json(f"/api/v1/jobs?{query}"))[0] == 400


def event(tick: int, entity: str = "neuronlink", entity_id: int = FAULTY_LINK) -> Event:
    return Event(tick=tick, entity=entity, id=entity_id, before="healthy", after="degraded", reasons=("lanes",),
                 onset_tick=tick)


class TestEvents:
    async def test_the_monitors_event_newest_first(self, plain: Served) -> None:
        """The fixture's one event (link 224 degraded) is served with its canonical id, index, UltraServer and
        node (docs/ids.md)."""
        document = await plain.ok("/api/v1/events")
        [only] = document["events"]
        assert {k: only[k] for k in ("entity", "id", "index", "after", "ultraserver", "node")} == {
            "entity": "neuronlink", "id": "s0/u1/n4/chip0/link2", "index": FAULTY_LINK, "after": "degraded",
            "ultraserver": "s0/u1", "node": "s0/u1/n4"}
        assert "hostname" not in only  # the demo fleet has no inventory
        assert (document["announced"], document["capacity"]) == (1, RECENT_EVENTS)

    async def test_limit_and_entity_filter(self, monitor: Monitored) -> None:
        """limit= keeps the newest; entity= keeps one kind; total counts what matched."""
        log = EventLog(monitor.core.topology, qos=1)
        for tick in range(5):
            log.announce(event(tick, "node" if tick % 2 else "neuronlink", 5 if tick % 2 else FAULTY_LINK))
        async for served in serve(dataclasses.replace(monitor, events=log).api()):
            document = await served.ok("/api/v1/events?limit=2")
            assert [e["tick"] for e in document["events"]] == [4, 3]
            nodes = await served.ok("/api/v1/events?entity=node")
            assert ([e["tick"] for e in nodes["events"]], nodes["total"]) == ([3, 1], 2)
            assert [(e["id"], e["ultraserver"]) for e in nodes["events"]] == [("s0/u1/n5", "s0/u1")] * 2

    @pytest.mark.parametrize("query", ["limit=1001", "entity=rack", "limit=x"])
    async def test_bad_parameters_are_400(self, plain: Served, query: str) -> None:
        """A limit over the ring's capacity or an unknown entity kind is 400."""
        assert (await plain.json(f"/api/v1/events?{query}"))[0] == 400


    async def test_without_an_event_source_no_events_endpoint(self, monitor: Monitored) -> None:
        """A read API given no event ring neither lists nor serves /events (404)."""
        snap = monitor.snap
        api = ReadApi(monitor.core.topology, lambda: snap, core=monitor.core, lock=asyncio.Lock())
        async for served in serve(api):
            assert "events" not in (await served.ok("/api/v1/"))["endpoints"]
            assert (await served.json("/api/v1/events"))[0] == 404


class TestCompression:
    async def test_a_large_answer_is_gzipped_for_a_client_that_accepts_it(self, plain: Served) -> None:
        """One UltraServer's detail (~75 KB) comes gzipped when asked, and unzips to the same document."""
        plain_body = (await plain.get("/api/v1/ultraservers/u1")).body
        response = await plain.get("/api/v1/ultraservers/u1", gzip=True)
        assert (response.headers["content-encoding"], response.headers["vary"]) == ("gzip", "Accept-Encoding")
        assert len(response.body) < len(plain_body) // 4
        assert gzip.decompress(response.body) == plain_body

    async def test_a_small_answer_is_not(self, plain: Served) -> None:
        """The fleet document (under 16 KiB) is sent as it is even to a client that accepts gzip."""
        response = await plain.get("/api/v1/fleet", gzip=True)
        assert "content-encoding" not in response.headers
        assert json.loads(response.body)["generation"] == 45


class TestRecentEvents:
    def test_the_ring_keeps_the_newest(self) -> None:
        """Past RECENT_EVENTS the log's ring drops its oldest: it holds the newest RECENT_EVENTS, oldest first."""
        log = EventLog(build_topology("demo"), qos=1)
        for tick in range(RECENT_EVENTS + 7):
            log.announce(event(tick))
        assert [e["tick"] for e in log.recent] == list(range(7, RECENT_EVENTS + 7))
        assert log.counts["neuronlink", "degraded"] == RECENT_EVENTS + 7


class TestUnavailable:
    @pytest.mark.parametrize("path", ["/fleet", "/sites", "/ultraservers", "/ultraservers/u1", "/jobs",
                                      "/jobs/lab/pretrain"])
    async def test_before_any_analysis_503(self, monitor: Monitored, path: str) -> None:
        """Before telemetry has been analysed every snapshot endpoint is 503 with a JSON error."""
        empty = dataclasses.replace(monitor.snap, throughput=dataclasses.replace(monitor.snap.throughput, tick=-1))
        async for served in serve(monitor.api(empty)):
            assert await served.json(f"/api/v1{path}") == (503, {"error": "no telemetry analysed yet"})

    async def test_unknown_endpoint_404(self, plain: Served) -> None:
        """A path under /api/v1/ the API does not have is 404 with a JSON error."""
        status, document = await plain.json("/api/v1/racks")
        assert (status, list(document)) == (404, ["error"])


class TestBounds:
    async def test_default_limit_and_maximum(self, monitor: Monitored) -> None:
        """Without limit= a page holds at most 500 rows; the maximum is 10,000."""
        async for served in serve(monitor.api()):
            document = await served.ok("/api/v1/ultraservers")
            assert document["limit"] == 500
            assert (await served.json("/api/v1/ultraservers?limit=10001"))[0] == 400
            assert (await served.ok("/api/v1/ultraservers?limit=10000"))["limit"] == 10_000

    async def test_the_table_is_built_once_a_snapshot(self, plain: Served) -> None:
        """Lists, sites and details of one snapshot share one per-UltraServer table."""
        for path in ("/ultraservers", "/sites", "/ultraservers/u0", "/jobs/lab/pretrain", "/ultraservers?sort=lost"):
            await plain.ok(f"/api/v1{path}")
        assert plain.api.builds == 1

    def test_nan_is_null(self) -> None:
        """An unknown figure (NaN) is JSON null, never NaN."""
        assert json.loads(body({"v": floats(np.array([1.0, np.nan]))})) == {"v": [1.0, None]}

    def test_long_lists_encode_in_chunks_to_the_same_json(self) -> None:
        """A top-level list longer than a chunk is the same JSON as one encoder call would write."""
        document = {"total": 250, "rows": [{"id": i, "v": [i, None]} for i in range(250)], "empty": []}
        assert body(document) == (json.dumps(document, separators=(",", ":")) + "\n").encode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA with a server certificate, made once for the module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def secure(pki: Pki, monitor: Monitored) -> AsyncIterator[Served]:
    """The read API over TLS with one basic-auth user (prometheus, "correct horse")."""
    web_file = pki.directory / "web-api.yml"
    web_file.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                        f"basic_auth_users:\n  prometheus: {HASH}\n")
    async for served in serve(monitor.api(), web_file):
        served.scheme, served.context = "https", ssl.create_default_context(cafile=pki.ca_cert)
        yield served


class TestSecurity:
    @pytest.mark.parametrize("path", ["/", "/fleet", "/ultraservers/u1", "/events"])
    async def test_without_credentials_401(self, secure: Served, path: str) -> None:
        """Over TLS with basic auth, every read-API path without credentials is 401, like /metrics."""
        assert (await secure.get(f"/api/v1{path}")).status == 401

    async def test_wrong_password_401(self, secure: Served) -> None:
        """A wrong password is 401."""
        secure.authorization = basic("prometheus", "wrong")
        assert (await secure.get("/api/v1/fleet")).status == 401

    async def test_with_credentials_over_tls_200(self, secure: Served) -> None:
        """The right password over TLS gets the document."""
        secure.authorization = basic("prometheus", "correct horse")
        assert (await secure.ok("/api/v1/fleet"))["generation"] == 45
