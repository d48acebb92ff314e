"""Each entity's own normal: a robust, slowly adapting level per link, port or
chip, so an entity is judged by a change in itself, not by a difference from
its peers that was always there (a longer cable, more hops, a busier port).

Until an entity has ``learn_s`` seconds of history it has no normal of its
own and is judged against its peers (the caller's reference: its kind's or
its group's median); from then on, against its own level.

How a baseline avoids learning a slow fault as normal:

* it learns only from samples the caller accepts: the entity is healthy and
  its change detector holds little evidence (a CUSUM well under its
  threshold), so a fault that has started freezes it;
* after learning, each sample can pull it by at most ``clip`` (relative)
  times its weight, and the weight is that of a half-life of ``halflife_s``
  (an hour by default): a drift slower than that is absorbed by at most
  ``clip`` per half-life, far slower than any change detector's horizon;
* the callers keep a wide band against the entity's peers as well
  (``PathParams.latency_band``, ``bandwidth_band``), which no learning moves.

``RateBaseline`` is the same idea for a Poisson count (retransmits): the
port's rate is (its discounted count + a prior of ``prior_s`` seconds at the
peers' rate) / (its discounted seconds + ``prior_s``), the gamma-Poisson
estimate, so a port with little history sits near its peers' rate and one
with an hour of history at its own.  It learns with a delay instead of
freezing on evidence: a slow test's evidence builds over minutes, and a rate
learned only in its quiet moments would be biased low.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rainierd._types import F32, B, Floats
from rainierd.core.detect._columns import as_bool, as_f32

__all__ = ["Baseline", "RateBaseline"]


@dataclass(eq=False)
class Baseline:
    """Each entity's learned level of one figure (NaN until its first accepted sample)."""

    halflife_s: float
    learn_s: float
    clip: float
    level: F32
    history_s: F32

    @classmethod
    def empty(cls, n: int, *, halflife_s: float, learn_s: float, clip: float) -> Baseline:
        """Return baselines of ``n`` entities with no history."""
        return cls(halflife_s, learn_s, clip, np.full(n, np.nan, np.float32), np.zeros(n, np.float32))

    def learned(self) -> B:
        """Return which entities have enough history to be judged against themselves."""
        return np.asarray(self.history_s >= self.learn_s)

    def reference(self, peers: F32 | float) -> F32:
        """Return each entity's own level where learned, else its peers' level.

        ``peers`` is one figure for all, or a pattern repeated over the
        entities (each node's links in their common order: its kinds' levels).
        """
        pattern = np.ascontiguousarray(np.atleast_1d(np.asarray(peers, np.float32)))
        from rainierd.core.detect import _kernels as kernels  # noqa: PLC0415 - numba loads with the first detector

        out: F32 = kernels.baseline_reference(self.level, self.history_s, np.float32(self.learn_s), pattern)
        return out

    def update(self, x: Floats, accept: B, seconds: Floats) -> None:
        """Fold ``x`` in where ``accept`` (NaN and non-positive intervals count as nothing).

        Each sample weighs its interval over the entity's window: its history
        (a plain mean while learning) up to ``halflife_s / ln 2`` (from then on
        an exponential forgetting of that half-life, to first order in the
        interval).  Once learned, a sample pulls the level by at most ``clip``
        of it, times that weight.  One pass (``_kernels.baseline_update``).
        """
        from rainierd.core.detect import _kernels as kernels  # noqa: PLC0415 - numba loads with the first detector

        kernels.baseline_update(self.level, self.history_s, as_f32(x), as_bool(accept), as_f32(seconds, like=x),
                                np.float32(self.halflife_s / np.log(2.0)), np.float32(self.learn_s),
                                np.float32(self.clip))


@dataclass(eq=False)
class RateBaseline:
    """Each entity's Poisson rate per second: its discounted count over its discounted seconds, shrunk to a prior.

    Once it has ``learn_s`` of history, what it sees is held back for
    ``delay_s`` and learned only if the entity stayed clean all that time
    (``update``'s ``clean``): a slow fault that is detected within the delay
    is never learned, and a healthy entity's rate is learned from all its
    samples, not only from its quiet ones (which would bias it low).
    """

    halflife_s: float
    prior_s: float
    learn_s: float
    delay_s: float
    count: F32
    seconds: F32
    pending_count: F32
    pending_seconds: F32
    pending_clean: B
    history_s: F32  # seconds seen in all (not discounted)

    @classmethod
    def empty(cls, n: int, *, halflife_s: float, prior_s: float, learn_s: float = 0.0,
              delay_s: float = 0.0) -> RateBaseline:
        """Return rates of ``n`` entities with no history."""
        def zeros() -> F32:
            return np.zeros(n, np.float32)

        return cls(halflife_s, prior_s, learn_s, delay_s, zeros(), zeros(), zeros(), zeros(), np.ones(n, bool),
                   zeros())

    def learned(self) -> B:
        """Return which entities have ``learn_s`` of history."""
        return np.asarray(self.history_s >= self.learn_s)

    def rate(self, prior_per_s: float) -> F32:
        """Return each entity's rate per second, ``prior_s`` seconds of ``prior_per_s`` blended in."""
        prior = np.float32(self.prior_s)
        return ((self.count + prior * np.float32(prior_per_s)) / (self.seconds + prior)).astype(np.float32)

    def update(self, counts: Floats, seconds: Floats, *, accept: B, clean: B) -> None:
        """Add ``counts`` over ``seconds`` where ``accept``; ``clean`` says where the entity is healthy now.

        While learning every sample counts at once; then a window is learned
        when it is ``delay_s`` long.  One pass (``_kernels.rate_baseline_update``).
        """
        from rainierd.core.detect import _kernels as kernels  # noqa: PLC0415 - numba loads with the first detector

        kernels.rate_baseline_update(
            self.count, self.seconds, self.pending_count, self.pending_seconds, self.pending_clean, self.history_s,
            as_f32(counts), as_f32(seconds, like=counts), as_bool(accept), as_bool(clean), np.float32(self.halflife_s),
            np.float32(self.learn_s), np.float32(self.delay_s))
