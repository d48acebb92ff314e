"""Monitor shards (``--shard i/N``): each subscribes to its own UltraServers'
topics only, and the shards of a fleet, fed the same frames, add up to one
monitor: the same fleet totals and the same detected components.

In process, with the numpy core and the topic filters a shard subscribes to
(matched here as a broker matches them); tests/e2e/test_shards.py
runs the same over a real broker with real processes."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from rainierd.core.analysis import Analysis, MonitorCore
from rainierd.core.ingest import IngestStats, Message
from rainierd.exporter import build_exporter
from rainierd.fleet.shards import shard_view
from rainierd.fleet.topology import Topology, build_fleet, build_topology
from rainierd.monitor.snapshot import IngestCounts, MonitorSnapshot, MonitorStatus
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import batches_per_tick, tick_batches, tick_frames
from rainierd.wire import encode_binary
from rainierd.wire.topics import (
    BUCKETS,
    Shard,
    bucket_of,
    node_topic,
    parse_shard,
    parse_topic,
    telemetry_filters,
)
from tests.helpers import assert_valid_strictly, kustomize, tool

# 32 UltraServers, 2,048 chips: each shard's share of a site (8 UltraServers) is enough peers that one
# UltraServer's fault stands out from it as from the whole site (detection is relative to site peers).
TOPO = build_topology("sites=2,ultraservers=16")
DEPLOY = Path(__file__).parents[3] / "deploy"


def matches(topic_filter: str, topic: str) -> bool:
    """Return True if an MQTT ``topic_filter`` (``+`` one level, ``#`` the rest) matches ``topic``."""
    want, have = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(want):
        if level == "#":
            return True
        if i >= len(have) or (level != "+" and level != have[i]):
            return False
    return len(want) == len(have)


def subscribed(shard: Shard, topic: str, topo: Topology = TOPO) -> bool:
    """Return True if ``shard``'s subscriptions deliver ``topic``."""
    return any(matches(f, topic) for f in telemetry_filters(shard, n_sites=topo.n_sites))


class TestShardSpec:
    """Naming a shard, and which UltraServers, buckets and sites it owns."""

    def test_parse(self) -> None:
        """``i/N`` names shard i of N; the whole fleet is 0/1; anything else says what is wrong."""
        assert (parse_shard("1/4"), parse_shard(" 0/1 ").whole, str(parse_shard("3/8"))) == (Shard(1, 4), True, "3/8")
        for bad in ("4/4", "1", "-1/2", "0/0", "0/257", "a/b"):
            with pytest.raises(ValueError, match=r"i/N|shard"):
                parse_shard(bad)

    def test_every_ultraserver_and_site_facility_has_exactly_one_shard(self) -> None:
        """For any N, each UltraServer (and each site's facility) belongs to one shard, and shares differ by at
        most one bucket's worth."""
        for n in (1, 2, 3, 4, 7, 16, 256):
            shards = [Shard(i, n) for i in range(n)]
            owners = [[s.index for s in shards if s.owns_ultraserver(u)] for u in range(7_800)]
            assert all(len(o) == 1 for o in owners)
            sizes = np.bincount([o[0] for o in owners], minlength=n)
            assert sizes.max() - sizes.min() <= math.ceil(7_800 / BUCKETS), n
            assert all(sum(s.owns_site_facility(site) for s in shards) == 1 for site in range(5))

    def test_subscriptions_stay_few_at_rainier(self) -> None:
        """A shard subscribes to one filter per owned bucket plus its sites' facility topics: at rainier
        (3 sites, 7,800 UltraServers) 129 filters for each of 2 shards, 17 or 16 for each of 16."""
        assert telemetry_filters() == ["rainier/v1/telemetry/#"]
        assert [len(telemetry_filters(Shard(i, 2), n_sites=3)) for i in range(2)] == [130, 129]
        assert {len(telemetry_filters(Shard(i, 16), n_sites=3)) for i in range(16)} == {17, 16}

    def test_a_shard_hears_its_own_ultraservers_topics_only(self) -> None:
        """Node, batch and facility topics reach exactly the shard that owns them, whatever the fleet's size."""
        topo = build_topology("rainier")
        sample = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=1_000.0).step(0)
        shards = [Shard(i, 3) for i in range(3)]
        for topic, frame in tick_batches(topo, sample, publisher="p", nodes_per_batch=128):
            address = parse_topic(topic)
            assert address is not None
            hearers = [s for s in shards if subscribed(s, topic, topo)]
            if address.kind == "facility":
                assert hearers == [shards[address.site % 3]]
            else:
                uss = {int(topo.node_ultraserver[n]) for n in frame.node.tolist()}  # type: ignore[union-attr]
                assert {bucket_of(u) for u in uss} == {address.bucket}
                assert hearers == [s for s in shards if s.owns_ultraserver(next(iter(uss)))]
        assert [subscribed(s, node_topic(2, 7_799, 31_199), topo) for s in shards] == [
            s.owns_ultraserver(7_799) for s in shards]


