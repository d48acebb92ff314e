"""Specification of the neuron-monitor bridge on the captured samples
(tests/data/neuron-monitor: five reports of a trn2 node, two EFA sysfs
snapshots): what they become, whole.  The samples are one node's output,
not the specification (the tests beside this one build each documented
shape by hand from AWS's user guide)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rainierd.bridge import BridgeConfig, NodeBridge, read_efa
from rainierd.wire import CHIP_DTYPE, NodeFrame, decode_json

SAMPLES = Path(__file__).parents[2] / "data" / "neuron-monitor"


def reports() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SAMPLES / "neuron-monitor-trn2.jsonl").read_text().splitlines()]


def in_use(report: dict[str, Any]) -> dict[str, Any]:
    return report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]  # type: ignore[no-any-return]


class TestSampleReports:
    def test_a_report_becomes_a_frame_with_what_neuron_monitor_knows(self) -> None:
        """Chips carry presence, util, HBM, FLOP, HBM and SRAM ECC; the runtime spans all 16 chips, so its
        execution errors are nobody's; no clock, temperature, power, links or cooling."""
        bridge = NodeBridge(node=6, publisher="n6", config=BridgeConfig())
        body = bridge.process(reports()[0], wall_s=1_000.0).frame
        frame = decode_json(json.dumps(body).encode())
        assert isinstance(frame, NodeFrame)
        assert (frame.node, frame.chips["chip"].tolist(), len(frame.links), len(frame.cooling), frame.period_s) == (
            6, list(range(96, 112)), 0, 0, in_use(reports()[0])["period"])
        assert frame.known is not None
        known = {n for i, n in enumerate(CHIP_DTYPE.names or ()) if int(frame.known["chips"][0]) >> i & 1}
        assert known == {"chip", "util", "hbm_used_bytes", "fp8_flop_total", "ecc_corrected_total",
                         "ecc_uncorrected_total", "sram_ecc_corrected_total", "sram_ecc_uncorrected_total", "present"}

    def test_flop_is_each_reports_rate_times_its_period(self) -> None:
        """Over the five reports, chip 0's FLOP total is the sum of its cores' flops times each report's period."""
        bridge = NodeBridge(node=6, publisher="n6", config=BridgeConfig())
        expected = 0.0
        for i, report in enumerate(reports()):
            body = bridge.process(report, wall_s=1_000.0 + 1.01 * i).frame
            cores = in_use(report)
            expected += sum(cores["neuroncores_in_use"][str(c)]["flops"] for c in range(4)) * cores["period"]
        assert body is not None
        assert (body["chips"][0]["fp8_flop_total"], body["seq"]) == (pytest.approx(expected), 4)

    def test_ecc_counts_are_per_period_by_default(self) -> None:
        """Device 4's corrected HBM counts, read per period (AWS's neuron-monitor-prometheus.py does), add up."""
        bridge = NodeBridge(node=6, publisher="n6", config=BridgeConfig())
        counts = [next(d for d in r["system_data"]["neuron_hw_counters"]["neuron_devices"]
                       if d["neuron_device_index"] == 4)["mem_ecc_corrected"] for r in reports()]
        for i, report in enumerate(reports()):
            body = bridge.process(report, wall_s=1_000.0 + 1.01 * i).frame
        assert body is not None
        assert body["chips"][4]["ecc_corrected_total"] == sum(counts)


class TestSampleSysfs:
    def test_sixteen_ports_by_name_with_the_driver_counters(self) -> None:
        """The tree's 16 devices become ports 96-111 of node 6 in natural order, each with the seven counters the
        sample has (no rx_drops, RDMA errors, keep-alive or state in it: left out)."""
        bridge = NodeBridge(node=6, publisher="n6", config=BridgeConfig())
        body = bridge.process(reports()[0], wall_s=1_000.0, efa=lambda: read_efa(SAMPLES / "efa-sysfs-t0")).frame
        assert body is not None
        first = int((SAMPLES / "efa-sysfs-t0/class/infiniband/rdmap16s0/ports/1/hw_counters/tx_bytes").read_text())
        assert ([p["port"] for p in body["efa"]], bridge.ports.names[:2] if bridge.ports.names else None) == (
            list(range(96, 112)), ("rdmap16s0", "rdmap32s0"))
        assert (body["efa"][0]["tx_bytes_total"], sorted(body["efa"][0])) == (first, sorted([
            "port", "present", "tx_bytes_total", "rx_bytes_total", "retrans_bytes_total", "retrans_pkts_total",
            "retrans_timeout_events_total", "unresponsive_remote_events_total", "impaired_remote_conn_events_total"]))
