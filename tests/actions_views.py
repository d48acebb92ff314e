"""Hand-built ``ActionsView`` values and snapshots holding them, for the sinks' tests (the policy that builds
them in the monitor is tested on its own)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from rainierd.actions.model import ActionsView, Advisory, BrakeStatus, Cause, Protected
from rainierd.core.throughput import Throughput
from rainierd.monitor.snapshot import MonitorSnapshot


def advisory(node: str, *, node_id: int = 0, action: str = "cordon", state: str = "proposed",
             suppressed_by: str | None = None, link_state: str = "failed", lemon: bool = False) -> Advisory:
    """Return one node's advisory caused by one NeuronLink, protecting one job."""
    cause = Cause("neuronlink", 100 + node_id, f"{node}/chip3/link1", link_state, ("lanes_down",), 1_000.0)
    return Advisory(node=node, node_id=node_id, site="s0", ultraserver=node_id // 4, action=action, state=state,
                    reason=f"NeuronLink {node}/chip3/link1 {link_state}", causes=(cause,),
                    protects=(Protected("llama-70b", 3.5e15),), since_s=1_000.0,
                    proposed_s=1_100.0 if state == "proposed" else None, suppressed_by=suppressed_by, lemon=lemon)


def view(*advisories: Advisory, t_s: float | None = None, dry_run: bool = False,
         brake: BrakeStatus | None = None) -> ActionsView:
    """Return a view of ``advisories`` at ``t_s`` (default: now)."""
    return ActionsView(t_s=time.time() if t_s is None else t_s, dry_run=dry_run, advisories=advisories,
                       brake=brake or BrakeStatus(max_nodes=10, max_fraction=0.05, window_s=3_600.0, under_action=1))


def snapshot(actions: ActionsView | None, *, computed: bool = True) -> MonitorSnapshot:
    """Return a snapshot holding ``actions`` (of an analysis that applied telemetry, if ``computed``)."""
    empty = np.zeros(0)
    none = np.zeros(0, np.int64)
    throughput = Throughput(0 if computed else -1, np.zeros(0, bool), *([empty] * 8), none, none, none, none)
    snap = MonitorSnapshot(generation=1, throughput=throughput, chips_total=0, analysis_s=0.0, analysed_ticks=1)
    return dataclasses.replace(snap, actions=actions)
