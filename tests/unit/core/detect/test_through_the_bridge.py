"""The chip judgements of issue 33 on what a real node sends (``core/detect/chips.py``, ``chip_peers.py``,
``chip_errors.py``): the documentation-built neuron-monitor (harness/neuron_monitor.py) with one fault on one
device of one node, through that node's bridge, into the monitor's core, at neuron-monitor's default 5 s period
and without any clock.  Each fault names its chip with its reason within two minutes, and nothing else raises;
the same four nodes without a fault raise nothing (tests/unit/bridge/test_monitor.py).

The bridge maps a node's devices to its chips in order, so device 3 of node 1 is chip 16 + 3 = 19.
"""

from __future__ import annotations

import functools
import json

import pytest

from harness.neuron_monitor import (
    DeviceVanish,
    EccErrors,
    ExecErrors,
    Fault,
    LowFlop,
    NeuronMonitor,
    UtilCollapse,
    runtime_per_core,
)
from rainierd.bridge import BridgeConfig, NodeBridge
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.ingest import Received
from rainierd.fleet.topology import build_fleet
from rainierd.wire import NodeFrame, decode_json

T0 = 1.7e9
NODES = 4  # one UltraServer
NODE, DEVICE = 1, 3
CHIP = NODE * 16 + DEVICE
ONSET_S = 120.0
SECONDS = 300


@functools.cache
def raises(fault: Fault | None) -> tuple[tuple[float, str, int, str, tuple[str, ...]], ...]:
    """Run four nodes' neuron-monitor (``fault`` on device 3 of node 1) through their bridges into a monitor
    analysing every second for five minutes; return every raise as (second, entity, id, state, reasons)."""
    topology = build_fleet(1, 1)
    core = MonitorCore(topology, MonitorConfig())
    written = []
    for node in range(NODES):
        faults = [fault] if fault is not None and node == NODE else []
        monitor = NeuronMonitor(runtimes=runtime_per_core(lnc=2), seed=node, faults=faults)
        bridge = NodeBridge(node=node, publisher=f"bridge-{node}", config=BridgeConfig())
        for sample in monitor.until(float(SECONDS)):
            outcome = bridge.process(sample.report, wall_s=T0 + sample.write_at_s + 0.001)
            if outcome.frame is not None:
                frame = decode_json(json.dumps(outcome.frame, allow_nan=False).encode())
                assert isinstance(frame, NodeFrame)
                written.append((sample.write_at_s + 0.001, frame))
    written.sort(key=lambda item: item[0])
    out, at = [], 0
    for second in range(1, SECONDS + 1):
        items = []
        while at < len(written) and written[at][0] <= second:
            wrote_s, frame = written[at]
            items.append(Received(float(second), None, frame, rx_wall_s=T0 + wrote_s))
            at += 1
        analysis = core.analyse_frames(items, now_s=float(second))
        core.ingest.record(analysis.flush)
        out += [(float(second), e.entity, e.id, e.after, e.reasons) for e in analysis.events if e.raised]
    return tuple(out)


class TestFaultsThroughTheBridge:
    @pytest.mark.parametrize(("fault", "state", "reason"), [
        (LowFlop(device=DEVICE, start_s=ONSET_S), "straggler", "efficiency"),
        (UtilCollapse(device=DEVICE, start_s=ONSET_S), "straggler", "utilisation"),
        (ExecErrors(device=DEVICE, start_s=ONSET_S), "failed", "exec_errors"),
        (ExecErrors(device=DEVICE, start_s=ONSET_S, kind="timed_out"), "failed", "exec_timeouts"),
        (DeviceVanish(device=DEVICE, start_s=ONSET_S), "failed", "absent"),
        (EccErrors(device=DEVICE, start_s=ONSET_S), "failed", "ecc_uncorrected"),
        (EccErrors(device=DEVICE, start_s=ONSET_S, kind="sram_ecc_uncorrected"), "failed", "sram_ecc_uncorrected"),
    ], ids=["low_flop", "util_collapse", "exec_errors", "exec_timeouts", "device_vanish", "hbm_ecc", "sram_ecc"])
    def test_each_fault_names_its_chip_with_its_reason(self, fault: Fault, state: str, reason: str) -> None:
        """The fault's chip is raised once, in its state with its reason, within two minutes of its onset (six
        5 s reports agree for a peer judgement), and nothing else raises (uncorrectable ECC errors every few
        seconds hold the chip failed instead of raising it again at each)."""
        raised = raises(fault)
        assert [(entity, id_, after) for _t, entity, id_, after, _r in raised] == [("chip", CHIP, state)]
        second, *_rest, reasons = raised[0]
        assert reason in reasons
        assert ONSET_S <= second <= ONSET_S + 120

    def test_without_a_fault_nothing_raises(self) -> None:
        """The same four nodes, healthy, raise nothing in five minutes."""
        assert raises(None) == ()
