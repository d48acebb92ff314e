"""The monitor's core hearing the neuron-monitor bridge at neuron-monitor's
documented default period of 5 s (issue 33): over simulated minutes, with and
without a stalled pipe, no counter is refused, no chip, node or feed falls
silent, and the FP8 FLOP counters grow by no more than the chips' peak over
the time elapsed.  The reports are the documentation-built generator's
(harness/neuron_monitor.py), each handed to one node's bridge when the
generator writes it, and its frame, as JSON, to the monitor's core a second
at a time, as the daemon would."""

from __future__ import annotations

import json

import pytest

from harness.neuron_monitor import NeuronMonitor, Stall, runtime_per_core
from rainierd.bridge import BridgeConfig, NodeBridge
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.ingest import Received
from rainierd.fleet.topology import build_fleet
from rainierd.wire import NodeFrame, decode_json

T0 = 1.7e9
NODES = 4  # one UltraServer
PEAK = BridgeConfig().hardware.fp8_dense_flops


def run(seconds: int, *, stall_node: int | None = None) -> tuple[MonitorCore, list[tuple[str, int, str]], float]:
    """Run ``seconds`` of 4 nodes' neuron-monitor at its default period through their bridges into a monitor
    analysing every second; return the core, the events (entity, id, new state) and the span of sample times."""
    topology = build_fleet(1, 1)
    core = MonitorCore(topology, MonitorConfig())
    written = []
    for node in range(NODES):
        faults = [Stall(start_s=100.0, duration_s=5.0)] if node == stall_node else []
        monitor = NeuronMonitor(runtimes=runtime_per_core(lnc=2), seed=node, faults=faults)
        bridge = NodeBridge(node=node, publisher=f"bridge-{node}", config=BridgeConfig())
        for sample in monitor.until(float(seconds)):
            outcome = bridge.process(sample.report, wall_s=T0 + sample.write_at_s + 0.001)
            if outcome.frame is not None:
                frame = decode_json(json.dumps(outcome.frame, allow_nan=False).encode())
                assert isinstance(frame, NodeFrame)
                written.append((sample.write_at_s + 0.001, frame))
    written.sort(key=lambda item: item[0])
    events, at = [], 0
    for second in range(1, seconds + 1):
        items = []
        while at < len(written) and written[at][0] <= second:
            wrote_s, frame = written[at]
            items.append(Received(float(second), None, frame, rx_wall_s=T0 + wrote_s))
            at += 1
        analysis = core.analyse_frames(items, now_s=float(second))
        core.ingest.record(analysis.flush)
        events += [(e.entity, e.id, e.after) for e in analysis.events]
    times = [frame.t_s for _, frame in written]
    return core, events, max(times) - min(times)


class TestTheMonitorHearsTheBridge:
    def test_five_second_reports_raise_nothing_and_refuse_nothing(self) -> None:
        """Five minutes of 5 s reports from four nodes, one node's pipe stalled 5 s and its backlog written at
        once: every frame applied, no counter refused, no event at all, each node judged by its declared 5 s,
        and the UltraServer's FLOP counter under its chips' peak x the margin x the time."""
        core, events, span_s = run(300, stall_node=2)
        assert events == []
        assert core.stats.counters_refused == {}
        assert dict(core.stats.rejected) == {}
        assert core.state.node_cadence.period_s[:NODES] == pytest.approx([5.0] * NODES, abs=0.1)
        flop = core.counter_sums.ultraserver["fp8_flop_total"][0]
        assert 0 < flop <= NODES * 16 * PEAK * 1.05 * span_s
