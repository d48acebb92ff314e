"""``rainierd bridge neuron-monitor``: what a real Trainium2 node reports
(AWS neuron-monitor's JSON reports on stdin, the EFA driver's counters in
sysfs) as that node's JSON frames, never inventing a value, never dying on
a line, timed by the reports' own periods (docs/bridge.md).

The pure part, reports and snapshots in and frames out, no I/O:

- ``_values``: how one value is taken or refused (and counted, by field and reason);
- ``_cores``: which device each logical NeuronCore is on (v3d names, the hardware info's shapes);
- ``_hold``: a group a report leaves out, held at its last content for a while;
- ``_report``: one report read, every documented shape accepted;
- ``_devices``: a report as one reading per device (idle, unknown, attributed);
- ``_clock``: the sample clock, advanced by the reports' periods;
- ``_totals``: monotone totals from per-period and cumulative counts;
- ``_ports``: EFA devices by name as port records (and the snapshot ``_efa`` reads);
- ``_node``: one node's reports to frames.

The edges: ``_efa`` reads the EFA driver's sysfs files, ``_lines`` cuts the
input into lines of any length, ``_metrics`` is the bridge's
``rainier_bridge_*``, ``_role`` the role's own configuration (built from the
settings: ``BridgeRoleConfig``), and ``run`` the role (not imported here:
the settings import this package, for ``BridgeConfig`` and
``BridgeRoleConfig``).
"""

from __future__ import annotations

from rainierd.bridge._clock import STEP_REASONS, SampleClock, Tick
from rainierd.bridge._config import EFA_MARGIN, FLOPS_MARGIN, BridgeConfig
from rainierd.bridge._efa import read_efa
from rainierd.bridge._node import NodeBridge, Outcome
from rainierd.bridge._ports import EfaDevice, EfaPorts, EfaSnapshot, natural_order
from rainierd.bridge._report import GROUPS, Report, read_report
from rainierd.bridge._role import BridgeRoleConfig, find_node
from rainierd.bridge._values import REFUSAL_REASONS
from rainierd.bridge.run import run_bridge

__all__ = [
    "EFA_MARGIN",
    "FLOPS_MARGIN",
    "GROUPS",
    "REFUSAL_REASONS",
    "STEP_REASONS",
    "BridgeConfig",
    "BridgeRoleConfig",
    "EfaDevice",
    "EfaPorts",
    "EfaSnapshot",
    "NodeBridge",
    "Outcome",
    "Report",
    "SampleClock",
    "Tick",
    "find_node",
    "natural_order",
    "read_efa",
    "read_report",
    "run_bridge",
]
