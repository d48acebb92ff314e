"""The bridge against the neuron-monitor generator written independently from
AWS's documentation (harness/neuron_monitor.py), with its ground truth: over
the documentation's open choices (a group not due repeated or left out,
physical cores numbered across the node or per device, LNC 1 or 2, the
2.21-era hardware info) and a stalled pipe, every device's utilisation,
FLOP total and FLOP rate between frames are the truth's, and no rate is
above the chip's peak.  Pure: the lines are handed to the node's bridge
with the wall time the generator says they are written at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.efa_sysfs import EfaDegraded, EfaNode, EfaSysfsTree, EfaVanish
from harness.neuron_monitor import Choices, NeuronMonitor, NodeSpec, Schedule, Stall, runtime_per_core
from rainierd.bridge import BridgeConfig, EfaPorts, NodeBridge, natural_order, read_efa
from rainierd.bridge._values import Refusals
from rainierd.wire import NodeFrame, decode_json

T0 = 1.7e9
PEAK = BridgeConfig().hardware.fp8_dense_flops

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "2.21-era hardware info": {"node": NodeSpec(hardware_info_shape="2.21")},
    "LNC=1 without v3d": {"node": NodeSpec(lnc=1), "choices": Choices(v3d_at_lnc1=False)},
    "v3d numbered per device": {"choices": Choices(physical_core_numbering="per_device")},
    "ECC every 2 s, left out between": {"schedule": Schedule(period_s=1.0,
                                                             group_period_s={"neuron_hw_counters": 2.0}),
                                        "choices": Choices(stale_groups="omit")},
    "a 5 s stall": {"faults": [Stall(start_s=10.0, duration_s=5.0)]},
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_bridge_reads_what_the_generator_says(case: str) -> None:
    """Per device: utilisation as the truth's, FLOP total the truth's sum, each FLOP rate between two frames the
    truth's rate, never above peak; every frame one the wire accepts."""
    kw = {"schedule": Schedule(period_s=1.0), **CASES[case]}
    node = kw.pop("node", NodeSpec())
    monitor = NeuronMonitor(node=node, runtimes=runtime_per_core(lnc=node.lnc), seed=11, **kw)
    bridge = NodeBridge(node=0, publisher="n0", config=BridgeConfig())
    flop = np.zeros(16)
    last: dict[int, tuple[float, float, int]] = {}
    rate_errors, util_errors = [], []
    for sample in monitor.until(30.0):
        truth = sample.truth
        if truth.cores is not None and truth.cores.fresh:
            flop += truth.cores.flop
        outcome = bridge.process(sample.report, wall_s=T0 + sample.write_at_s + 0.001)
        if outcome.frame is None:
            continue
        assert isinstance(decode_json(json.dumps(outcome.frame, allow_nan=False).encode()), NodeFrame)
        assert truth.cores is not None
        for chip in outcome.frame["chips"]:
            d = chip["chip"]
            if "util" in chip:
                util_errors.append(abs(chip["util"] - truth.cores.util_pct[d] / 100))
            if "fp8_flop_total" not in chip:
                last.pop(d, None)
                continue
            if d in last and last[d][2] == outcome.frame["seq"] - 1:
                rate = (chip["fp8_flop_total"] - last[d][1]) / (outcome.frame["t_s"] - last[d][0])
                assert rate <= PEAK
                rate_errors.append(abs(rate / truth.cores.flop_rate_s[d] - 1))
            last[d] = (outcome.frame["t_s"], chip["fp8_flop_total"], outcome.frame["seq"])
    totals = np.array([last[d][1] for d in range(16)])
    assert (len(util_errors) > 16 * 20, max(util_errors) < 1e-9, len(rate_errors) > 16 * 20) == (True, True, True)
    assert (max(rate_errors) < 1e-6, totals.tolist()) == (True, pytest.approx(flop.tolist(), rel=1e-12))


def test_efa_ports_by_name_against_the_generators_sysfs(tmp_path: Path) -> None:
    """The generator's EFA tree (names whose text and numeric orders differ, one device vanishing for 3 s and
    coming back with its counters restarted, one degraded): each port is one device by name for the whole run,
    the vanished one present false meanwhile and never going backwards, every other port's tx bytes growing by
    the truth's increments, nothing refused."""
    root = tmp_path / "sys"
    tree = EfaSysfsTree(root / "class" / "infiniband", EfaNode(seed=3, faults=[
        EfaVanish(device=2, start_s=5.0, stop_s=8.0), EfaDegraded(device=9, start_s=3.0)]))
    ports, refusals = EfaPorts(first_port=0, config=BridgeConfig()), Refusals()
    order = natural_order(list(tree.node.device_names))
    totals: list[dict[int, dict[str, Any]]] = []
    truths = []
    for t in range(1, 12):
        truths.append(tree.step(float(t)))
        totals.append({r["port"]: r for r in ports.records(read_efa(root, clock=lambda t=t: float(t)), refusals)})
    vanished = order.index(tree.node.device_names[2])
    assert [totals[k][vanished]["present"] for k in range(11)] == [t.present[2] for t in truths]
    seen = [r["tx_bytes_total"] for r in (totals[k][vanished] for k in range(11)) if "tx_bytes_total" in r]
    assert seen == sorted(seen)
    for device, name in enumerate(tree.node.device_names):
        if device == 2:
            continue
        grown = np.diff([totals[k][order.index(name)]["tx_bytes_total"] for k in range(11)])
        assert grown.tolist() == [int(t.delta["tx_bytes"][device]) for t in truths[1:]]
    # The returning device's counters restarted: each that had counted anything went backwards once.
    assert (refusals.counts, dict(ports.resets)) == ({}, dict.fromkeys(
        ("tx_bytes", "rx_bytes", "retrans_bytes", "retrans_pkts", "rx_drops", "keep_alive_rcvd"), 1))
