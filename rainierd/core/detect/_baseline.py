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
* while learning, each sample after the first can pull it by at most
  ``learn_clip`` (relative) times its weight, so one heavy-tailed sample in
  the first seconds (a bandwidth reading 1.8 times the link's, in the
  realistic profile) cannot leave a level 12 % off that the change detector
  then reads as a fault and, by its evidence, freezes (issue 21's job-mix
  control: the one NeuronLink false alarm left);
* after learning, each sample can pull it by at most ``clip`` (relative)
  times its weight, and the weight is that of a half-life of ``halflife_s``
  (an hour by default): a drift slower than that is absorbed by at most
  ``clip`` per half-life, far slower than any change detector's horizon;
* the callers keep a wide band against the entity's peers as well
  (``PathParams.latency_band``, ``bandwidth_band``), which no learning moves.

``RateBaseline`` is the same idea for a Poisson count (retransmits): the
port's rate is (its discounted count + a prior of some exposure at the
peers' rate) / (its discounted exposure + that prior), the gamma-Poisson
estimate, the exposure being what the count follows (packets sent, for
retransmits; seconds by default), so a port with little history sits near its peers' rate and one
with an hour of history at its own.  It learns with a delay instead of
freezing on evidence: a slow test's evidence builds over minutes, and a rate
learned only in its quiet moments would be biased low.

