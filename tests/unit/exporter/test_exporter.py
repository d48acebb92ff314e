"""Specification of the exporter: collectors read back from a registry, and the
HTTP endpoint's routes, probes and per-generation render cache."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
import http.client
import re
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import bcrypt
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from rainierd.core import FleetState, Ingest, IngestStats, Received, compute_throughput
from rainierd.core.analysis import HealthView
from rainierd.core.detect import Reason
from rainierd.core.ingest import FRAME_REASONS
from rainierd.core.state import REFUSALS
from rainierd.exporter import (
    EntityFamilies,
    FleetCollector,
    MetricsRoute,
    build_exporter,
    build_registry,
    route_metrics_and_probes,
)
from rainierd.exporter.selfstatus import DECODE_REASONS, IngestCollector, MqttCollector
from rainierd.exporter.ultraservers import UltraServerFamilies
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import build_topology
from rainierd.http.config import HttpConfig
from rainierd.http.server import HttpServer
from rainierd.http.webconfig import WebConfig, load_web_config
from rainierd.monitor.snapshot import IngestCounts, MonitorSnapshot, MonitorStatus, Receipts
from rainierd.mqtt.connection import Connection
from rainierd.runtime.probes import Verdict
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import NodeFrame, decode_binary, encode_binary
from rainierd.wire.records import Frame
from tests.certs import make_pki
from tests.serving import role_server


def _clockless(frame: Frame) -> Frame:
    """Return a node frame with its chips' clock left out (unknown), as AWS neuron-monitor reports them."""
    if not isinstance(frame, NodeFrame):
        return frame
    bits = np.uint16(sum(1 << i for i, name in enumerate(frame.chips.dtype.names or ()) if name != "clock_ratio"))
    return dataclasses.replace(frame, known={"chips": np.full(len(frame.chips), bits, np.uint16)})


def demo_snapshot(ticks: int = 2, *, clock: bool = True) -> MonitorSnapshot:
    topo = build_topology("demo")
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=0.0)
    state = FleetState(topo)
    ingest = Ingest(state, IngestStats())
    for k in range(ticks):
        frames = [decode_binary(encode_binary(f)) for _t, f in tick_frames(topo, model.step(k), publisher="sim")]
        ingest.apply([Received(float(k), None, frame if clock else _clockless(frame)) for frame in frames])
        state.now_s = float(k)
    tp = compute_throughput(state, peak_flops_per_chip=TRN2.fp8_dense_flops, stale_after_s=3.0)
    return MonitorSnapshot(generation=1, throughput=tp, chips_total=topo.n_chips, analysis_s=0.01, analysed_ticks=2)


def with_status(status: MonitorStatus, snap: MonitorSnapshot | None = None) -> MonitorSnapshot:
    """Return ``snap`` (the demo's by default) carrying ``status``."""
    return dataclasses.replace(snap or demo_snapshot(), status=status)


class Broken(Collector):
    def collect(self) -> Iterator[object]:  # type: ignore[override]
        raise RuntimeError("source unavailable")


class BrokenText:
    def render(self) -> bytes:
        raise RuntimeError("family unavailable")


