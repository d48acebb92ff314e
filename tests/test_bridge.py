"""Specification of the neuron-monitor bridge: what a report and the EFA
driver's counters become, on the shared samples' real formats (no I/O but
reading the sample files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rainierd.bridge import NeuronMonitorNode, read_efa_counters
from rainierd.bridge.run import find_node
from rainierd.errors import ConfigError
from rainierd.inventory import load_inventory
from rainierd.wire import CHIP_DTYPE, NodeFrame, decode_json

DATA = Path(__file__).parent / "data"
SAMPLES = DATA / "neuron-monitor"
INVENTORY = DATA / "inventory-two-sites.toml"


def reports() -> list[dict[str, object]]:
    return [json.loads(line) for line in (SAMPLES / "neuron-monitor-trn2.jsonl").read_text().splitlines()]


class TestEfaSysfs:
    def test_devices_in_natural_order_with_the_driver_counters(self) -> None:
        """16 devices, rdmap16s0 first (port 0), each with the seven counters the wire carries."""
        counters = read_efa_counters(SAMPLES / "efa-sysfs-t0")
        assert len(counters) == 16
        assert all(len(device) == 7 for device in counters)
        first = (SAMPLES / "efa-sysfs-t0/class/infiniband/rdmap16s0/ports/1/hw_counters/tx_bytes").read_text()
        assert counters[0]["tx_bytes"] == int(first)

    def test_a_missing_root_is_no_ports(self, tmp_path: Path) -> None:
        """A node without EFA devices under the root gives no port records, not an error."""
        assert read_efa_counters(tmp_path / "nothing") == []


class TestFrames:
    def test_a_report_becomes_a_partial_frame(self) -> None:
        """Chips carry util, FLOP, HBM and ECC; clock, temperature and power are left out; no links, no cooling."""
        topo = load_inventory(INVENTORY)
        bridge = NeuronMonitorNode(topo, 6, "bridge-test")
        report = reports()[0]
        body = bridge.frame(report, read_efa_counters(SAMPLES / "efa-sysfs-t0"), t_s=1_000.0)
        frame = decode_json(json.dumps(body).encode())
        assert isinstance(frame, NodeFrame)
        sizes = (len(frame.chips), len(frame.links), len(frame.efa), len(frame.cooling))
        assert (frame.node, sizes) == (6, (16, 0, 16, 0))
        assert frame.chips["chip"].tolist() == list(range(96, 112))
        cores = report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]  # type: ignore[index]
        in_use = cores["neuroncores_in_use"]
        util0 = sum(in_use[str(c)]["neuroncore_utilization"] for c in range(4)) / 4 / 100
        assert frame.chips["util"][0] == pytest.approx(util0, rel=1e-6)
        flops0 = sum(in_use[str(c)]["flops"] for c in range(4)) * cores["period"]
        assert frame.chips["fp8_flop_total"][0] == pytest.approx(flops0)
        assert frame.known is not None
        known = {n for i, n in enumerate(CHIP_DTYPE.names or ()) if int(frame.known["chips"][0]) >> i & 1}
        assert known == {"chip", "util", "hbm_used_bytes", "fp8_flop_total", "ecc_corrected_total",
                         "ecc_uncorrected_total"}

    def test_flop_adds_up_and_ecc_is_the_devices_total(self) -> None:
        """Over five reports the FLOP total is the sum of rate x period; device 4's ECC is its latest count."""
        topo = load_inventory(INVENTORY)
        bridge = NeuronMonitorNode(topo, 6, "bridge-test")
        expected = 0.0
        for i, report in enumerate(reports()):
            body = bridge.frame(report, [], t_s=1_000.0 + i)
            cores = report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]  # type: ignore[index]
            expected += sum(cores["neuroncores_in_use"][str(c)]["flops"] for c in range(4)) * cores["period"]
        assert body["chips"][0]["fp8_flop_total"] == pytest.approx(expected)
        assert body["chips"][4]["ecc_corrected_total"] == 7
        assert (body["seq"], body["efa"]) == (4, [])

    def test_the_node_is_found_by_hostname_or_id(self) -> None:
        """--node takes the inventory hostname or n<id>; anything else is a clear error."""
        topo = load_inventory(INVENTORY)
        assert (find_node(topo, "ip-10-0-18-10"), find_node(topo, "n6")) == (6, 6)
        with pytest.raises(ConfigError, match="not in topology"):
            find_node(topo, "n5")  # an id the inventory leaves empty