Both export what they learned as named arrays (``arrays``) and take them
back (``load``, all or nothing), so a restarted monitor continues from them
(``core/learned.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from rainierd import native
from rainierd._types import F32, B, Floats


def _interval(seconds: Floats, accept: B) -> F32:
    """Return each entity's interval where it is accepted and known, else 0."""
    out = np.fmax(seconds, np.float32(0.0)).astype(np.float32, copy=False)  # NaN: 0
    np.copyto(out, np.float32(0.0), where=~accept | (out < 0))
    return out


def fit(arrays: Mapping[str, npt.NDArray[Any]], name: str, like: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return ``arrays[name]``; raises ValueError unless it has ``like``'s shape and dtype."""
    theirs = arrays.get(name)
    if theirs is None or theirs.shape != like.shape or theirs.dtype != like.dtype:
        found = None if theirs is None else (theirs.shape, str(theirs.dtype))
        raise ValueError(f"{name}: {found} does not fit {(like.shape, str(like.dtype))}")
    return theirs


def take(arrays: Mapping[str, npt.NDArray[Any]], name: str, like: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return a copy of ``arrays[name]``; raises ValueError unless it has ``like``'s shape and dtype."""
    return fit(arrays, name, like).copy()


class Learned:
    """What a baseline has learned, as named arrays (its ``FIELDS``): exported, and taken back after a restart."""

    FIELDS: ClassVar[tuple[str, ...]] = ()

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Return copies of what it has learned, by name."""
        return {name: getattr(self, name).copy() for name in self.FIELDS}

    def check(self, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
        """Raise ValueError unless ``arrays`` fit ``load``."""
        for name in self.FIELDS:
            fit(arrays, name, getattr(self, name))

    def load(self, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
        """Take back ``arrays()``; raises ValueError, changing nothing, unless every array fits."""
        taken = {name: take(arrays, name, getattr(self, name)) for name in self.FIELDS}
        for name, value in taken.items():
            setattr(self, name, value)


@dataclass(eq=False)
class Baseline(Learned):
    """Each entity's learned level of one figure (NaN until its first accepted sample)."""

    halflife_s: float
    learn_s: float
    clip: float
    level: F32
    history_s: F32
    learn_clip: float = 0.3

    @classmethod
    def empty(
        cls, n: int, *, halflife_s: float, learn_s: float, clip: float, learn_clip: float = 0.3,
    ) -> Baseline:
        """Return baselines of ``n`` entities with no history."""
        return cls(halflife_s, learn_s, clip, np.full(n, np.nan, np.float32), np.zeros(n, np.float32), learn_clip)

    FIELDS: ClassVar[tuple[str, ...]] = ("level", "history_s")

    def learned(self) -> B:
        """Return which entities have enough history to be judged against themselves."""
        return np.asarray(self.history_s >= self.learn_s)

    def reference(self, peers: Floats | float) -> F32:
        """Return each entity's own level where learned, else ``peers`` (its peers' level)."""
        peer = np.broadcast_to(np.asarray(peers, np.float32), self.level.shape)
        return np.where(self.learned(), self.level, peer)  # float32 both: no second copy

    def update(self, x: Floats, accept: B, seconds: Floats) -> None:
        """Fold ``x`` in where ``accept`` (NaN and non-positive intervals count as nothing).

        Each sample weighs its interval over the entity's window: its history
        (a plain mean while learning) up to ``halflife_s / ln 2`` (from then on
        an exponential forgetting of that half-life, to first order in the
        interval).  A sample pulls the level by at most ``learn_clip`` of it
        while learning (the first sets it), ``clip`` once learned, times that
        weight.
        """
        # One compiled pass (rainierd/native: the same float32 operations as numpy's, bit for bit).
        native.baseline_step(self.level, self.history_s, x, accept, seconds,
                             window_cap=self.halflife_s / np.log(2.0), learn_s=self.learn_s, clip=self.clip,
                             learn_shrink=self.learn_clip / self.clip)


@dataclass(eq=False)
class RateBaseline(Learned):
    """Each entity's Poisson rate per unit of exposure: its discounted count over its discounted exposure, shrunk
    to a prior.

    The exposure is what the count follows: seconds for a count that comes
    with time, packets sent for retransmits (``update``'s ``exposure``; the
    seconds by default).  Time still sets the learning: once it has
    ``learn_s`` of history, what it sees is gathered in windows of
    ``delay_s``; a window is held for one more window and learned only if
    the entity stayed clean through both (``update``'s ``clean``).  So every
    sample waits at least ``delay_s`` after it was seen: a slow fault that
    is detected within ``delay_s`` of its start is never learned, wherever
    in a window it began (with one window alone, a fault that began near a
    window's end was learned within seconds: issue 22, 3e-7 of loss learned
    into the rate it was tested against).  A healthy entity's rate is
    learned from all its samples, not only from its quiet ones (which would
    bias it low).
    """

    halflife_s: float
    prior_s: float
    learn_s: float
    delay_s: float
    count: F32
    seconds: F32
    exposure: F32  # discounted as ``seconds``: what the count is a rate of
    pending_count: F32
    pending_seconds: F32
    pending_exposure: F32
    pending_clean: B
    history_s: F32  # seconds seen in all (not discounted)
    held_count: F32  # the last whole window, waiting for the next to end clean
    held_seconds: F32
    held_exposure: F32
    held_clean: B

    @classmethod
    def empty(cls, n: int, *, halflife_s: float, prior_s: float, learn_s: float = 0.0,
              delay_s: float = 0.0) -> RateBaseline:
        """Return rates of ``n`` entities with no history."""
        def zeros() -> F32:
            return np.zeros(n, np.float32)

        return cls(halflife_s, prior_s, learn_s, delay_s, zeros(), zeros(), zeros(), zeros(), zeros(), zeros(),
                   np.ones(n, bool), zeros(), zeros(), zeros(), zeros(), np.ones(n, bool))

    FIELDS: ClassVar[tuple[str, ...]] = (
        "count", "seconds", "exposure", "pending_count", "pending_seconds", "pending_exposure", "pending_clean",
        "history_s", "held_count", "held_seconds", "held_exposure", "held_clean")

    def learned(self) -> B:
        """Return which entities have ``learn_s`` of history."""
        return np.asarray(self.history_s >= self.learn_s)

    def rate(self, prior_rate: Floats | float, prior_exposure: Floats | float | None = None) -> F32:
        """Return each entity's rate per unit of exposure, ``prior_exposure`` (``prior_s`` by default: seconds) of
        ``prior_rate`` (each entity's, or one for all) blended in."""
        prior = np.float32(self.prior_s) if prior_exposure is None else np.asarray(prior_exposure, np.float32)
        with np.errstate(invalid="ignore"):  # no exposure and no prior: NaN, unknown
            rate: F32 = ((self.count + prior * np.float32(prior_rate)) / (self.exposure + prior)).astype(np.float32)
        return rate

    def update(self, counts: Floats, seconds: Floats, *, accept: B, clean: B, exposure: Floats | None = None) -> None:
        """Add ``counts`` over ``seconds`` and ``exposure`` (None: the seconds) where ``accept``; ``clean`` says
        where the entity is healthy now.  An interval with no exposure, or an unknown one, is not accepted: its
        counts have no rate."""
        ok = accept & np.isfinite(counts)
        if exposure is not None:
            ok &= np.asarray(exposure > 0)  # a NaN compares False
        dt = _interval(seconds, ok)
        exposed = dt if exposure is None else _interval(exposure, ok & (dt > 0))
        counted = np.fmax(counts, np.float32(0.0)).astype(np.float32, copy=False)  # NaN: 0
        np.add(self.pending_count, counted, out=self.pending_count, where=dt > 0)
        self.pending_seconds += dt
        self.pending_exposure += exposed
        self.pending_clean &= clean
        # Learning: every sample counts at once.  Then: a window ends when it is delay_s long, and the window
        # before it is learned if both stayed clean; the window that ended is held in its place.
        learning = ~self.learned()
        due = (self.pending_seconds > 0) & (learning | (self.pending_seconds >= self.delay_s))
        if not due.any():
            return
        now = due & learning & self.pending_clean
        self._commit(now, self.pending_count, self.pending_seconds, self.pending_exposure)
        ended = due & ~learning
        self._commit(ended & self.held_clean & self.pending_clean, self.held_count, self.held_seconds,
                     self.held_exposure)
        np.copyto(self.held_count, self.pending_count, where=ended)
        np.copyto(self.held_seconds, self.pending_seconds, where=ended)
        np.copyto(self.held_exposure, self.pending_exposure, where=ended)
        np.copyto(self.held_clean, self.pending_clean, where=ended)
        np.copyto(self.pending_count, np.float32(0.0), where=due)
        np.copyto(self.pending_seconds, np.float32(0.0), where=due)
        np.copyto(self.pending_exposure, np.float32(0.0), where=due)
        np.copyto(self.pending_clean, True, where=due)

    def _commit(self, where: B, counts: F32, seconds: F32, exposure: F32) -> None:
        """Learn ``counts`` over ``seconds`` and ``exposure`` where ``where``: the history so far discounted by
        their length in time."""
        if not where.any():
            return
        decay = np.exp2(-seconds / np.float32(self.halflife_s))
        for total, added in ((self.count, counts), (self.seconds, seconds), (self.exposure, exposure)):
            np.multiply(total, decay, out=total, where=where)
            np.add(total, added, out=total, where=where)
        np.add(self.history_s, seconds, out=self.history_s, where=where)
