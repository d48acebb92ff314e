"""The traffic shape of a training step: collectives come in bursts, so a
link's or port's traffic swings between a low rate while the chips compute
and a high one while they exchange gradients, many times a minute.

A publisher's byte counter is the integral of that curve up to the moment its
agent sampled: two agents of one job that sample at different moments of the
step see different interval rates although their links carry the same
traffic.  ``StepCycle`` gives that integral exactly (the rate is a square
wave, its integral piecewise linear), so counters built from it stay exactly
consistent however the agents are phased.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rainierd._types import F64


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCycle:
    """A square wave of mean 1: ``swing`` times higher for the ``comm_share`` of each step in collectives."""

    period_s: float  # one training step
    comm_share: float  # share of the step in collectives, the high part, at the start of each cycle
    swing: float  # the collective phase's rate over the compute phase's

    def __post_init__(self) -> None:
        if not (self.period_s > 0 and 0.0 < self.comm_share < 1.0 and self.swing >= 1.0):
            raise ValueError(f"a step cycle needs period_s > 0, 0 < comm_share < 1 and swing >= 1, not {self}")

    @property
    def low(self) -> float:
        """Return the compute phase's rate, relative to the mean."""
        return 1.0 / (1.0 - self.comm_share + self.swing * self.comm_share)

    @property
    def high(self) -> float:
        """Return the collective phase's rate, relative to the mean."""
        return self.swing * self.low

    def rate(self, elapsed_s: F64, phase: F64) -> F64:
        """Return the relative rate at ``elapsed_s`` of a job whose cycle starts ``phase`` (of a step) in."""
        frac = np.mod(elapsed_s / self.period_s + phase, 1.0)
        return np.where(frac < self.comm_share, self.high, self.low)

    def seconds(self, from_s: F64, to_s: F64, phase: F64) -> F64:
        """Return the integral of the rate from ``from_s`` to ``to_s`` (elapsed seconds): the seconds of
        mean traffic that interval holds.  Exact: whole cycles count one period each, and the partial
        cycles at either end their high and low parts.
        """
        x0 = np.asarray(from_s, dtype=np.float64) / self.period_s + phase
        x1 = np.asarray(to_s, dtype=np.float64) / self.period_s + phase
        whole0, whole1 = np.floor(x0), np.floor(x1)
        cycles = (whole1 - whole0) + self._within(x1 - whole1) - self._within(x0 - whole0)
        return np.asarray(cycles * self.period_s, dtype=np.float64)

    def _within(self, frac: F64) -> F64:
        """Return the integral over one cycle's first ``frac`` of it, in cycles (a whole cycle is 1)."""
        c = self.comm_share
        return np.asarray(self.high * np.minimum(frac, c) + self.low * np.maximum(frac - c, 0.0), dtype=np.float64)
