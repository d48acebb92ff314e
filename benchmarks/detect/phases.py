"""Which job phase each false alarm of a job-mix control run fell in.

Issue 21 item 4: job phases are not faults.  A fault-free control run with
the simulator's job mix (``FleetParams(jobs="mix")``) records, every tick,
the phase of each UltraServer's job from the simulator's truth; each health
event raised is then attributed to the phase its entity's UltraServer was in
at the event's tick: ``running``, ``checkpoint``, ``eval``, ``restarting``,
``idle`` (no job holds it), or ``ended`` (idle, a job having ended on it
within ``LOOKBACK_S``).  Since a detector decides over a window, each event
also carries the other phases its UltraServer passed through in the
``LOOKBACK_S`` before it (``start`` when it was idle then): an event in
``running`` just after a checkpoint is the checkpoint's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from rainierd.core.detect import Event
from rainierd.fleet.topology import Topology
from rainierd.sim.sample import TickTruth
from rainierd.sim.workload import PHASES

__all__ = ["LOOKBACK_S", "PHASE_LABELS", "PhaseLog", "phase_control"]

LOOKBACK_S: Final = 600.0  # longer than any detector's decision window at the benchmark's ticks
_IDLE: Final = len(PHASES)
PHASE_LABELS: Final = (*PHASES, "idle", "ended")


@dataclass(eq=False)
class PhaseLog:
    """Each UltraServer's job phase (``PHASES`` index, or idle) at every tick of one run."""

    n_ultraservers: int
    codes: list[np.ndarray] = field(default_factory=list)
    # How many times a job entered each phase (or ended, or started), and the UltraServers it held then.
    entries: Counter[str] = field(default_factory=Counter)
    entered_ultraservers: Counter[str] = field(default_factory=Counter)
    _last: dict[str, tuple[str, int]] = field(default_factory=dict)

    def record(self, truth: TickTruth) -> None:
        """Append one tick's phases from the simulator's per-job truth."""
        codes = np.full(self.n_ultraservers, _IDLE, dtype=np.int8)
        now: dict[str, tuple[str, int]] = {}
        for job in truth.jobs:
            codes[list(job.ultraservers)] = PHASES.index(job.phase)
            now[job.id] = (job.phase, len(job.ultraservers))
            last = self._last.get(job.id)
            if last is None and self.codes:
                self.entries["start"] += 1
                self.entered_ultraservers["start"] += len(job.ultraservers)
            if (last is None and self.codes and job.phase != "running") or (last and last[0] != job.phase):
                self.entries[job.phase] += 1
                self.entered_ultraservers[job.phase] += len(job.ultraservers)
        for job_id in self._last.keys() - now.keys():
            self.entries["ended"] += 1
            self.entered_ultraservers["ended"] += self._last[job_id][1]
        self._last = now
        self.codes.append(codes)

    def attribute(self, event: Event, topo: Topology, tick_s: float) -> dict[str, Any]:
        """Return the event's entity, state, reasons, phase at its tick, and the phases just before it."""
        us = _ultraserver(event, topo)
        row: dict[str, Any] = {"tick": event.tick, "entity": event.entity, "id": event.id, "after": event.after,
                               "reasons": list(event.reasons), "ultraserver": us}
        if us is None:
            return row | {"phase": "fleet", "recent": []}
        history = np.array([c[us] for c in self.codes[max(0, event.tick - int(LOOKBACK_S / tick_s)):event.tick + 1]])
        now = int(history[-1])
        before = {int(c) for c in history[:-1]} - {now}
        phase = "ended" if now == _IDLE and before else PHASE_LABELS[now]
        recent = sorted("start" if c == _IDLE else PHASES[c] for c in before)
        return row | {"phase": phase, "recent": recent}


def _ultraserver(event: Event, topo: Topology) -> int | None:
    if event.entity == "chip":
        return int(topo.chip_ultraserver[event.id])
    if event.entity == "neuronlink":
        return int(topo.node_ultraserver[topo.link_node[event.id]])
    if event.entity == "efa":
        return int(topo.node_ultraserver[topo.efa_node[event.id]])
    if event.entity == "node":
        return int(topo.node_ultraserver[event.id])
    if event.entity == "ultraserver":
        return event.id
    return None  # the feed: the whole fleet's


def phase_control(rows: list[dict[str, Any]], exposure: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the job-mix control's raised events by entity, by phase, by (entity, state, phase, reasons),
    and the UltraServer-ticks of each phase the runs spent (``exposure``: one ``phase_exposure`` a run).
    """
    seconds: Counter[str] = Counter()
    for run in exposure:
        seconds.update(run)
    return {
        "events": len(rows),
        "by_entity": dict(Counter(f"{r['entity']}:{r['after']}" for r in rows)),
        "by_phase": {p: sum(r["phase"] == p for r in rows) for p in (*PHASE_LABELS, "fleet")},
        "by_phase_or_just_after": {
            p: sum(r["phase"] == p or p in r["recent"] for r in rows) for p in (*PHASE_LABELS, "start", "fleet")},
        "by_cause": dict(Counter(
            f"{r['entity']}:{r['after']} in {r['phase']}{' after ' + '+'.join(r['recent']) if r['recent'] else ''}"
            f" [{','.join(r['reasons'])}]" for r in rows).most_common()),
        "ultraserver_seconds_by_phase": dict(seconds),
        "events_list": rows[:200],
    }


def phase_exposure(log: PhaseLog, tick_s: float) -> dict[str, float]:
    """Return the UltraServer-seconds one run spent in each phase (``ended`` counted as idle)."""
    if not log.codes:
        return {}
    counts = np.bincount(np.concatenate(log.codes).astype(np.int64), minlength=_IDLE + 1)
    return {PHASE_LABELS[i]: float(counts[i]) * tick_s for i in range(_IDLE + 1)}
