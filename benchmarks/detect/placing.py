"""Where and when the detection benchmark places its faults: the durations it
sets (in seconds, becoming ticks per tick length, rounded up), the cells it
grades (kind x severity x scope x placement), and the fault runs drawn from
seeds, the same faults at the same seconds for every tick length and profile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd.fleet.topology import LINK_KIND_RING, Topology, build_fleet
from rainierd.sim.faults import SEVERITIES, TARGETS, Fault, FaultKind, flapping_fault

__all__ = [
    "FAULT_S", "GRACE_S", "JITTER_S", "SLOW_FAULT_S", "SLOW_TAIL_S", "SLOW_ULTRASERVERS", "SLOW_WARMUP_S", "TAIL_S",
    "WARMUP_S", "Cell", "cells", "fault_runs", "fault_seconds", "fault_ticks", "place", "tail_seconds", "ticks_of",
]

WARMUP_S: Final = 60.0
JITTER_S: Final = 20  # fault starts spread over this many whole seconds after the warm-up
FAULT_S: Final = 120.0
TAIL_S: Final = 60.0
GRACE_S: Final = 10.0
# Faults only a long-horizon test can see get a longer window (and runs of their own): silent EFA
# loss of 3e-7 adds ~0.18 retransmits/s to a 0.2/s background, found in about 4 minutes.
SLOW_FAULT_S: Final = {(FaultKind.EFA_LOSS, 3e-7): 900.0}
# ... and a longer tail: a rate test sees loss end no faster than it saw it begin (minutes), so its
# time to clear is measured over ten minutes after the fault, not one.
SLOW_TAIL_S: Final = 600.0
# A slow test judges a port against its own retransmit rate, which needs history: slow faults start
# after half an hour of monitoring (as on a fleet the monitor has watched for a while, or restarted from
# its state file): 3e-7 of a busy port's packets is a rise of a few % of its trickle, and the rate must be
# known better than that (docs/detection.md, layer 4; a tripled trickle needs only ten minutes).
SLOW_WARMUP_S: Final = 1_800.0
# Slow faults are two a seed: a fleet of 16 UltraServers (1,024 ports) keeps them a small minority of
# the peers whose background they are judged against, at a quarter of a 64-UltraServer run's cost.
SLOW_ULTRASERVERS: Final = 16


def ticks_of(seconds: float, tick_s: float) -> int:
    """Return ``seconds`` in ticks of ``tick_s``, rounded up (a tick's worth of float error aside)."""
    return math.ceil(round(seconds / tick_s, 9))


def fault_seconds(kind: FaultKind, severity: float) -> float:
    """Return how long a fault of ``kind`` at ``severity`` lasts in the benchmark."""
    return SLOW_FAULT_S.get((kind, severity), FAULT_S)


def tail_seconds(kind: FaultKind, severity: float) -> float:
    """Return how long after a fault of ``kind`` at ``severity`` its clear and its duplicates are looked for."""
    return SLOW_TAIL_S if (kind, severity) in SLOW_FAULT_S else TAIL_S


def fault_ticks(kind: FaultKind, severity: float, tick_s: float = 1.0) -> int:
    """Return how many ticks of ``tick_s`` a fault of ``kind`` at ``severity`` lasts in the benchmark."""
    return ticks_of(fault_seconds(kind, severity), tick_s)


@dataclass(frozen=True, slots=True)
class Cell:
    """One scenario: a kind, a severity, a placement variant."""

    kind: FaultKind
    severity: float
    scope: str
    placement: int


def cells(kinds: Collection[FaultKind] | None = None) -> list[Cell]:
    """Return every kind x severity x scope x placement the benchmark grades (only ``kinds``, if given)."""
    out: list[Cell] = []
    for kind, severities in SEVERITIES.items():
        if kind is FaultKind.DIURNAL or (kinds is not None and kind not in kinds):
            continue
        for severity in severities:
            for scope in TARGETS[kind]:
                out.extend(Cell(kind, severity, scope, placement) for placement in (0, 1))
    return out


def place(cell: Cell, topo: Topology, us: int, rng: np.random.Generator, start: int, *,
           tick_s: float) -> Fault:
    """Return the fault of ``cell`` inside UltraServer ``us``; placement 0/1 varies where.

    In a partial UltraServer the target is one that exists: a present node's, and for a link one whose both
    ends are present (a whole UltraServer's draws are what they always were).
    """
    chips = topo.chips_per_node * topo.nodes_per_ultraserver
    nodes, links = topo.nodes_per_ultraserver, topo.links_per_node * topo.nodes_per_ultraserver
    ports = topo.efa_ports_per_node * topo.nodes_per_ultraserver
    whole = bool(topo.node_present[us * nodes:(us + 1) * nodes].all())
    kind = cell.kind
    if cell.scope == "link":
        ids = np.arange(us * links, (us + 1) * links)
        ring = topo.link_kind[ids] == LINK_KIND_RING
        if not whole:
            there = topo.node_present[topo.link_node[ids]] & topo.node_present[topo.chip_node[topo.link_b[ids]]]
            ids, ring = ids[there], ring[there]
        target = int(rng.choice(ids[ring] if cell.placement else ids[~ring]))  # a ring link or a torus link
    elif not whole and cell.scope in ("efa", "chip", "node"):
        of_node = {"efa": topo.efa_node, "chip": topo.chip_node, "node": np.arange(topo.n_nodes)}[cell.scope]
        per_us = {"efa": ports, "chip": chips, "node": nodes}[cell.scope]
        ids = np.arange(us * per_us, (us + 1) * per_us)
        target = int(rng.choice(ids[topo.node_present[of_node[ids]]]))
    elif cell.scope == "efa":
        target = int(rng.integers(us * ports, (us + 1) * ports))
    elif cell.scope == "chip":
        target = int(rng.integers(us * chips, (us + 1) * chips))
    elif cell.scope == "node":
        target = int(rng.integers(us * nodes, (us + 1) * nodes))
    else:
        target = us
    if kind is FaultKind.NL_FLAPPING:
        return flapping_fault(rng, target, int(cell.severity), start, tick_s)
    end = start + fault_ticks(kind, cell.severity, tick_s)
    return Fault(kind, target, cell.severity, start, end, scope=cell.scope)


def fault_runs(
    seeds: int, ultraservers: int, *, tick_s: float = 1.0, kinds: Collection[FaultKind] | None = None,
    build: Callable[[int], Topology] | None = None,
) -> list[tuple[int, list[Fault], int, int]]:
    """Return (ultraservers, faults, seed, ticks) of every fault run; slow faults run apart, for longer.

    The draws do not depend on ``tick_s``: every tick length gets the same faults at the same times.
    ``build`` builds the fleet of a number of UltraServers (default: one site of whole ones); faults land
    only on what it has, so a profile with partial UltraServers draws other targets in those.
    """
    per_run = max(1, ultraservers // 4)  # faults stay a minority of peers
    warmup, jitter = ticks_of(WARMUP_S, tick_s), ticks_of(JITTER_S, tick_s)
    sizes = (ultraservers, min(ultraservers, SLOW_ULTRASERVERS))
    topos = tuple(build(n) if build is not None else build_fleet(1, n) for n in sizes)
    all_cells = cells(kinds)
    runs = []
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        order = rng.permutation(len(all_cells))
        slow = [i for i in order if (all_cells[i].kind, all_cells[i].severity) in SLOW_FAULT_S]
        quick = [i for i in order if (all_cells[i].kind, all_cells[i].severity) not in SLOW_FAULT_S]
        for group_index, group in enumerate((quick, slow)):
            for chunk in range(0, len(group), per_run):
                picked = [all_cells[i] for i in group[chunk:chunk + per_run]]
                fleet, topo = sizes[group_index], topos[group_index]
                hosts = rng.choice(fleet, size=len(picked), replace=False)
                settle = warmup if group_index == 0 else ticks_of(SLOW_WARMUP_S, tick_s)
                tail = ticks_of(TAIL_S if group_index == 0 else SLOW_TAIL_S, tick_s)
                faults = [place(c, topo, int(us), rng, settle + ticks_of(int(rng.integers(0, JITTER_S)), tick_s),
                                 tick_s=tick_s)
                          for c, us in zip(picked, hosts, strict=True)]
                ticks = settle + jitter + max(f.end_tick - f.start_tick for f in faults) + tail
                runs.append((fleet, faults, seed * 1_000 + 500 * group_index + chunk, ticks))
    return runs
