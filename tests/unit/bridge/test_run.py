"""Specification of the bridge role on the event loop (rainierd/bridge/run.py)
and its metrics (rainierd/bridge/_metrics.py), without processes: no line
ends it, each skip and refusal is counted by reason, frames reach the
outbox, and the probes and /metrics say what happened."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prometheus_client import CollectorRegistry

from rainierd.bridge import BridgeConfig, NodeBridge, find_node
from rainierd.bridge._metrics import BridgeCollector
from rainierd.bridge.run import MAX_LINE_BYTES, NeuronMonitorBridge
from rainierd.errors import ConfigError
from rainierd.fleet.inventory import load_inventory
from rainierd.http.config import HttpConfig
from rainierd.http.webconfig import load_web_config
from rainierd.settings import load_settings
from tests.bridge_reports import busy

INVENTORY = Path(__file__).parents[2] / "data" / "inventory-two-sites.toml"


def role(**config: Any) -> NeuronMonitorBridge:
    return NeuronMonitorBridge(NodeBridge(node=2, publisher="n2", config=BridgeConfig(**config)), efa_root=None,
                               topic="rainier/v1/telemetry/s0/b0/u0/n2", qos=0)


def stream(*parts: bytes) -> Callable[[int], Awaitable[bytes]]:
    chunks = list(parts)

    async def read(_n: int) -> bytes:
        return chunks.pop(0) if chunks else b""

    return read


def report_line(k: int) -> bytes:
    """Return a busy node's report as one line, its periods nudged by ``k`` ns (each a new capture)."""
    document = copy.deepcopy(busy([0, 1]))
    for entry in document["neuron_runtime_data"]:
        entry["report"]["neuroncore_counters"]["period"] += k * 1e-9
    return json.dumps(document).encode() + b"\n"


def metric(bridge: NeuronMonitorBridge, name: str, **labels: str) -> float | None:
    registry = CollectorRegistry()
    registry.register(BridgeCollector(lambda: bridge.status))
    return registry.get_sample_value(name, labels)