# Faults on both shards' UltraServers in both sites (shard 0 of 2 owns the even ones, shard 1 the odd).
FAULTS = [
    Fault(FaultKind.NL_DOWN, 1 * 192 + 5, 0.0, 20, 10_000),  # a NeuronLink of u1
    Fault(FaultKind.CHIP_FAILED, 2 * 64 + 3, 0.0, 20, 10_000),  # a chip of u2
    Fault(FaultKind.EFA_DOWN, 20 * 64 + 9, 0.0, 20, 10_000),  # an EFA port of u20
    Fault(FaultKind.NODE_LOST, 19 * 4 + 1, 0.0, 20, 10_000),  # a node of u19
    Fault(FaultKind.COOLING_FAN, 5, 0.3, 20, 10_000, scope="ultraserver"),  # u5's fans
    Fault(FaultKind.COOLING_INLET, 22 * 4 + 2, 20.0, 20, 10_000, scope="node"),  # a node of u22
    Fault(FaultKind.CHIP_THROTTLE, 17 * 64 + 17, 0.5, 20, 10_000),  # a chip of u17
]
TICKS = 80
START_S = time.time() - TICKS  # sample times near now: the clock-skew check judges them


@dataclass
class Run:
    """What a monitor (or a shard) saw over the run: its last analysis and every event."""

    last: Analysis
    events: set[tuple[str, int, str, str]]


def messages(batch_nodes: int) -> Iterator[list[Message]]:
    """Yield each tick's MQTT messages of the simulated fleet (binary, as published)."""
    model = FleetModel(TOPO, np.random.default_rng(7), tick_s=1.0, start_s=START_S, faults=FAULTS)
    for tick in range(TICKS):
        sample = model.step(tick)
        frames = (tick_batches(TOPO, sample, publisher="sim", nodes_per_batch=batch_nodes) if batch_nodes
                  else tick_frames(TOPO, sample, publisher="sim"))
        t_s = sample.t_s + 0.2
        yield [Message(t_s, topic, encode_binary(frame), t_s) for topic, frame in frames]


def run(shards: list[Shard], batch_nodes: int) -> list[Run]:
    """Feed the same ticks to a core per shard, each only what its subscriptions deliver."""
    cores = [MonitorCore(shard_view(TOPO, s)) for s in shards]
    runs: list[Run | None] = [None] * len(shards)
    events: list[set[tuple[str, int, str, str]]] = [set() for _ in shards]
    for tick, window in enumerate(messages(batch_nodes)):
        now_s = max(m.rx_s for m in window)
        for i, (shard, core) in enumerate(zip(shards, cores, strict=True)):
            analysis = core.analyse([m for m in window if subscribed(shard, m.topic)], now_s=now_s, tick=tick)
            core.ingest.record(analysis.flush)
            events[i] |= {(e.entity, e.id, e.before, e.after) for e in analysis.events}
            runs[i] = Run(analysis, events[i])
    return [r for r in runs if r is not None]


