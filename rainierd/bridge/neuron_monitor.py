"""AWS neuron-monitor's reports, turned into a node's rainierd frames.

neuron-monitor (the Neuron SDK's monitoring tool) streams one JSON report a
period to stdout.  What it knows of each Neuron device (a Trainium2 chip)
maps onto the chip record; what it does not know is left out of the frame,
so the monitor keeps it unknown rather than judging invented values:

=================================  ==========================================
chip field                         from the report
=================================  ==========================================
``util``                           mean ``neuroncore_utilization`` / 100 of the
                                   device's logical NeuronCores
``fp8_flop_total``                 the device's ``flops`` (a rate over the
                                   group's ``period``) added up, sample by sample
``hbm_used_bytes``                 the device's cores' ``neuroncore_memory_usage``
``ecc_corrected_total``            ``mem_ecc_corrected + sram_ecc_corrected``
``ecc_uncorrected_total``          ``mem_ecc_uncorrected + sram_ecc_uncorrected``
``clock_ratio``, ``throttled``,    not reported by neuron-monitor: left out
``temp_c``, ``power_w``
=================================  ==========================================

NeuronLink and cooling figures are not reported either: no link or cooling
records.  EFA ports come from the driver's counters (``efa_sysfs.py``),
without latency.  Assumption: neuron-monitor's ``flops`` counts the FLOP the
cores executed whatever their precision; rainierd reads it as FP8 FLOP, the
precision Rainier trains in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rainierd.bridge.efa_sysfs import EFA_COUNTERS
from rainierd.topology import Topology

__all__ = ["NeuronMonitorNode", "node_frame"]


@dataclass(eq=False)
class NeuronMonitorNode:
    """One node's bridge state: where its ids start, and its FLOP totals so far."""

    topology: Topology
    node: int
    publisher: str
    flop_total: dict[int, float] = field(default_factory=dict)  # by device
    seq: int = 0

    def frame(self, report: dict[str, Any], efa: list[dict[str, int]], *, t_s: float) -> dict[str, Any]:
        """Return the JSON frame (as a dict) of one neuron-monitor report; advance the totals and the sequence."""
        body = node_frame(self.topology, self.node, report, efa, flop_total=self.flop_total)
        body |= {"v": 1, "kind": "node", "publisher": self.publisher, "seq": self.seq, "tick": self.seq, "t_s": t_s}
        self.seq += 1
        return body


def _devices(report: dict[str, Any]) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, int]]]:
    """Return per device: (util sum, core count, flops, period, memory), and its ECC counters."""
    per_device = int(report.get("neuron_hardware_info", {}).get("neuroncore_per_device_count") or 4)
    cores: dict[int, dict[str, float]] = {}
    for runtime in report.get("neuron_runtime_data") or []:
        counters = (runtime.get("report") or {}).get("neuroncore_counters") or {}
        period = float(counters.get("period") or 0.0)
        memory = (((runtime.get("report") or {}).get("memory_used") or {}).get("neuron_runtime_used_bytes") or {})
        usage = (memory.get("usage_breakdown") or {}).get("neuroncore_memory_usage") or {}
        for core, values in (counters.get("neuroncores_in_use") or {}).items():
            device = int(core) // per_device
            acc = cores.setdefault(device, {"util": 0.0, "cores": 0.0, "flops": 0.0, "period": period, "hbm": 0.0})
            acc["util"] += float(values.get("neuroncore_utilization") or 0.0)
            acc["cores"] += 1
            acc["flops"] += float(values.get("flops") or 0.0)
            acc["hbm"] += sum(float(v) for v in (usage.get(core) or {}).values())
    ecc: dict[int, dict[str, int]] = {}
    hw = (report.get("system_data") or {}).get("neuron_hw_counters") or {}
    for device in hw.get("neuron_devices") or []:
        index = int(device["neuron_device_index"])
        ecc[index] = {
            "ecc_corrected_total": int(device.get("mem_ecc_corrected", 0)) + int(device.get("sram_ecc_corrected", 0)),
            "ecc_uncorrected_total": int(device.get("mem_ecc_uncorrected", 0))
            + int(device.get("sram_ecc_uncorrected", 0)),
        }
    return cores, ecc


def node_frame(
    topology: Topology, node: int, report: dict[str, Any], efa: list[dict[str, int]], *, flop_total: dict[int, float],
) -> dict[str, Any]:
    """Return the node's records (``node``, ``chips``, ``links``, ``efa``) from one report and its EFA counters.

    ``flop_total`` (per device) is advanced by this report's FLOP.
    """
    cores, ecc = _devices(report)
    chips = []
    for device in range(topology.chips_per_node):
        record: dict[str, Any] = {"chip": node * topology.chips_per_node + device}
        if device in cores and cores[device]["cores"]:
            acc = cores[device]
            record["util"] = min(1.0, max(0.0, acc["util"] / acc["cores"] / 100.0))
            flop_total[device] = flop_total.get(device, 0.0) + acc["flops"] * acc["period"]
            record["fp8_flop_total"] = flop_total[device]
            record["hbm_used_bytes"] = int(acc["hbm"])
        record |= ecc.get(device, {})
        if len(record) > 1:
            chips.append(record)
    ports = []
    for port, counters in enumerate(efa[: topology.efa_ports_per_node]):
        record = {"port": node * topology.efa_ports_per_node + port}
        record |= {f"{name}_total": counters[name] for name in EFA_COUNTERS if name in counters}
        ports.append(record)
    return {"node": node, "chips": chips, "links": [], "efa": ports}