class TestLines:
    async def test_no_line_ends_the_bridge(self) -> None:
        """Non-JSON, an array, a blank line, a 17 MiB line, deep nesting and a NaN-laden report between two good
        ones: each counted by reason, both good ones become frames, and the input's end stops it."""
        bridge, stop = role(), asyncio.Event()
        bad = [b"not json\n", b"[1, 2]\n", b"\n", b"x" * (MAX_LINE_BYTES + 1) + b"\n", b"[" * 100_000 + b"\n"]
        nan = report_line(5).replace(b'"flops": 100000000000000.0', b'"flops": NaN')
        await bridge.read_input(stream(report_line(0), *bad, nan, report_line(1)), stop, drain_s=0.0)
        assert (stop.is_set(), bridge.lines, bridge.reports, dict(bridge.skipped), bridge.outbox.qsize()) == (
            True, 8, 3, {"not_json": 2, "not_object": 1, "empty": 1, "oversize": 1}, 3)
        assert metric(bridge, "rainier_bridge_values_refused_total", field="flops", reason="non_finite") == 8

    async def test_frames_are_json_node_frames_in_sequence(self) -> None:
        """Each report's frame is queued as compact JSON, seq counting from 0."""
        bridge = role()
        await bridge.read_input(stream(report_line(0), report_line(1)), asyncio.Event(), drain_s=0.0)
        frames = [json.loads(bridge.outbox.get_nowait()) for _ in range(2)]
        assert [(f["kind"], f["node"], f["seq"], len(f["chips"])) for f in frames] == [("node", 2, 0, 16),
                                                                                         ("node", 2, 1, 16)]

    async def test_a_report_of_another_instance_is_refused_and_counted(self) -> None:
        """The inventory says another instance: no frame, counted instance_mismatch."""
        bridge = role(instance_id="i-0a1b2c3d4e5f60718")
        await bridge.read_input(stream(report_line(0)), asyncio.Event(), drain_s=0.0)
        assert (bridge.outbox.qsize(), metric(bridge, "rainier_bridge_reports_refused_total",
                                              reason="instance_mismatch")) == (0, 1)

    async def test_a_defect_on_one_line_is_a_skip(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """If the bridge itself fails on a line, that line is skipped (bridge_error) and the next is bridged."""
        bridge = role()
        real = bridge.node.process
        calls = iter((ZeroDivisionError("a defect"),))

        def flaky(*args: Any, **kw: Any) -> Any:
            if (error := next(calls, None)) is not None:
                raise error
            return real(*args, **kw)

        monkeypatch.setattr(bridge.node, "process", flaky)
        await bridge.read_input(stream(report_line(0), report_line(1)), asyncio.Event(), drain_s=0.0)
        assert (dict(bridge.skipped), bridge.outbox.qsize()) == ({"bridge_error": 1}, 1)


class TestProbesAndMetrics:
    def test_ready_only_connected_and_publishing(self) -> None:
        """Not ready before a frame is published or while MQTT is down; ready after one is."""
        bridge = role()
        verdicts = [bridge.ready().reason]
        bridge.connection.connected = True
        verdicts.append(bridge.ready().reason)
        bridge.last_published, bridge.period_s = time.monotonic(), 1.0
        verdicts.append(bridge.ready().reason)
        bridge.last_published -= 10.0
        verdicts.append(bridge.ready().reason)
        assert verdicts == ["mqtt not connected", "no frame published yet", "ready", "no frame published for 10 s"]

    def test_healthy_unless_a_line_is_stuck(self) -> None:
        """A line in the works for over 30 s (a hung sysfs read) makes /healthz fail."""
        bridge = role()
        healthy = bridge.healthy().ok
        bridge.busy_since = time.monotonic() - 31.0
        assert (healthy, bridge.healthy().ok) == (True, False)

    async def test_every_reason_is_a_series_from_the_start(self) -> None:
        """Before any line, each skip reason, clock resync reason and drop reason reads 0."""
        bridge = role()
        assert [metric(bridge, name, reason=reason) for name, reason in (
            ("rainier_bridge_lines_skipped_total", "oversize"), ("rainier_bridge_clock_resyncs_total", "behind"),
            ("rainier_bridge_frames_dropped_total", "outbox_full"))] == [0.0, 0.0, 0.0]

    async def test_the_lag_and_period_of_the_last_frame(self) -> None:
        """After a frame, the sample lag and the period it declared."""
        bridge = role()
        await bridge.read_input(stream(report_line(0)), asyncio.Event(), drain_s=0.0)
        assert (metric(bridge, "rainier_bridge_sample_lag_seconds"), metric(bridge, "rainier_bridge_period_seconds"),
                metric(bridge, "rainier_bridge_reports_read_total")) == (0.0, 1.0, 1.0)


class TestNode:
    def test_the_node_is_found_by_hostname_or_id(self) -> None:
        """--node takes the inventory hostname or n<id>; anything else is a clear error."""
        topology = load_inventory(INVENTORY)
        assert (find_node(topology, "ip-10-0-18-10"), find_node(topology, "n6")) == (6, 6)
        with pytest.raises(ConfigError, match="not in topology"):
            find_node(topology, "n5")  # an id the inventory leaves empty


class TestSettings:
    def test_each_setting_and_the_inventory_reach_the_bridge(self, tmp_path: Path) -> None:
        """ecc_counts and sample_max_lag_s from the settings; the node's instance id, EFA device names and port
        count from the inventory."""
        inventory = tmp_path / "fleet.toml"
        inventory.write_text(INVENTORY.read_text().replace(
            'instance_id = "i-0a1b2c3d4e5f60722"',
            'instance_id = "i-0a1b2c3d4e5f60722"\n    efa_devices = ["rdmap32s0", "rdmap16s0"]'))
        settings = load_settings({"topology": str(inventory), "ecc_counts": "cumulative", "sample_max_lag_s": 7.0})
        topology = load_inventory(inventory)
        config = settings.bridge_config(topology, 6)
        assert (config.ecc_counts, config.max_lag_s, config.instance_id, config.efa_devices, config.efa_ports_per_node,
                config.chips_per_node) == (
            "cumulative", 7.0, "i-0a1b2c3d4e5f60722", ("rdmap32s0", "rdmap16s0"), 16, 16)
        assert (settings.bridge_config(topology, 0).efa_devices, load_settings({}).ecc_counts) == (None, "per-period")

    def test_the_role_takes_its_own_config_built_from_the_settings(self, tmp_path: Path) -> None:
        """Settings.bridge_role_config: the node named by hostname, its topic and names, the bridge's own
        figures, its broker as n<id>, and its HTTP side at bridge_listen with every role's web config and limits."""
        web = tmp_path / "web.yml"
        hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
        web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        settings = load_settings({"topology": str(INVENTORY), "ecc_counts": "cumulative", "mqtt_qos": 1,
                                  "bridge_listen": "0.0.0.0:9999", "web_config_file": str(web),
                                  "http_max_connections": 9, "http_max_handshakes": 3,
                                  "http_unauthenticated_idle_s": 2.0})
        config = settings.bridge_role_config(node_name="ip-10-0-18-10")
        topology = load_inventory(INVENTORY)
        assert (config.node, config.node_name, config.topic, config.bridge, config.mqtt.client_id,
                config.mqtt.qos) == (6, "ip-10-0-18-10", "rainier/v1/telemetry/s0/b1/u1/n6",
                                     settings.bridge_config(topology, 6), "n6", 1)
        assert config.http == HttpConfig(host="0.0.0.0", port=9999, web=load_web_config(web), max_connections=9,
                                         max_handshakes=3, unauthenticated_idle_s=2.0)
        named = load_settings({"mqtt_client_id": "bridge-6"}).bridge_role_config(node_name="n6")
        assert named.mqtt.client_id == "bridge-6"
        with pytest.raises(ConfigError, match="not in topology"):
            settings.bridge_role_config(node_name="n5")
