"""Anchor (a): the fixed counter and state thresholds that node health agents apply, re-implemented from their
public descriptions on the telemetry rainierd receives.

Sources:
* Amazon EKS, "Detect node health issues and enable automatic node repair" (the node monitoring agent's
  NodeConditions AcceleratedHardwareReady and NetworkingReady: Neuron HBM/SRAM uncorrectable errors, interfaces
  not up), https://docs.aws.amazon.com/eks/latest/userguide/node-health.html and its detection cases,
  https://docs.aws.amazon.com/eks/latest/userguide/learn-status-conditions.html ; the agent's source,
  https://github.com/aws/eks-node-monitoring-agent .
* NVIDIA NVSentinel, GPU health monitor (DCGM health watches: ECC, thermal, NVLink) and NIC health monitor
  ("Link State Detection": a port DOWN is fatal; "Link Counter Detection": fatal counters on any increment,
  degradation on an error velocity over a threshold), https://github.com/NVIDIA/NVSentinel and
  https://docs.nvidia.com/nvsentinel/components/nic-health-monitor/overview .
* Kubernetes: a node whose agent stops reporting goes NotReady after the node controller's
  ``--node-monitor-grace-period`` (40 s by default),
  https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/ .

The rules, each on an entity's own latest sample (no peers, no history):
* chip ``failed``: any increase of an uncorrectable ECC counter (HBM or SRAM), any execution error, or the device
  reported gone (``present`` 0): the sources' "any occurrence" conditions;
* chip ``throttled``: the chip reports thermal or power throttling (DCGM's thermal and power watches);
* node ``cooling_degraded``: at least ``HOT_CHIPS`` chips of one node throttle at once (a node-wide thermal
  condition, not one chip's clock cap: our rule, no source gives a count);
* node ``not_ready``: nothing heard from the node for ``NOT_READY_S`` (Kubernetes' default grace);
* NeuronLink ``down`` (no lane up) or ``degraded`` (fewer lanes than nominal): the link-state rule, as NVSentinel
  treats NVLink and NIC ports; NeuronLink ``errors``: a CRC error rate over ``CRC_PER_S``;
* EFA ``down``: the port not ACTIVE, or remote-unresponsive events (the interface-not-up condition); EFA
  ``errors``: RDMA work-request errors (any), or a retransmit rate over ``RETRANS_PER_S`` (the velocity rule).

A condition raised by a counter stays raised until the counter has been quiet for ``QUIET_S`` (the sources hold
a condition until a recovery event; a counter has none, so our rule is a minute of silence): a port whose
unresponsive events arrive at a few a second would otherwise flap with every quiet sample.

The two velocity thresholds have no published value for NeuronLink or EFA: by our stated rule each is twice the
highest healthy per-entity rate seen in one calibration control run per profile (training and realistic,
16 UltraServers running the job mix, 600 s at 1 s ticks, seed 900,000, a seed no graded run uses; ``python -m
benchmarks anchors --calibrate`` re-measures it), set once for every row and seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from benchmarks.anchors._common import Latch, View
from rainierd.core.detect import Event
from rainierd.fleet.hardware import TRN2

__all__ = ["CRC_PER_S", "HOT_CHIPS", "NOT_READY_S", "QUIET_S", "RETRANS_PER_S", "Thresholds"]

NOT_READY_S: Final = 40.0  # kube-controller-manager --node-monitor-grace-period default
HOT_CHIPS: Final = 2  # chips of one node throttling at once: a node's thermal condition (our rule)
# Twice the calibration control's highest healthy rate (``python -m benchmarks anchors --calibrate``; 2026-12-07:
# NeuronLink CRC 51.3 and 52.6 a second, EFA retransmits 100.1 and 108.3 a second, training and realistic).
CRC_PER_S: Final = 106.0
RETRANS_PER_S: Final = 217.0
QUIET_S: Final = 60.0


def _positive(values: np.ndarray) -> np.ndarray:
    """Return where ``values`` is known and above 0 (NaN: unknown, never a breach)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(np.nan_to_num(values, nan=0.0) > 0.0, dtype=bool)


