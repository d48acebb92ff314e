"""A chip against its peers on what every publisher reports, with a clock or
without: its utilisation collapsing while its peers stay busy, and its
executions taking far longer than theirs.  Both make it a ``straggler``
(reasons ``utilisation`` and ``latency``); the third peer judgement, its
efficiency, is ``chips.py``'s.

Why: AWS neuron-monitor reports per-device utilisation, FLOP and execution
latency but no clock, so on a real fleet a chip can only be judged by
comparison with the chips that carry the same work (``_peers.py``: its job's,
else its UltraServer's).  docs/detection.md, "Chips without a clock", has the
thresholds and what they were measured against.

* Utilisation: a sample is a *collapse* when the chip's utilisation is under
  ``util_collapse`` (half) of its peers' median while that median is busy
  (over ``active_util``), and the chip's own node is busy (at least half its
  reporting chips over ``active_util``).  A whole node idle beside busy peers
  is not one chip straggling: a monitor that knows no jobs may see an idle
  node beside busy ones in one UltraServer, and inside a known job a node
  (or an UltraServer) idles together when something else holds it up — a
  failed chip or a lost node, each raised on its own, so one fault is one
  culprit and not sixty-three stragglers (the demo's failed chip stalls its
  UltraServer and raised every other chip of it).  A group idle together (a
  checkpoint, a restart, a stalled job, an idle UltraServer) is no collapse,
  and its samples count as clean.
* Latency: a sample is *slow* when the chip's median execution latency is
  over ``latency_band`` (1.5) times its peers': its job's chips, or, without
  a known job, its node's (two jobs sharing an UltraServer execute different
  graphs, whose latencies differ many times over; a node runs one job's).
  A fresh sample without a latency counts as clean.

Persistence: each is a clipped CUSUM of seconds (a bad second adds 0.5, a
clean one takes 0.5 away), raised after ``collapse_after_s`` or
``latency_after_s`` (10 s) net and ``peer_samples_to_raise`` (6) agreeing
samples (as paths need, docs/detection.md "Long ticks": at a 5 s tick a
gauge's spikes reach one chip in forty in any sample).  So one sample taken as a job phase begins or ends, when agents
sampling out of phase read some of a job's nodes idle and the others still
busy, raises nothing, and an alarm whose cause ended is under its threshold
within ``drain_s`` (3 s).  A sample that cannot be judged (its peers idle
together, no execution to time) is clean evidence for a chip not in alarm,
so what a phase's first and last samples add does not pile up from phase to
phase, and no evidence for one in alarm, which holds its state through a
checkpoint instead of clearing and being raised again after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rainierd._types import F32, B
from rainierd.core.detect._peers import ChipPeers
from rainierd.core.detect._stats import ClippedCusum, ewma

if TYPE_CHECKING:
    from rainierd.core.detect.chips import ChipParams


def _seconds(n: int, after_s: float, params: ChipParams) -> ClippedCusum:
    """Return a CUSUM of bad seconds net of clean ones that raises after ``after_s`` of them."""
    h = 0.5 * after_s
    return ClippedCusum.zeros(n, k=0.5, h=h, cap=1.0, ceiling=h + params.drain_s * 0.5,
                              samples=params.peer_samples_to_raise)


def _holding(cusum: ClippedCusum, judged: B) -> B:
    """Return where a sample is evidence: where it was judged, and, where it was not (its peers idle, no
    execution to time), as a clean sample unless the chip is in alarm, which it keeps (module docstring)."""
    return judged | (cusum.s < np.float32(cusum.h))


@dataclass(eq=False)
class PeerActivity:
    """Each chip's utilisation and execution latency against its peers'."""

    params: ChipParams
    collapse: ClippedCusum
    slow: ClippedCusum
    util_ratio: F32  # EWMA of utilisation / its peers' median while they are busy (NaN: never judged)
    latency_ratio: F32  # EWMA of execution latency / its peers' median (NaN: never judged)

    @classmethod
    def create(cls, n: int, params: ChipParams) -> PeerActivity:
        """Return the judgement of ``n`` chips with no evidence yet."""
        return cls(params, _seconds(n, params.collapse_after_s, params), _seconds(n, params.latency_after_s, params),
                   np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32))

    def update(self, *, util: F32, latency: F32, fresh: B, present: B, peers: ChipPeers, held: F32) -> tuple[B, B]:
        """Fold in the chips' new samples; return (collapsed, slow): the chips whose CUSUM is in alarm."""
        return (self._utilisation(util, fresh & present, peers, held),
                self._latency(latency, fresh, fresh & present, peers, held))

    def _utilisation(self, util: F32, heard: B, peers: ChipPeers, held: F32) -> B:
        p = self.params
        known = heard & np.isfinite(util)
        reference = peers.median(np.where(known, util, np.float32(np.nan)).astype(np.float32))
        busy = known & (util > np.float32(p.active_util))
        cpn = peers.chips_per_node
        node_busy = 2 * busy.reshape(-1, cpn).sum(axis=1) >= known.reshape(-1, cpn).sum(axis=1)
        busy_here = np.repeat(node_busy, cpn)
        judged = known & np.isfinite(reference)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = (util / reference).astype(np.float32)
            peers_busy = judged & (reference > np.float32(p.active_util))
        collapsed = peers_busy & busy_here & (ratio < np.float32(p.util_collapse))
        self.util_ratio = ewma(self.util_ratio, ratio, peers_busy, alpha=p.ewma_alpha)
        return self.collapse.update_sparse(collapsed.astype(np.float32), judged & _holding(self.collapse, peers_busy),
                                           seconds=held)

    def _latency(self, latency: F32, fresh: B, heard: B, peers: ChipPeers, held: F32) -> B:
        p = self.params
        known = heard & (latency > 0)  # NaN compares False
        if not known.any() and not self.slow.s.any():
            return np.zeros(fresh.shape, dtype=bool)  # no publisher reports it: nothing to judge, nothing to drain
        masked = np.where(known, latency, np.float32(np.nan)).astype(np.float32)
        reference = peers.node_median(masked)
        if peers.node_group is not None:
            np.copyto(reference, peers.median(masked), where=peers.chip_in_job())
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = (latency / reference).astype(np.float32)
        judged = known & np.isfinite(ratio)
        slow = judged & (ratio > np.float32(p.latency_band))
        self.latency_ratio = ewma(self.latency_ratio, ratio, judged, alpha=p.ewma_alpha)
        return self.slow.update_sparse(slow.astype(np.float32), fresh & _holding(self.slow, judged), seconds=held)