class TestCollectors:
    def test_fleet_values(self) -> None:
        """Fleet, site and UltraServer FP8 series carry the snapshot's sums."""
        snap = demo_snapshot()
        registry = build_registry({"fleet": FleetCollector(build_topology("demo"), lambda: snap)},
                                  process_metrics=False).registry
        get = registry.get_sample_value
        assert get("rainier_fleet_fp8_peak_flops") == pytest.approx(128 * 1.299e15)
        assert get("rainier_fleet_fp8_effective_flops") == pytest.approx(snap.throughput.fleet_effective)
        assert get("rainier_site_fp8_effective_flops", {"site": "s0"}) == pytest.approx(snap.throughput.fleet_effective)
        assert get("rainier_fleet_chips_reporting") == 128

    def test_a_fleet_without_clocks_exports_no_delivered_figure(self) -> None:
        """With no chip reporting a clock, no fleet, site or UltraServer series says what they deliver (never a
        0 for unknown); the unknown chips are counted, and effective FP8 is exported from the counters."""
        snap = demo_snapshot(clock=False)
        topo = build_topology("demo")
        registry = build_registry({"fleet": FleetCollector(topo, lambda: snap)}, process_metrics=False).registry
        get = registry.get_sample_value
        assert (get("rainier_fleet_fp8_delivered_flops"), get("rainier_site_fp8_delivered_flops", {"site": "s0"})) == (
            None, None)
        assert {figure: get("rainier_fleet_fp8_unknown_chips", {"figure": figure})
                for figure in ("delivered", "effective")} == {"delivered": 128, "effective": 0}
        assert get("rainier_site_fp8_unknown_chips", {"site": "s0", "figure": "delivered"}) == 128
        assert get("rainier_fleet_fp8_effective_flops") == pytest.approx(snap.throughput.fleet_effective)
        assert snap.throughput.fleet_effective > 0
        text = UltraServerFamilies(topo, lambda: snap).render().decode()
        samples = {f.name: len(f.samples) for f in text_string_to_metric_families(text)}
        assert {name: samples[f"rainier_ultraserver_fp8_{name}_flops"] for name in ("peak", "delivered", "effective")
                } == {"peak": 2, "delivered": 0, "effective": 2}

    def test_implausible_claims_are_counted(self) -> None:
        """The entities whose claim is implausible now are counted by judgement, and the times one became so."""
        empty = np.zeros(0, dtype=np.int64)
        health = HealthView(
            ids=dict.fromkeys(("neuronlink", "efa", "chip", "node", "ultraserver"), empty),
            states=dict.fromkeys(("neuronlink", "efa", "chip", "node", "ultraserver"), empty),
            reasons=dict.fromkeys(("neuronlink", "efa", "chip", "node", "ultraserver"), empty),
            onsets=dict.fromkeys(("neuronlink", "efa", "chip", "node", "ultraserver"), empty),
            worst={k: (empty, np.zeros(0)) for k in ("neuronlink", "efa", "chip")},
            implausible={("node", "efa_paths"): np.array([2, 5]), ("node", "neuronlink_paths"): empty},
            implausible_onsets={("node", "efa_paths"): 3, ("node", "neuronlink_paths"): 0},
        )
        snap = dataclasses.replace(demo_snapshot(), health=health)
        registry = build_exporter(build_topology("demo"), lambda: snap, process_metrics=False).registry
        get = registry.get_sample_value
        assert [get(name, {"entity": "node", "judgement": judgement})
                for name in ("rainier_implausible", "rainier_implausible_onsets_total")
                for judgement in ("efa_paths", "neuronlink_paths")] == [2, 0, 3, 0]

    def test_ultraserver_families_render_as_text(self) -> None:
        """The per-UltraServer families render as valid exposition text with one series per UltraServer."""
        snap = demo_snapshot()
        text = UltraServerFamilies(build_topology("demo"), lambda: snap).render().decode()
        families = list(text_string_to_metric_families(text))
        assert [f.name for f in families] == [f"rainier_ultraserver_fp8_{x}_flops" for x in
                                              ("peak", "delivered", "effective")]
        effective = {s.labels["ultraserver"]: s.value for s in families[2].samples}
        assert effective == {"u0": snap.throughput.ultraserver_effective[0],
                             "u1": snap.throughput.ultraserver_effective[1]}

    def test_ultraserver_families_empty_before_a_snapshot(self) -> None:
        """Before the first analysis the per-UltraServer families render nothing."""
        assert UltraServerFamilies(build_topology("demo"), lambda: None).render() == b""

    def test_no_snapshot_no_fleet_series(self) -> None:
        """Before the first analysis the fleet collector exports nothing rather than zeros."""
        registry = build_registry({"fleet": FleetCollector(build_topology("demo"), lambda: None)},
                                  process_metrics=False).registry
        assert registry.get_sample_value("rainier_fleet_fp8_peak_flops") is None

    def test_ingest_counters(self) -> None:
        """Ingest counters come from the snapshot's status, the inbox's refusals (oversize, over_share, ...)
        among the reasons, with every known reason present from the start."""
        stats = IngestStats()
        stats.frames["binary"] += 5
        stats.rejected["truncated"] += 1
        stats.frames_lost = 2
        receipts = Receipts()
        receipts.refused.update(oversize=3, over_share=4)
        receipts.messages["binary"] += 9
        snap = with_status(MonitorStatus(ingest=IngestCounts.of(stats, receipts)))
        registry = build_registry({"ingest": IngestCollector(lambda: snap)}, process_metrics=False).registry
        get = registry.get_sample_value
        assert get("rainier_ingest_frames_total", {"encoding": "binary"}) == 5
        assert get("rainier_ingest_messages_total", {"encoding": "binary"}) == 9
        assert get("rainier_ingest_decode_errors_total", {"reason": "truncated"}) == 1
        assert get("rainier_ingest_decode_errors_total", {"reason": "oversize"}) == 3
        assert get("rainier_ingest_decode_errors_total", {"reason": "over_share"}) == 4
        assert get("rainier_ingest_decode_errors_total", {"reason": "retained"}) == 0
        assert get("rainier_ingest_decode_errors_total", {"reason": "non_finite"}) == 0
        assert get("rainier_ingest_frames_lost_total") == 2

    def test_counters_refused_over_their_bounds(self) -> None:
        """Counters refused over their bounds are exported by kind, field and reason, every bounded counter's
        series present from the start, and the snapshot's copy does not follow the stats."""
        stats = IngestStats()
        stats.counters_refused["chips", "fp8_flop_total", "over_bound"] += 3
        snap = with_status(MonitorStatus(ingest=IngestCounts.of(stats)))
        stats.counters_refused["chips", "fp8_flop_total", "over_bound"] += 1
        registry = build_registry({"ingest": IngestCollector(lambda: snap)}, process_metrics=False).registry
        samples = {tuple(s.labels[k] for k in ("kind", "field", "reason")): s.value
                   for family in registry.collect() if family.name == "rainier_ingest_counters_refused"
                   for s in family.samples}
        assert samples == {key: 3.0 if key == ("chips", "fp8_flop_total", "over_bound") else 0.0 for key in REFUSALS}

    def test_every_reason_the_core_judges_by_has_a_series_from_the_start(self) -> None:
        """The exporter's list of rejection reasons holds every rule of the core's table, so none appears only
        once it first happens (a rate over a series that did not exist reads as nothing)."""
        assert [reason for reason in FRAME_REASONS if reason not in DECODE_REASONS] == []

    def test_the_status_is_a_frozen_copy(self) -> None:
        """Counters changed after the snapshot was taken do not reach a scrape of it."""
        stats = IngestStats()
        snap = with_status(MonitorStatus(ingest=IngestCounts.of(stats)))
        stats.frames_lost = 7
        registry = build_registry({"ingest": IngestCollector(lambda: snap)}, process_metrics=False).registry
        assert registry.get_sample_value("rainier_ingest_frames_lost_total") == 0
        with pytest.raises(dataclasses.FrozenInstanceError):
            snap.status.ingest.frames_lost = 7  # type: ignore[misc]

    def test_a_failing_collector_drops_only_its_group(self) -> None:
        """A collector that raises reports success 0; the others still export."""
        snap = with_status(MonitorStatus(connection=Connection(connected=True)))
        registry = build_registry({"broken": Broken(), "mqtt": MqttCollector(lambda: snap)},
                                  process_metrics=False).registry
        get = registry.get_sample_value
        assert get("rainier_exporter_collector_success", {"collector": "broken"}) == 0
        assert get("rainier_exporter_collector_success", {"collector": "mqtt"}) == 1
        assert get("rainier_mqtt_connected") == 1
        assert get("rainier_build_info", {"version": "0.1.0", "wire_version": "1"}) == 1

    def test_a_failing_text_family_drops_only_itself_and_says_so(self) -> None:
        """A text-rendered family that raises is left out of the scrape, which goes on, and reports success 0
        with its duration; the families beside it render."""
        snap = demo_snapshot()
        topo = build_topology("demo")
        exporter = build_registry({"fleet": FleetCollector(topo, lambda: snap)}, texts={
            "broken": BrokenText(), "ultraservers": UltraServerFamilies(topo, lambda: snap)}, process_metrics=False)
        families = {f.name: f for f in text_string_to_metric_families(exporter.render().decode())}
        success = {s.labels["collector"]: s.value for s in families["rainier_exporter_collector_success"].samples}
        assert success == {"broken": 0.0, "ultraservers": 1.0, "fleet": 1.0, "build_info": 1.0}
        assert "rainier_ultraserver_fp8_effective_flops" in families
        duration = {s.labels["collector"] for s in families["rainier_exporter_collector_duration_seconds"].samples}
        assert duration == set(success)