@dataclass(eq=False)
class Thresholds:
    """The node agents' threshold rules (EKS node monitoring agent, NVSentinel), per entity and sample."""

    name: str = "thresholds"
    chip_failed: Latch = field(default_factory=lambda: Latch("chip", "failed"))
    chip_throttled: Latch = field(default_factory=lambda: Latch("chip", "throttled"))
    node_hot: Latch = field(default_factory=lambda: Latch("node", "cooling_degraded"))
    node_lost: Latch = field(default_factory=lambda: Latch("node", "not_ready"))
    link_state: Latch = field(default_factory=lambda: Latch("neuronlink", "degraded"))
    link_errors: Latch = field(default_factory=lambda: Latch("neuronlink", "errors"))
    efa_down: Latch = field(default_factory=lambda: Latch("efa", "down"))
    efa_errors: Latch = field(default_factory=lambda: Latch("efa", "errors"))
    last_s: dict[str, np.ndarray] = field(default_factory=dict)  # per counter rule: when it last fired

    def _held(self, rule: str, fired: np.ndarray, now_s: float) -> np.ndarray:
        """Return ``fired``, or fired within the last ``QUIET_S`` (on the listening clock)."""
        last = self.last_s.setdefault(rule, np.full(fired.size, -np.inf))
        last[last > now_s] = -np.inf  # a restarted monitor's listening clock starts again from 0
        last[fired] = now_s
        held: np.ndarray = np.asarray(now_s - last < QUIET_S, dtype=bool) | fired
        return held

    def observe(self, view: View) -> list[Event]:
        """Apply every rule to this tick's telemetry; return the raises and clears."""
        s, topo, tick = view.state, view.topology, view.tick
        chips, links, efa = s.chips, s.links, s.efa
        events: list[Event] = []
        failed = (_positive(chips.rates["ecc_uncorrected_total"])
                  | _positive(chips.rates["sram_ecc_uncorrected_total"]) | _positive(chips.rates["exec_errors_total"]))
        with np.errstate(invalid="ignore"):
            failed |= chips.gauges["present"] == 0
            throttled = np.asarray(chips.gauges["throttled"] >= 1, dtype=bool)
        # A counter's increase is seen once, in the sample it lands in; a failed chip stays failed until replaced.
        events += self.chip_failed.update(tick, failed | self.chip_failed.on_or_empty(failed.size), "uncorrectable")
        events += self.chip_throttled.update(tick, throttled, "throttled")
        hot = np.bincount(topo.chip_node, weights=throttled.astype(np.float64), minlength=topo.n_nodes) >= HOT_CHIPS
        events += self.node_hot.update(tick, hot, "thermal")
        heard = s.cooling.rx_s
        with np.errstate(invalid="ignore"):
            lost = np.isfinite(heard) & (s.now_s - heard > NOT_READY_S)
        events += self.node_lost.update(tick, np.asarray(lost, dtype=bool), "not_ready")
        lanes = links.gauges["lanes_up"]
        with np.errstate(invalid="ignore"):
            state_bad = np.asarray(lanes < TRN2.neuronlink_lanes, dtype=bool)
            crc = np.asarray(np.nan_to_num(links.rates["crc_errors_total"], nan=0.0) > CRC_PER_S, dtype=bool)
            port_down = np.asarray(efa.gauges["port_active"] == 0, dtype=bool) | _positive(
                efa.rates["unresponsive_remote_events_total"])
            efa_bad = _positive(efa.rates["rdma_wr_errors_total"]) | np.asarray(
                np.nan_to_num(efa.rates["retrans_pkts_total"], nan=0.0) > RETRANS_PER_S, dtype=bool)
        events += self.link_state.update(tick, state_bad, "lanes_down")
        now = s.now_s
        crc, port_down, efa_bad = (self._held("crc", crc, now), self._held("port_down", port_down, now),
                                   self._held("efa_errors", efa_bad, now))
        events += self.link_errors.update(tick, crc & ~self.link_state.on_or_empty(crc.size), "crc_rate")
        events += self.efa_down.update(tick, port_down, "port_down")
        events += self.efa_errors.update(tick, efa_bad & ~self.efa_down.on_or_empty(efa_bad.size), "error_rate")
        return events