def unhealthy(analysis: Analysis) -> set[tuple[str, int, int]]:
    """Return every unhealthy (entity, id, state)."""
    health = analysis.health
    return {(entity, int(i), int(s)) for entity, ids in health.ids.items()
            for i, s in zip(ids.tolist(), health.states[entity].tolist(), strict=True)}


@pytest.fixture(scope="module", params=[128, 0], ids=["batches", "node-frames"])
def runs(request: pytest.FixtureRequest) -> tuple[Run, list[Run]]:
    """One monitor and two shards over the same simulated fleet, seed and faults."""
    (whole,) = run([Shard()], request.param)
    return whole, run([Shard(0, 2), Shard(1, 2)], request.param)


class TestTwoShardsAddUpToOneMonitor:
    """Two shards fed the same frames as one monitor."""

    def test_fleet_totals_are_equal(self, runs: tuple[Run, list[Run]]) -> None:
        """Peak, delivered and effective FLOP/s, chips reporting and FLOP executed, summed over the shards,
        equal one monitor's within 1e-9 relative, and each shard holds a real share."""
        whole, shards = runs
        def totals(a: Analysis) -> dict[str, float]:
            tp = a.throughput
            assert a.aggregates is not None
            return {"peak": tp.fleet_peak, "delivered": tp.fleet_delivered, "effective": tp.fleet_effective,
                    "chips_fresh": float(tp.chips_fresh),
                    "fp8_flop": float(a.aggregates.site_counters["fp8_flop_total"].sum())}
        one = totals(whole.last)
        summed = {k: sum(totals(s.last)[k] for s in shards) for k in one}
        assert summed == pytest.approx(one, rel=1e-9, abs=0)
        assert all(0 < totals(s.last)["peak"] < one["peak"] for s in shards)
        assert one["delivered"] < one["peak"]  # the faults cost something

    def test_site_totals_and_lost_flops_by_cause_are_equal(self, runs: tuple[Run, list[Run]]) -> None:
        """Per site, throughput and the FLOP/s lost to each cause summed over the shards equal one monitor's within
        1e-9 relative: every cause is decided by an UltraServer's own figures, a stall (failed chip, stale
        telemetry) by the healthy share that UltraServer had while it ran (core/model.py, HealthyShares)."""
        whole, shards = runs
        for level in ("site_peak", "site_delivered", "site_effective"):
            np.testing.assert_allclose(sum(getattr(s.last.throughput, level) for s in shards),
                                       getattr(whole.last.throughput, level), rtol=1e-9, atol=0)
        for cause, values in whole.last.lost.site.items():
            np.testing.assert_allclose(sum(s.last.lost.site[cause] for s in shards), values, rtol=1e-9, atol=1e-3,
                                       err_msg=cause)
        assert all(v.sum() > 0 for c, v in whole.last.lost.site.items() if c != "straggler")

    def test_detected_components_are_the_same(self, runs: tuple[Run, list[Run]]) -> None:
        """The unhealthy entities now, and every health event of the run, are one monitor's, split between
        the shards with nothing twice."""
        whole, shards = runs
        now = [unhealthy(s.last) for s in shards]
        assert now[0] | now[1] == unhealthy(whole.last)
        assert not now[0] & now[1]
        assert shards[0].events | shards[1].events == whole.events
        assert {entity for entity, *_ in unhealthy(whole.last)} >= {"neuronlink", "chip", "efa", "node"}
        assert all(now)  # both shards detected something of their own

    def test_a_shard_exports_its_own_share_only(self, runs: tuple[Run, list[Run]]) -> None:
        """A shard's scrape names its own UltraServers and sites' facility only, and says which shard it is."""
        _whole, shards = runs
        shard = Shard(1, 2)
        snapshot = _snapshot(shards[1].last, shard_view(TOPO, shard))
        exporter = build_exporter(TOPO, lambda: snapshot, shard=shard, process_metrics=False)
        registry = exporter.registry
        assert registry.get_sample_value("rainier_shards", {"shard": "1"}) == 2
        assert registry.get_sample_value("rainier_fleet_chips_inventory") == TOPO.n_chips
        assert registry.get_sample_value("rainier_fleet_chips") == TOPO.n_chips / 2
        text = exporter.render().decode()
        assert {line.split('ultraserver="')[1].split('"')[0] for line in text.splitlines()
                if line.startswith("rainier_ultraserver_fp8_peak_flops")} == {f"u{u}" for u in range(1, 32, 2)}
        assert registry.get_sample_value("rainier_site_water_cubic_meters_total", {"site": "s1"}) is not None
        assert registry.get_sample_value("rainier_site_water_cubic_meters_total", {"site": "s0"}) is None


