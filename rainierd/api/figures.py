"""The live per-entity figures one UltraServer is drilled into by: which
field of the monitor's state each is, and its metric name, help, type and
scale for ``/probe``.  One table, read by both drill-downs: ``/probe``
(``drilldown``, exposition text) and ``/api/v1/ultraservers/<id>``
(``ultraservers``, JSON keyed by the field).
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np

from rainierd._types import F64, I64
from rainierd.core import Table

_US_PER_S: Final = 1e-6


class Figure(NamedTuple):
    """One per-entity figure: its metric on ``/probe``, and the state's field it is read from."""

    metric: str
    help: str
    kind: str  # the metric's type: gauge or counter
    field: str  # a gauge or a counter total of the entity's state table (its JSON name)
    scale: float  # metric = field x scale (the metric is in base units)


CHIP_FIGURES: Final = (
    Figure("rainier_chip_utilization_ratio", "Mean NeuronCore utilisation of the chip.", "gauge", "util", 1.0),
    Figure("rainier_chip_clock_ratio", "Clock / nominal clock of the chip.", "gauge", "clock_ratio", 1.0),
    Figure("rainier_chip_temperature_celsius", "Hottest sensor of the chip.", "gauge", "temp_c", 1.0),
    Figure("rainier_chip_power_watts", "Power of the chip.", "gauge", "power_w", 1.0),
    Figure("rainier_chip_hbm_used_bytes", "HBM in use on the chip.", "gauge", "hbm_used_bytes", 1.0),
    Figure("rainier_chip_ecc_corrected_errors_total", "Corrected ECC errors (its publisher's total).", "counter",
           "ecc_corrected_total", 1.0),
    Figure("rainier_chip_ecc_uncorrected_errors_total", "Uncorrected ECC errors (its publisher's total).",
           "counter", "ecc_uncorrected_total", 1.0),
)
LINK_FIGURES: Final = (
    Figure("rainier_neuronlink_bandwidth_bytes_per_second", "NeuronLink bandwidth over the last tick's transfers.",
           "gauge", "bw_bytes_s", 1.0),
    Figure("rainier_neuronlink_lanes_up", "NeuronLink lanes up.", "gauge", "lanes_up", 1.0),
    Figure("rainier_neuronlink_latency_seconds", "NeuronLink latency.", "gauge", "latency_us", _US_PER_S),
    Figure("rainier_neuronlink_crc_errors_total", "NeuronLink CRC errors (its publisher's total).", "counter",
           "crc_errors_total", 1.0),
    Figure("rainier_neuronlink_replays_total", "NeuronLink replays (its publisher's total).", "counter",
           "replay_total", 1.0),
)
EFA_FIGURES: Final = (
    Figure("rainier_efa_port_transmit_bytes_total", "EFA bytes sent (its publisher's total).", "counter",
           "tx_bytes_total", 1.0),
    Figure("rainier_efa_port_receive_bytes_total", "EFA bytes received (its publisher's total).", "counter",
           "rx_bytes_total", 1.0),
    Figure("rainier_efa_port_retransmit_packets_total", "EFA packets retransmitted (its publisher's total).",
           "counter", "retrans_pkts_total", 1.0),
    Figure("rainier_efa_port_latency_seconds", "EFA latency.", "gauge", "latency_us", _US_PER_S),
)
NODE_FIGURES: Final = (
    Figure("rainier_node_inlet_temperature_celsius", "Node inlet air.", "gauge", "inlet_c", 1.0),
    Figure("rainier_node_outlet_temperature_celsius", "Node outlet air.", "gauge", "outlet_c", 1.0),
    Figure("rainier_node_fan_rpm", "Node fan speed.", "gauge", "fan_rpm", 1.0),
    Figure("rainier_node_power_watts", "Node power, chips and host.", "gauge", "power_w", 1.0),
)
ENTITY_FIGURES: Final = {"chip": CHIP_FIGURES, "neuronlink": LINK_FIGURES, "efa": EFA_FIGURES, "node": NODE_FIGURES}
"""Each entity kind's figures (the state tables: chips, links, efa, cooling)."""


def live_values(table: Table, field: str, ids: I64) -> F64:
    """Return ``field`` of entities ``ids`` of ``table`` as float64, a copy (NaN: a total never reported)."""
    if field in table.gauges:
        return table.gauges[field][ids].astype(np.float64)
    values = table.totals[field][ids].astype(np.float64)
    values[~table.has(field)[ids]] = np.nan
    return values
