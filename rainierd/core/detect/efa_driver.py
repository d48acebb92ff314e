"""What the Linux EFA driver's own counters say about a port, beyond its
traffic: packets it drops on receive, RDMA work requests that complete in
error, and whether its device still sends the driver keep-alives.  They are
reasons on the EFA port's states (``efa.py``): ``rx_drops`` and
``rdma_wr_errors`` degrade it, a stopped ``keep_alive`` takes it down.

Why these thresholds (docs/detection.md, "EFA from the driver's counters"):

* ``rx_drops``: a healthy port drops nearly nothing (the transport repairs a
  drop with a retransmit, which the retransmit judgements already weigh), so
  drops are judged as a rate a second above ``drops_k`` (1/s), at most
  ``drops_cap`` (20/s) counted a second, raised at ``drops_h`` (40 drops net)
  and ``samples_to_raise`` (6) agreeing samples: a burst of any size in one
  interval raises nothing.
* ``rdma_wr_errors``: an RDMA read or write that completes in error is an
  operation the collective library must give up or redo, so a few are
  enough: over ``wr_errors_k`` (0.02/s, one a minute), at most
  ``wr_errors_cap`` (1/s) a second, raised at ``wr_errors_h`` (2.4 net) and
  three samples, and held until ``wr_errors_hold_s`` (60 s) pass without
  one (as a chip's execution errors, ``chip_errors.py``).
* ``keep_alive``: the device sends its driver keep-alives at its own
  cadence, which rainierd learns per port as the longest gap seen between
  two samples in which the counter rose (a publisher sampling faster than
  the cadence sees it rise in some samples only); a device present
  (``present`` not 0) whose counter has not risen for
  ``keep_alive_intervals`` (3) of those gaps and at least
  ``keep_alive_after_s`` (10 s) is no longer answering its driver: its port
  is down.  A port is judged from its second rise seen; a counter never
  seen rising (a publisher that does not read it) judges nothing.

``port_active`` is not judged: the EFA driver reports its ports ACTIVE
whatever their real state.  Each counter's CUSUM moves only where a port
counts something (``ClippedCusum.update_sparse``), so a fleet that counts
nothing, or whose publishers do not send these counters, costs a few passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rainierd._types import F32, U8, B
from rainierd.core.detect._stats import ClippedCusum, Latch
from rainierd.core.state import Table

if TYPE_CHECKING:
    from rainierd.core.detect.efa import EfaParams


@dataclass(eq=False)
class DriverCounters:
    """Each EFA port's receive drops, RDMA work-request errors and device keep-alives."""

    params: EfaParams
    drops: ClippedCusum
    wr_errors: ClippedCusum
    wr_errors_held: Latch
    keep_alive_gap_s: F32  # the longest gap seen between two samples in which the keep-alive counter rose (NaN: none)
    keep_alive_quiet_s: F32  # seconds of known samples since it last rose
    keep_alive_rises: U8  # samples in which it rose, up to 2 (a gap is known from the second)

    @classmethod
    def create(cls, n: int, params: EfaParams) -> DriverCounters:
        """Return the judgement of ``n`` ports with no evidence yet."""
        p = params
        drops = ClippedCusum.zeros(n, k=p.drops_k, h=p.drops_h, cap=p.drops_cap,
                                   ceiling=p.drops_h + p.drain_s * p.drops_k, samples=p.samples_to_raise)
        wr_errors = ClippedCusum.zeros(n, k=p.wr_errors_k, h=p.wr_errors_h, cap=p.wr_errors_cap,
                                       ceiling=p.wr_errors_h + p.drain_s * p.wr_errors_k, samples=3.0)
        return cls(p, drops, wr_errors, Latch.zeros(n, hold_s=p.wr_errors_hold_s), np.full(n, np.nan, np.float32),
                   np.zeros(n, np.float32), np.zeros(n, np.uint8))

    def update(self, table: Table, heard: B, present: B, held: F32) -> tuple[B, B, B]:
        """Fold in the ports' new samples (``heard``: a new sample; ``present``: not reported gone); return
        (dropping, erring, keep-alive stopped)."""
        judged = heard & present
        dropping = self.drops.update_sparse(table.rates["rx_drops_total"], judged, seconds=held)
        wr_rate = table.rates["rdma_wr_errors_total"]
        erring = self.wr_errors_held.update(self.wr_errors.update_sparse(wr_rate, judged, seconds=held),
                                            judged & (wr_rate > 0), np.where(judged, held, np.float32(0.0)))
        return dropping, erring, self._keep_alive(table.rates["keep_alive_total"], table.dt_s, judged)

    def _keep_alive(self, rate: F32, dt_s: F32, judged: B) -> B:
        """Return the ports whose device has stopped its keep-alives (module docstring).

        Per port a tick: its quiet time, and whether it rose; the learned gap
        and the limit are computed only for the few ports whose gap grew or
        whose quiet time passed ``keep_alive_after_s`` (at ``rainier`` a full
        computation of both cost ~8 ms a tick).
        """
        p = self.params
        known = judged & (rate >= 0) & (dt_s > 0)  # a rate across a reset is NaN: no evidence
        if not known.any():
            return np.zeros(rate.shape, dtype=bool)
        rose = known & (rate > 0)
        gap = self.keep_alive_quiet_s + dt_s
        # A gap is measured between two rises seen (the first rise ends a gap begun before the monitor heard the
        # port), and learned only while the device was answering: an outage is no cadence.
        grew = np.flatnonzero(rose & (self.keep_alive_rises > 0) & ~(gap <= self.keep_alive_gap_s))
        if grew.size:
            learned = self.keep_alive_gap_s[grew]
            answering = np.isnan(learned) | (self.keep_alive_quiet_s[grew] < self._limit(learned))
            self.keep_alive_gap_s[grew] = np.where(answering, gap[grew], learned)
        self.keep_alive_rises[np.flatnonzero(rose & (self.keep_alive_rises < 2))] += np.uint8(1)
        np.copyto(self.keep_alive_quiet_s, np.where(rose, np.float32(0.0), gap), where=known)
        stopped = np.zeros(rate.shape, dtype=bool)
        long = np.flatnonzero(known & (self.keep_alive_quiet_s >= np.float32(p.keep_alive_after_s)))
        if long.size:
            learned = self.keep_alive_gap_s[long]
            stopped[long] = np.isfinite(learned) & (self.keep_alive_quiet_s[long] >= self._limit(learned))
        return stopped

    def _limit(self, gap_s: F32) -> F32:
        """Return how long a port with these learned gaps may go without a keep-alive."""
        p = self.params
        limit: F32 = np.fmax(np.float32(p.keep_alive_intervals) * gap_s, np.float32(p.keep_alive_after_s))
        return limit