def _snapshot(analysis: Analysis, topo: Topology) -> MonitorSnapshot:
    return MonitorSnapshot.of(analysis, generation=1, chips_total=topo.n_present_chips, analysis_s=0.01,
                              analysed_ticks=TICKS, events={}, lag_s=0.5,
                              status=MonitorStatus(ingest=IngestCounts.of(IngestStats())))


class TestShardedDeployments:
    """deploy/compose.sharded.yaml and deploy/kubernetes/sharded, checked offline as the base ones are."""

    @pytest.mark.integration  # runs check-jsonschema
    def test_compose_override_matches_the_compose_spec_and_gives_each_monitor_its_shard(self) -> None:
        """check-jsonschema accepts the override; its two monitors are shards 0/2 and 1/2, both scraped."""
        path = DEPLOY / "compose.sharded.yaml"
        result = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
                                capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        services = yaml.safe_load(path.read_text())["services"]
        assert {n: s["environment"]["RAINIERD_SHARD"] for n, s in services.items() if "environment" in s} == {
            "monitor": "0/2", "monitor-1": "1/2"}
        scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.sharded.yml").read_text())["scrape_configs"]
        assert [c["static_configs"][0]["targets"] for c in scrape if c["job_name"] == "rainierd"] == [
            ["monitor:9780", "monitor-1:9780"]]

    @pytest.mark.kubectl
    def test_kubernetes_overlay_renders_a_statefulset_of_shards_that_validates_strictly(self, tmp_path: Path) -> None:
        """kubectl kustomize renders the overlay: a StatefulSet whose pod ordinal is the shard index and whose
        replicas are the shard count, in place of the monitor Deployment and its volume; kubernetes-validate
        --strict accepts every built-in kind."""
        manifests = kustomize(DEPLOY / "kubernetes" / "sharded")
        kinds = sorted((m["kind"], m["metadata"]["name"]) for m in manifests)
        assert ("StatefulSet", "rainierd-monitor") in kinds
        assert ("Deployment", "rainierd-monitor") not in kinds
        assert ("PersistentVolumeClaim", "rainierd-monitor-state") not in kinds
        (shards,) = [m for m in manifests if m["kind"] == "StatefulSet"]
        env = {e["name"]: e for e in shards["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["RAINIERD_POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['apps.kubernetes.io/pod-index']")
        assert env["RAINIERD_SHARD"]["value"] == f"$(RAINIERD_POD_INDEX)/{shards['spec']['replicas']}"
        builtin = [m for m in manifests if m["kind"] not in ("ServiceMonitor", "PrometheusRule")]
        assert_valid_strictly(builtin, tmp_path)


@pytest.mark.parametrize(("sites", "ultraservers"), [(1, 2), (1, 512), (3, 40), (2, 700)])
def test_the_simulator_sizes_its_outbox_for_the_bucketed_batches(sites: int, ultraservers: int) -> None:
    """A tick is one batch per site and bucket (more where a bucket outgrows a batch): batches_per_tick, which
    sizes the simulator's outbox, counts exactly what tick_batches yields (a count by site alone was 16x short
    at 512 UltraServers, and the simulator dropped most of every tick)."""
    topo = build_fleet(sites, ultraservers)
    sample = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=0.0).step(0)
    for per_batch in (8, 128):
        yielded = sum(1 for topic, _ in tick_batches(topo, sample, publisher="t", nodes_per_batch=per_batch)
                      if "/batch/" in topic)
        assert batches_per_tick(topo, per_batch) == yielded