async def http_get(port: int, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # Read to EOF, so ask for one request a connection (the server keeps HTTP/1.1 alive by default).
    writer.write(request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
    response = await reader.read()
    writer.close()
    status = int(response.split(b" ", 2)[1])
    return status, response.split(b"\r\n\r\n", 1)[1]


class TestHttp:
    @pytest.fixture
    async def server(self) -> AsyncIterator[HttpServer]:
        self.generation = 1
        self.ready = Verdict(False, "mqtt not connected")
        snap = demo_snapshot()
        exporter = build_registry({"fleet": FleetCollector(build_topology("demo"), lambda: snap)})
        server = HttpServer(HttpConfig(host="127.0.0.1", port=0))
        self.metrics = route_metrics_and_probes(server, exporter.render, generation=lambda: self.generation,
                                                healthy=lambda: Verdict(True, "ok"), ready=lambda: self.ready)
        async with server:
            yield server

    async def test_routes(self, server: HttpServer) -> None:
        """/metrics serves exposition text; probes say why; unknown paths 404; other methods 405."""
        status, body = await http_get(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200
        assert b"rainier_fleet_fp8_peak_flops 1.66272e+17" in body
        assert await http_get(server.port, b"GET /healthz HTTP/1.1\r\n\r\n") == (200, b"ok\n")
        assert await http_get(server.port, b"GET /readyz HTTP/1.1\r\n\r\n") == (503, b"mqtt not connected\n")
        self.ready = Verdict(True, "ready")
        assert await http_get(server.port, b"GET /readyz HTTP/1.1\r\n\r\n") == (200, b"ready\n")
        assert (await http_get(server.port, b"GET /nope HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await http_get(server.port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await http_get(server.port, b"garbage\r\n\r\n"))[0] == 400
        assert await http_get(server.port, b"HEAD /healthz HTTP/1.1\r\n\r\n") == (200, b"")

    async def test_concurrent_first_scrapes_share_one_render(self, server: HttpServer) -> None:
        """Five scrapes before any refresh: one render, and each scrape of the same generation serves it."""
        await asyncio.gather(*(self.metrics.body() for _ in range(5)))
        await self.metrics.body()
        assert self.metrics.renders == 1

    async def test_a_refresh_renders_ahead_only_for_a_scraper_that_took_the_last_render(
        self, server: HttpServer,
    ) -> None:
        """A scraper as fast as the ticks finds each generation rendered by the refresh after its analysis; a
        render no scrape took is not followed by another, and the next scrape renders the latest generation
        (it never serves one older than the last analysis)."""
        await self.metrics.refresh()
        assert self.metrics.renders == 1
        for generation in (2, 3):  # nothing scrapes: the refreshes render nothing
            self.generation = generation
            await self.metrics.refresh()
        assert self.metrics.renders == 1
        await self.metrics.body()  # generation 3, rendered now
        assert self.metrics.renders == 2
        for generation in (4, 5):  # a scrape each generation: each refresh renders ahead of it
            self.generation = generation
            await self.metrics.refresh()
            assert self.metrics.renders == generation - 1
            await self.metrics.body()
            assert self.metrics.renders == generation - 1
        await self.metrics.refresh()  # the same generation again: nothing to render
        assert self.metrics.renders == 4


class TestServerLifetime:
    async def test_entering_binds_and_leaving_closes_even_a_kept_alive_connection(self) -> None:
        """Inside ``async with`` the server answers at once (no task to start); on the way out its socket and a
        connection kept alive between requests are closed."""
        async with role_server(lambda: b"# nothing\n") as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"ok\n")
            assert (head.startswith(b"HTTP/1.1 200 OK"), b"keep-alive" in head) == (True, True)
        assert await asyncio.wait_for(reader.read(), 2.0) == b""  # the kept-alive connection was closed
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", server.port)


class TestEntityBudget:
    def snapshot_with(self, states: list[int], onsets: list[int]) -> MonitorSnapshot:
        snap = demo_snapshot()
        ids = np.arange(len(states), dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        health = HealthView(
            ids={"neuronlink": ids, "efa": empty, "chip": empty, "node": empty, "ultraserver": empty},
            states={"neuronlink": np.array(states), "efa": empty, "chip": empty, "node": empty,
                    "ultraserver": empty},
            reasons={"neuronlink": np.full(len(states), 2), "efa": empty, "chip": empty, "node": empty,
                     "ultraserver": empty},
            onsets={"neuronlink": np.array(onsets), "efa": empty, "chip": empty, "node": empty, "ultraserver": empty},
            worst={k: (empty, np.zeros(0)) for k in ("neuronlink", "efa", "chip")},
        )
        return MonitorSnapshot(generation=1, throughput=snap.throughput, chips_total=128, analysis_s=0.0,
                               analysed_ticks=1, health=health)

    def test_keeps_worst_then_longest_and_counts_the_rest(self) -> None:
        """Over budget, down links come first, then the longest unhealthy; the rest are counted as dropped."""
        snap = self.snapshot_with(states=[1, 2, 1, 1, 2], onsets=[50, 90, 10, 30, 95])
        families = EntityFamilies(build_topology("demo"), lambda: snap, max_series=3)
        text = families.render().decode()
        kept = re.findall(r'^rainier_neuronlink_unhealthy\{link="(\d+)"', text, re.MULTILINE)
        assert kept == ["1", "4", "2"]
        assert families.dropped["neuronlink"] == 2
        reasons = re.findall(r'^rainier_neuronlink_unhealthy_reason\{link="(\d+)",id="[^"]+",reason="bandwidth"\}',
                             text, re.MULTILINE)
        assert reasons == kept

    def test_a_real_nodes_reasons_and_a_stale_port_reach_their_series(self) -> None:
        """A chip failed by its execution errors and SRAM ECC, a straggler by utilisation, and an EFA port stale
        for its device gone: each state and reason has its series, named as the events name them."""
        snap = demo_snapshot()
        empty = np.zeros(0, dtype=np.int64)
        chips, ports = np.array([3, 9], np.int64), np.array([5], np.int64)
        health = HealthView(
            ids={"neuronlink": empty, "efa": ports, "chip": chips, "node": empty, "ultraserver": empty},
            states={"neuronlink": empty, "efa": np.array([3]), "chip": np.array([4, 1]), "node": empty,
                    "ultraserver": empty},
            reasons={"neuronlink": empty, "efa": np.array([int(Reason.ABSENT)]),
                     "chip": np.array([int(Reason.EXEC_ERRORS | Reason.SRAM_ECC_UNCORRECTED),
                                       int(Reason.UTILISATION)]), "node": empty, "ultraserver": empty},
            onsets={"neuronlink": empty, "efa": np.array([7]), "chip": np.array([5, 6]), "node": empty,
                    "ultraserver": empty},
            worst={k: (empty, np.zeros(0)) for k in ("neuronlink", "efa", "chip")},
        )
        snap = dataclasses.replace(snap, health=health)
        text = EntityFamilies(build_topology("demo"), lambda: snap).render().decode()
        rows = {(f.name, sample.labels.get("chip") or sample.labels.get("port"),
                 sample.labels.get("reason") or sample.labels.get("state"))
                for f in text_string_to_metric_families(text) for sample in f.samples}
        assert rows == {
            ("rainier_chip_unhealthy", "3", "failed"), ("rainier_chip_unhealthy", "9", "straggler"),
            ("rainier_chip_unhealthy_reason", "3", "sram_ecc_uncorrected"),
            ("rainier_chip_unhealthy_reason", "3", "exec_errors"),
            ("rainier_chip_unhealthy_reason", "9", "utilisation"),
            ("rainier_efa_port_unhealthy", "5", "stale"), ("rainier_efa_port_unhealthy_reason", "5", "absent")}

    def test_render_is_valid_exposition(self) -> None:
        """The text families parse as Prometheus exposition, one family each."""
        snap = self.snapshot_with(states=[1, 2], onsets=[1, 2])
        text = EntityFamilies(build_topology("demo"), lambda: snap).render().decode()
        names = [f.name for f in text_string_to_metric_families(text)]
        assert len(names) == len(set(names))
        assert "rainier_neuronlink_unhealthy" in names


class TestBeforeAnyTelemetry:
    def test_fleet_figures_are_absent_not_zero_until_telemetry_is_applied(self) -> None:
        """A monitor that has analysed but applied nothing exports no throughput or chips reporting
        at all (a fleet of zeros would read as a dead fleet); once a tick is applied, they appear."""
        topo = build_topology("demo")
        current: list[MonitorSnapshot] = [demo_snapshot(ticks=0)]
        assert current[0].throughput.tick < 0
        current[0] = with_status(MonitorStatus(), current[0])
        exporter = build_exporter(topo, lambda: current[0], process_metrics=False)

        def names() -> set[str]:
            text = exporter.render().decode()
            return {family.name for family in text_string_to_metric_families(text) if family.samples}

        fleet = {"rainier_fleet_fp8_effective_flops", "rainier_fleet_chips_reporting",
                 "rainier_ultraserver_fp8_effective_flops", "rainier_monitor_last_tick"}
        before = names()
        assert not fleet & before
        assert "rainier_mqtt_connected" in before  # the monitor's own state is there from the start
        current[0] = demo_snapshot(ticks=2)
        assert fleet <= names()


def demo_server(web: WebConfig | None = None) -> tuple[HttpServer, MetricsRoute]:
    """A server of the demo fleet's whole exporter (UltraServer and entity families included), and its
    /metrics route."""
    topo = build_topology("demo")
    snap = demo_snapshot()
    exporter = build_exporter(topo, lambda: snap)
    server = HttpServer(HttpConfig(host="127.0.0.1", port=0, web=web))
    metrics = route_metrics_and_probes(server, exporter.render, generation=lambda: 1,
                                       healthy=lambda: Verdict(True, "ok"), ready=lambda: Verdict(True, "ready"))
    return server, metrics


def fetch_twice(connection: http.client.HTTPConnection, headers: dict[str, str]) -> list[tuple[
        int, dict[str, str], bytes, object]]:
    """GET /metrics twice on one connection; return (status, headers, body, socket) of each."""
    out = []
    for _ in range(2):
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read()
        out.append((response.status, {k.lower(): v for k, v in response.getheaders()}, body, connection.sock))
    connection.close()
    return out


class TestGzipAndKeepAlive:
    async def test_gzip_when_accepted_on_one_kept_alive_connection(self) -> None:
        """A client that accepts gzip gets the same exposition gzipped, twice over one connection, and
        prometheus-client's parser reads it; the render is compressed once, not per scrape."""
        server, metrics = demo_server()
        await server.start()
        plain = await metrics.body()
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        first, second = await asyncio.to_thread(fetch_twice, connection, {"Accept-Encoding": "gzip"})
        await server.close()
        assert first[3] is second[3] is not None  # the same socket, still open
        for status, headers, body, _sock in (first, second):
            assert (status, headers["content-encoding"], headers["connection"], headers["vary"]) == (
                200, "gzip", "keep-alive", "Accept-Encoding")
            assert int(headers["content-length"]) == len(body) < len(plain) / 4
            assert gzip.decompress(body) == plain
        families = {f.name for f in text_string_to_metric_families(gzip.decompress(first[2]).decode())}
        assert {"rainier_fleet_fp8_peak_flops", "rainier_ultraserver_fp8_effective_flops"} <= families
        assert metrics.compressions == 1

    async def test_identity_without_gzip_and_close_on_request(self) -> None:
        """Without Accept-Encoding (or with gzip;q=0) the body is plain; ``Connection: close`` is honoured."""
        server, metrics = demo_server()
        await server.start()
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        first, second = await asyncio.to_thread(fetch_twice, connection, {"Accept-Encoding": "gzip;q=0, identity"})
        closing = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        closed = await asyncio.to_thread(fetch_twice, closing, {"Connection": "close"})
        await server.close()
        assert first[3] is second[3]
        assert "content-encoding" not in first[1]
        assert first[2] == second[2] == await metrics.body()
        assert closed[0][1]["connection"] == "close"
        assert closed[0][3] is None  # http.client dropped the socket the server closed
        assert metrics.compressions == 0

    async def test_tls_and_basic_auth_keep_working(self, tmp_path: Path) -> None:
        """Over TLS with basic auth, a kept-alive connection gets gzip once authorised, and 401 without it."""
        pki = make_pki(tmp_path)
        password = b"correct horse"
        (tmp_path / "web.yml").write_text(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n"
            f"  prometheus: {bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)).decode()}\n")
        server, metrics = demo_server(load_web_config(tmp_path / "web.yml"))
        await server.start()
        context = ssl.create_default_context(cafile=pki.ca_cert)
        authorised = {"Accept-Encoding": "gzip",
                      "Authorization": "Basic " + base64.b64encode(b"prometheus:" + password).decode()}
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5, context=context)
        first, second = await asyncio.to_thread(fetch_twice, connection, authorised)
        anonymous = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5, context=context)
        refused = await asyncio.to_thread(fetch_twice, anonymous, {"Accept-Encoding": "gzip"})
        await server.close()
        assert first[3] is second[3] is not None
        assert gzip.decompress(second[2]) == await metrics.body()
        assert [r[0] for r in refused] == [401, 401]
