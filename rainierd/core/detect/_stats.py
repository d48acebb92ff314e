"""Robust statistics and change detection shared by the detectors: median/MAD
peer comparison, a clipped one-sided CUSUM, and an EWMA.

Fleet-wide medians are estimated on a fixed random subset of at most 65,536
entities (``PeerSample``): a median of millions of values costs a partition
of millions every tick, while the subset's median lies within about
1.25 / sqrt(65,536) = 0.5 % of a standard deviation of the fleet's, far inside
any threshold here.  The subset is drawn once, from a fixed seed, so the core
stays deterministic.

The CUSUM is the persistence mechanism: a single noise burst adds at most
``cap - k`` to the sum, so only evidence that persists for several ticks
crosses ``h``; the sum is bounded by ``ceiling`` so an alarm that ends
clears within ``(ceiling - h) / k`` clean ticks instead of lingering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd import native
from rainierd._types import F32, F64, I64, B, Floats

MAD_TO_SIGMA: Final = 1.4826
SAMPLE_SIZE: Final = 65_536
_SAMPLE_SEED: Final = 0x5A17


@dataclass(frozen=True, eq=False)
class PeerSample:
    """A fixed random subset of ``n`` entities on which fleet-wide medians are estimated (all, when small)."""

    index: I64 | None

    @classmethod
    def of(cls, n: int, *, size: int = SAMPLE_SIZE) -> PeerSample:
        """Return the subset for ``n`` entities: all of them up to ``size``, else ``size`` drawn once."""
        if n <= size:
            return cls(None)
        rng = np.random.default_rng(_SAMPLE_SEED)
        return cls(np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64))

    def take(self, values: Floats, mask: B) -> Floats:
        """Return ``values`` of the subset's entities selected by ``mask``."""
        if self.index is None:
            return values[mask]
        return values[self.index][mask[self.index]]

    def pick(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Return ``values`` of the subset's entities (all of them when there is no subset)."""
        return values if self.index is None else values[self.index]


_ALL: Final = PeerSample(None)


def robust_center_scale(
    values: Floats, mask: B, *, floor: float, sample: PeerSample = _ALL, relative: bool = False,
) -> tuple[float, float]:
    """Return (median, 1.4826 x MAD) of ``values[mask]`` (on ``sample``), the scale at least ``floor``.

    With ``relative`` the scale is that of ``values / median`` instead.  NaNs
    are ignored; with nothing (finite) selected returns (nan, floor): callers
    then see no deviation.
    """
    selected = sample.take(values, mask).astype(np.float64)
    # A NaN (a rate across a restart) is no value: one would make the median, and so every entity's
    # deviation in the fleet, NaN for the tick.
    selected = selected[np.isfinite(selected)]
    if selected.size == 0:
        return float("nan"), floor
    center = finite_median(selected)
    if relative:
        selected = selected / center
        scale = MAD_TO_SIGMA * finite_median(np.abs(selected - 1.0))
    else:
        scale = MAD_TO_SIGMA * finite_median(np.abs(selected - center))
    return center, max(scale, floor)


_SORT_BELOW: Final = 2_048  # values under which one sort beats np.median's partition and its checks


def finite_median(values: F64) -> float:
    """Return the median of ``values`` (1-D, float64, finite, not empty), equal to ``np.median``'s.

    Under ``_SORT_BELOW`` values it is one sort and the middle one or two:
    ``np.median``'s partition, NaN check and mean cost ~60 us a call
    whatever the size, and the detectors take two a group and kind a tick,
    which was an eighth of a small fleet's analysis (the unit tier's
    simulated runs).  Above it, ``np.median`` (a partition is linear)."""
    n = values.size
    if n >= _SORT_BELOW:
        return float(np.median(values))
    ordered = np.sort(values)
    half = n // 2
    return float(ordered[half]) if n % 2 else float((ordered[half - 1] + ordered[half]) / 2)


def row_nanmedian(values: Floats) -> Floats:
    """Return the median of each row ignoring NaN (NaN for a row with none), by one sort of the rows.

    ``np.nanmedian`` along a short axis falls back to masked arrays, tens of
    times slower on the fleet's 7,800 x 64 groups.
    """
    ordered = np.sort(values, axis=1)  # NaN sorts last
    count = np.isfinite(ordered).sum(axis=1)
    rows = np.arange(values.shape[0])
    lo = ordered[rows, np.maximum(count - 1, 0) // 2]
    hi = ordered[rows, np.maximum(count, 1) // 2 - (count == 0)]
    return np.where(count > 0, (lo + hi) / 2, np.nan).astype(values.dtype, copy=False)


def group_nanmedian(values: Floats, group: I64, n_groups: int) -> F64:
    """Return the median of each group's finite values (groups 0 to ``n_groups`` - 1; -1 is in none), NaN for
    a group with none, by one sort of the values by (group, value).

    Rows of unequal length (a job's nodes) have no ``row_nanmedian``.  The
    sort key is the group plus the value scaled into [0, 1), so one float64
    argsort orders by group and then by value (within 2^-52 of the key:
    values closer than ~1e-11 of their spread may swap, which moves no
    median); the group's middle places are then read off its run.
    """
    out = np.full(n_groups, np.nan)
    idx = np.flatnonzero(np.isfinite(values) & (group >= 0))
    if not idx.size:
        return out
    key = values[idx].astype(np.float64)
    low, span = float(key.min()), float(key.max() - key.min())
    key -= low
    key /= span * (1.0 + 2.0**-20) if span > 0 else 1.0
    key += group[idx]
    order = np.argsort(key)
    ordered = values[idx][order].astype(np.float64)
    counts = np.bincount(group[idx], minlength=n_groups)
    starts = np.cumsum(counts) - counts
    some = np.flatnonzero(counts)
    lo = starts[some] + (counts[some] - 1) // 2
    hi = starts[some] + counts[some] // 2
    out[some] = (ordered[lo] + ordered[hi]) / 2
    return out


def others_nanmedian(values: Floats) -> Floats:
    """Return, for each value, the median of the other finite values of its row (NaN where it is NaN or alone).

    An entity's peers without the entity itself: with two ports a node, one
    port at half its traffic is half its peer's, not two thirds of a median
    it pulls down itself.  By one sort of the rows: with the row's m finite
    values in order s, leaving out a value v leaves the middle of s shifted
    by at most one place, on the side v is not.  For even m the others'
    median is s[m/2] if v <= s[m/2 - 1], else s[m/2 - 1]; for odd m (middle
    s[h]), (s[h] + s[h+1]) / 2 if v < s[h], (s[h-1] + s[h]) / 2 if v > s[h],
    else (s[h-1] + s[h+1]) / 2 (ties give the same value whichever copy is
    left out).  Only per-row figures are gathered: the fleet-sized work is
    the sort and one comparison a value.
    """
    ordered = np.sort(values, axis=1)  # NaN sorts last
    count = np.isfinite(ordered).sum(axis=1)
    rows = np.arange(values.shape[0])[:, None]
    middle_at = (count // 2)[:, None] + np.arange(-1, 2)  # per row: s[h-1], s[h], s[h+1] with h = m // 2
    below, middle, above = np.split(ordered[rows, np.clip(middle_at, 0, values.shape[1] - 1)], 3, axis=1)
    odd = (count % 2 == 1)[:, None]
    # Per row, the others' median of a value left out from below the middle and from above it.  In an
    # even row no value lies strictly between s[h-1] and s[h], so "below s[h]" is "at most s[h-1]".
    # The sorted rows are spent: their buffer takes the answer, and one mask serves every choice.
    out = ordered
    np.copyto(out, np.where(odd, (below + middle) / 2, below))
    mask = np.less(values, middle)
    np.copyto(out, np.where(odd, (middle + above) / 2, middle), where=mask)
    np.equal(values, middle, out=mask)
    mask &= odd
    np.copyto(out, (below + above) / 2, where=mask)
    np.isfinite(values, out=mask)
    np.logical_not(mask, out=mask)
    mask |= (count < 2)[:, None]
    np.copyto(out, np.nan, where=mask)
    return out


def log1p(y: F32) -> F32:
    """Return ln(1 + y) of float32 ``y`` to within four float32 ulps, at a quarter of ``np.log1p``'s cost.

    numpy has no vectorised float32 log1p (16 ns an element here, against 3
    for ``np.log``), and the EFA slow-loss test takes four a port a tick: 60
    ms of rainier-1m's tick (issue 39).  This is Goldberg's form (What every
    computer scientist should know about floating-point arithmetic, 1991,
    theorem 4): with u = 1 + y rounded, ln(u) * y / (u - 1) is accurate because
    u - 1 is exact and ln(u) / (u - 1) varies slowly.  Where u - 1 is 0 (y
    under half an ulp of 1) or not finite, ``np.log1p`` itself is taken.
    """
    u = np.add(y, np.float32(1.0), dtype=np.float32)
    exact = np.subtract(u, np.float32(1.0))
    special = np.flatnonzero((exact == 0) | ~np.isfinite(exact))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.log(u, out=u)
        out /= exact
        out *= y
        if special.size:
            out[special] = np.log1p(y[special])
    return out


def ewma(previous: F32, current: Floats, mask: B, *, alpha: float) -> F32:
    """Update the EWMA ``previous`` in place with ``current`` where ``mask`` (seeded where it is NaN); return it."""
    blended = np.subtract(current, previous, dtype=np.float32)
    blended *= np.float32(alpha)
    blended += previous
    seed = np.isnan(previous)
    np.copyto(blended, current, where=seed, casting="same_kind")
    np.copyto(previous, blended, where=mask)
    return previous


@dataclass(eq=False)
class ClippedCusum:
    """One-sided CUSUM per entity: S = clip(S + min(x, cap) - k, 0, ceiling); alarm while S >= h.

    In alarm, a step under k drains at least k: from the ceiling, S falls under h in
    (ceiling - h) / k clean seconds whatever the noise of the clean evidence.
    """

    k: float
    h: float
    cap: float
    ceiling: float
    s: F32
    samples: float = 2.0  # with ``seconds``, one sample adds at most h / samples

    @classmethod
    def zeros(
        cls, n: int, *, k: float, h: float, cap: float, ceiling: float | None = None, samples: float = 2.0,
    ) -> ClippedCusum:
        """Return a CUSUM of ``n`` entities at rest."""
        if samples < 1.0:
            raise ValueError(f"a CUSUM needs at least one sample to raise, not {samples}")
        return cls(k, h, cap, ceiling if ceiling is not None else 2.0 * h, np.zeros(n, np.float32), samples)

    def update(
        self, x: Floats, mask: B, *, seconds: Floats | None = None, drain_seconds: Floats | None = None,
    ) -> B:
        """Add the evidence ``x`` where ``mask``; return the alarm mask.

        A NaN is no sample for this figure (a rate across a counter restart, a
        field the publisher left out): the sum stays as it was, so an unknown
        figure neither adds evidence nor drains it as if it were healthy.

        With ``seconds`` (each entity's interval), ``x``, ``k`` and ``cap`` are
        rates per second and each step is weighted by its interval, so the
        CUSUM reads the same evidence in the same time at any tick length,
        except that no one interval adds more than ``h / samples``: at a long
        tick an interval's average cannot tell a second-long spike from a
        step that filled it, so ``samples`` intervals must agree before an
        alarm (at a short tick the per-second cap binds first).
        ``drain_seconds`` (with ``seconds``) is the sample time each interval
        spans, a lost sample's included, which ``seconds`` may cap: a clean
        sample in alarm drains at least ``k`` a second of it, so an alarm ends
        ``drain_s`` after its clean evidence began in sample time, however
        many samples were lost (capped, a chip losing every other sample
        drained in twice the time, issue 38).  Evidence still adds by ``seconds``.
        """
        # One compiled pass (rainierd/native: the same float32 operations as numpy's, bit for bit).  In alarm,
        # clean evidence (under k) drains at least k a second, however close to k it is: the ceiling then
        # bounds how long an alarm outlives its cause (drain_s), as docs/detection.md says.
        return native.cusum_step(self.s, x, mask, seconds=seconds, drain_seconds=drain_seconds, k=self.k, h=self.h,
                                 cap=self.cap, per_sample=self.h / self.samples, ceiling=self.ceiling)

    def update_sparse(self, x: Floats, mask: B, *, seconds: Floats | None = None) -> B:
        """Return ``update``'s alarm mask, computed only where ``x`` is positive or the sum is.

        For evidence that is zero (or unknown) nearly everywhere, such as
        error counts or an indicator: elsewhere a step is at most ``-k`` times
        a non-negative interval and the sum, at 0, stays at 0, so leaving those
        entities out changes nothing while costing a pass over the few others.
        """
        moving = np.flatnonzero((mask & (x > 0)) | (self.s > 0))
        alarm = np.zeros(self.s.shape, dtype=bool)
        if not moving.size:
            return alarm
        part = ClippedCusum(self.k, self.h, self.cap, self.ceiling, self.s[moving], self.samples)
        interval = None if seconds is None else np.broadcast_to(seconds, self.s.shape)[moving]
        alarm[moving] = part.update(x[moving], mask[moving], seconds=interval)
        self.s[moving] = part.s
        return alarm


@dataclass(eq=False)
class Latch:
    """Keeps each entity's alarm on until ``hold_s`` seconds of its samples pass without a count.

    For counts that come one by one, seconds apart (execution errors, RDMA
    work-request errors): a CUSUM's sum falls under its threshold between
    them, so its alarm alone clears and is raised again at the next.  Only
    latched entities (few) are computed.
    """

    hold_s: float
    on: B
    quiet_s: F32

    @classmethod
    def zeros(cls, n: int, *, hold_s: float) -> Latch:
        """Return ``n`` entities with no alarm."""
        return cls(hold_s, np.zeros(n, dtype=bool), np.zeros(n, np.float32))

    def update(self, alarm: B, counted: B, seconds: Floats) -> B:
        """Latch ``alarm``; an entity's quiet time restarts where ``counted`` (a count in its new sample) and
        grows by its ``seconds`` elsewhere (NaN: none); return the latched alarm."""
        busy = np.flatnonzero(self.on | alarm)
        if busy.size:
            grown = self.quiet_s[busy] + np.nan_to_num(np.broadcast_to(seconds, self.on.shape)[busy], nan=0.0)
            quiet = np.where(counted[busy] | alarm[busy], np.float32(0.0), grown).astype(np.float32)
            self.quiet_s[busy] = quiet
            self.on[busy] = quiet < np.float32(self.hold_s)
        return self.on.copy()
