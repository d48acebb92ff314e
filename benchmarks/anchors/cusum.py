"""Anchor (c): a change-point detector on each chip's throughput, Page's one-sided CUSUM on the chip's FP8 FLOP
rate (what step time measures, chip by chip), as Greyhound-style straggler detectors apply change-point tests to
per-worker step times.

Sources:
* E. S. Page, "Continuous Inspection Schemes", Biometrika 41 (1954), https://doi.org/10.2307/2333009 ;
  the tabular CUSUM and its defaults (reference value k = 0.5 sigma) as NIST/SEMATECH e-Handbook of Statistical
  Methods, section 6.3.2.3 "CUSUM Control Charts", https://www.itl.nist.gov/div898/handbook/pmc/section3/pmc323.htm .
* D. Siegmund, "Sequential Analysis" (1985): the in-control average run length of a CUSUM,
  ARL0 ~ (exp(2 k b) - 2 k b - 1) / (2 k^2) with b = h + 1.166 (in sigmas).
* The change-point framing of straggler detection: R. P. Adams and D. J. C. MacKay, "Bayesian Online Changepoint
  Detection" (2007), https://arxiv.org/abs/0710.3742 , the method Greyhound-style detectors build on; CUSUM is its
  classical, parameter-light counterpart (the issue allows either).

How: each chip's in-control mean and standard deviation are estimated from its first ``PHASE_I`` samples (the
textbook Phase I); then S = max(0, S + (mu - x) / sigma - k) on each new sample, a raise when S > h (a
throughput drop), a clear when S falls back to 0.  S is capped at 2h, so a chip recovers in bounded time.
Thresholds, set once: k = 0.5 (the handbook's default); h = 15, from Siegmund's approximation for an in-control
ARL of 10^7 samples (one false alarm per chip in about 116 days at 1 s): the textbook h = 4-5 (ARL0 ~ 500) would
raise about twice a second over a 1,000-chip fleet.  The standard deviation is floored at 0.1 % of the mean (a
chip whose Phase I shows no noise at all would otherwise make any wobble infinite).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from benchmarks.anchors._common import Fresh, Latch, View
from rainierd.core.detect import Event

__all__ = ["PHASE_I", "Cusum", "H", "K"]

K: Final = 0.5
H: Final = 15.0
PHASE_I: Final = 30  # samples
SIGMA_FLOOR: Final = 1e-3  # of the mean


@dataclass(eq=False)
class Cusum:
    """Page's one-sided (downward) CUSUM on each chip's FP8 FLOP rate."""

    name: str = "cusum"
    fresh: Fresh = field(default_factory=Fresh)
    latch: Latch = field(default_factory=lambda: Latch("chip", "straggler"))
    n: np.ndarray = field(default_factory=lambda: np.zeros(0))
    total: np.ndarray = field(default_factory=lambda: np.zeros(0))
    squares: np.ndarray = field(default_factory=lambda: np.zeros(0))
    s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def observe(self, view: View) -> list[Event]:
        """Take each chip's new throughput sample into its CUSUM; return the raises and clears."""
        chips = view.state.chips
        if self.n.size != chips.n:
            self.n, self.total, self.squares, self.s = (np.zeros(chips.n) for _ in range(4))
        x = np.asarray(chips.rates["fp8_flop_total"], dtype=np.float64)
        new = self.fresh.of(chips) & np.isfinite(x)
        learning = new & (self.n < PHASE_I)
        self.n[learning] += 1
        self.total[learning] += x[learning]
        self.squares[learning] += x[learning] ** 2
        judged = new & ~learning
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = self.total / np.maximum(self.n, 1)
            var = np.maximum(self.squares / np.maximum(self.n, 1) - mu**2, 0.0) * self.n / np.maximum(self.n - 1, 1)
            sigma = np.maximum(np.sqrt(var), SIGMA_FLOOR * np.abs(mu))
            step = np.where(sigma > 0, (mu - x) / sigma - K, -K)
        self.s[judged] = np.clip(self.s[judged] + step[judged], 0.0, 2 * H)
        return self.latch.update(view.tick, self.s > H, "cusum_drop", clear=self.s <= 0.0)
