"""Remediation advisories (docs/actions.md): what rainierd recommends doing about each unhealthy node, held
back by a blast-radius brake and remembered in a repeat-offender ledger.  The policy is pure (no I/O, no
clock reads); the sinks (HTTP, MQTT, webhook, node-problem-detector) read its frozen ``ActionsView``.
"""

from rainierd.actions.config import ActionConfig
from rainierd.actions.ledger import Ledger, LedgerError
from rainierd.actions.model import (
    ACTIONS,
    RESETS,
    SCHEMA_VERSION,
    STATES,
    ActionsView,
    Advisory,
    BrakeStatus,
    Cause,
    Cost,
    LedgerRecord,
    Protected,
)
from rainierd.actions.policy import ActionPolicy, ActionTotals, MonitorCondition

__all__ = [
    "ACTIONS",
    "RESETS",
    "SCHEMA_VERSION",
    "STATES",
    "ActionConfig",
    "ActionPolicy",
    "ActionTotals",
    "ActionsView",
    "Advisory",
    "BrakeStatus",
    "Cause",
    "Cost",
    "Ledger",
    "LedgerError",
    "LedgerRecord",
    "MonitorCondition",
    "Protected",
]
