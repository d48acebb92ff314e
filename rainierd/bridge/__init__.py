"""Bridges from what a real trn2 node already exposes to rainierd's wire
format: ``rainierd bridge neuron-monitor`` turns AWS neuron-monitor's reports
and the EFA driver's counters into the node's JSON frames.
"""

from __future__ import annotations

from rainierd.bridge.efa_sysfs import EFA_COUNTERS, read_efa_counters
from rainierd.bridge.neuron_monitor import NeuronMonitorNode, node_frame

__all__ = ["EFA_COUNTERS", "NeuronMonitorNode", "node_frame", "read_efa_counters"]
