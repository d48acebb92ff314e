"""Hand-built ``ActionsView`` values and snapshots holding them, for the sinks' tests (the policy that builds
them in the monitor is tested on its own)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from rainierd.actions.model import ActionsView, Advisory, BrakeStatus, Cause, Protected
from rainierd.core.throughput import Throughput
from rainierd.fleet import ids
from rainierd.fleet.topology import Names, build_sites
from rainierd.monitor.snapshot import MonitorSnapshot

# The demo fleet (8 nodes) with an inventory naming node n trn2-a-000n: what the API and node-check resolve against.
NAMED_DEMO = build_sites([2], name="demo", names=Names(hostnames=tuple(f"trn2-a-{n:04d}" for n in range(8))))


def advisory(node: str, *, node_id: int = 0, action: str = "cordon", state: str = "proposed",
             suppressed_by: str | None = None, link_state: str = "failed", lemon: bool = False,
             hostname: str | None = None) -> Advisory:
    """Return one node's advisory (``node``: its id, as the policy names it) caused by one NeuronLink,
    protecting one job."""
    cause = Cause("neuronlink", 100 + node_id, f"{node}/chip3/link1", link_state, ("lanes_down",), 1_000.0)
    return Advisory(node=node, index=node_id, site="s0", ultraserver=f"s0/u{node_id // 4}", action=action,
                    state=state, reason=f"NeuronLink {node}/chip3/link1 {link_state}", causes=(cause,),
                    protects=(Protected("llama-70b", 3.5e15),), since_s=1_000.0,
                    proposed_s=1_100.0 if state == "proposed" else None, suppressed_by=suppressed_by, lemon=lemon,
                    hostname=hostname)


def named(node_id: int, **kwargs: Any) -> Advisory:
    """Return ``advisory`` of node ``node_id`` of ``NAMED_DEMO``, by its id and with its hostname."""
    return advisory(ids.node_id(NAMED_DEMO, node_id), node_id=node_id, hostname=f"trn2-a-{node_id:04d}", **kwargs)


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
