"""The bridge's configuration as one frozen value, built once at the edge
(``Settings.bridge_config``), so every part reads the same hardware figures,
bounds and choices and a test can hand any of them in.

Why the margins: a figure a real device reports is a measurement over a
captured period, so it may read a little above what the hardware can do
(neuron-monitor's ``period`` and the instant its counters are read are not
the same instant).  A margin accepts that measurement noise and still
refuses what no chip or port can do: a device at 1.3 times its FP8 peak,
a port at 1.3 times its line rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from rainierd.fleet import TRN2, Trainium2

EccCounts = Literal["per-period", "cumulative"]

FLOPS_MARGIN: Final = 1.10
"""A device's FLOP/s may read this many times the chip's FP8 dense peak before it is refused."""
EFA_MARGIN: Final = 1.10
"""A port's bytes over the time between two reads may reach this many times its line rate before they are refused."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeConfig:
    """What one node's bridge judges by.

    ``efa_devices``: the node's EFA device names in port order, from the
    inventory (None: the natural order of the names seen at start).
    """

    hardware: Trainium2 = TRN2
    chips_per_node: int = TRN2.chips_per_node
    efa_ports_per_node: int = TRN2.efa_ports_per_node
    ecc_counts: EccCounts = "per-period"
    flops_margin: float = FLOPS_MARGIN
    efa_margin: float = EFA_MARGIN
    # The sample clock is stepped to the wall clock when it falls further behind than this.
    max_lag_s: float = 30.0
    # A clamp of the sample clock to the wall clock shorter than this share of the period keeps the frame's
    # counters: the rates it gives are off by at most this share.
    clamp_ratio: float = 0.02
    efa_devices: tuple[str, ...] | None = None
    instance_id: str | None = None  # the node's, from the inventory: a report of another instance is refused

    @property
    def device_flops_bound(self) -> float:
        """Return the most FLOP/s one device may report (its FP8 dense peak times the margin)."""
        return self.hardware.fp8_dense_flops * self.flops_margin

    @property
    def port_bytes_s_bound(self) -> float:
        """Return the most bytes a second one EFA port's counters may grow by (line rate times the margin)."""
        return self.hardware.efa_port_bytes_s * self.efa_margin
