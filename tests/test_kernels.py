"""The compiled detection kernels (rainierd/core/detect/_kernels.py) against
plain numpy references on small random columns: the same state and the same
answers, to float32 rounding (exactly, where no transcendental is involved).

The references are the numpy the kernels replaced, kept here only: one
implementation of each algorithm ships.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.core.detect import _kernels as kernels
from rainierd.core.detect._baseline import Baseline, RateBaseline
from rainierd.core.detect._stats import ClippedCusum, ewma
from rainierd.core.kernels import compiled

F32 = npt.NDArray[np.float32]
B = npt.NDArray[np.bool_]


# ---- plain references (the numpy each kernel replaced) --------------------------------------------------------

@np.errstate(all="ignore")
def ref_baseline_update(base: Baseline, x: F32, accept: B, seconds: F32) -> None:
    ok = accept & (seconds > 0) & np.isfinite(x)
    if not ok.any():
        return
    level = base.level
    first = ok & np.isnan(level)
    np.copyto(level, x, where=first, casting="unsafe")
    dt = np.where(ok, seconds, np.float32(0.0)).astype(np.float32, copy=False)
    window = base.history_s + dt
    np.minimum(window, np.float32(base.halflife_s / np.log(2.0)), out=window)
    step = np.subtract(x, level, dtype=np.float32)
    bound = np.abs(level)
    bound *= np.float32(base.clip)
    np.copyto(bound, np.float32(np.inf), where=base.history_s < base.learn_s)
    np.clip(step, -bound, bound, out=step)
    step *= dt
    np.divide(step, window, out=step, where=ok)
    np.add(level, step, out=level, where=ok & ~first)
    base.history_s += dt


def ref_reference(base: Baseline, peers: F32) -> F32:
    return np.where(base.history_s >= base.learn_s, base.level, peers).astype(np.float32)


@np.errstate(all="ignore")
def ref_rate_update(rates: RateBaseline, counts: F32, seconds: F32, accept: B, clean: B) -> None:
    dt = np.fmax(seconds, np.float32(0.0)).astype(np.float32, copy=False)
    np.copyto(dt, np.float32(0.0), where=~(accept & np.isfinite(counts)) | (dt < 0))
    counted = np.fmax(counts, np.float32(0.0)).astype(np.float32, copy=False)
    np.add(rates.pending_count, counted, out=rates.pending_count, where=dt > 0)
    rates.pending_seconds += dt
    rates.pending_clean &= clean
    due = (rates.pending_seconds > 0) & (~rates.learned() | (rates.pending_seconds >= rates.delay_s))
    if not due.any():
        return
    commit = due & rates.pending_clean
    decay = np.exp2(-rates.pending_seconds / np.float32(rates.halflife_s))
    np.multiply(rates.count, decay, out=rates.count, where=commit)
    np.add(rates.count, rates.pending_count, out=rates.count, where=commit)
    np.multiply(rates.seconds, decay, out=rates.seconds, where=commit)
    np.add(rates.seconds, rates.pending_seconds, out=rates.seconds, where=commit)
    np.add(rates.history_s, rates.pending_seconds, out=rates.history_s, where=commit)
    np.copyto(rates.pending_count, np.float32(0.0), where=due)
    np.copyto(rates.pending_seconds, np.float32(0.0), where=due)
    np.copyto(rates.pending_clean, True, where=due)


@np.errstate(all="ignore")
def ref_cusum_update(c: ClippedCusum, x: F32, mask: B, seconds: F32 | None) -> B:
    known = mask & ~np.isnan(x)
    step = np.minimum(x, np.float32(c.cap), dtype=np.float32)
    np.copyto(step, np.float32(0.0), where=np.isnan(step))
    step -= np.float32(c.k)
    if seconds is not None:
        step *= np.fmax(seconds, np.float32(0.0)).astype(np.float32, copy=False)
        np.minimum(step, np.float32(c.h / c.samples), out=step)
    step += c.s
    np.clip(step, 0.0, c.ceiling, out=step)
    np.copyto(c.s, step, where=known)
    return c.s >= c.h


@np.errstate(all="ignore")
def ref_ewma(previous: F32, current: F32, mask: B, alpha: float) -> None:
    blended = np.subtract(current, previous, dtype=np.float32)
    blended *= np.float32(alpha)
    blended += previous
    np.copyto(blended, current, where=np.isnan(previous), casting="same_kind")
    np.copyto(previous, blended, where=mask)


@dataclass
class Drops:
    drops: F32
    down_s: F32
    last_down_s: F32
    was_dropped: B


@np.errstate(all="ignore")
def ref_count_drops(d: Drops, dropped: B, fresh: B, dt: F32, held: F32, *, window_s: float) -> None:
    decay = np.exp(-np.fmax(dt, np.float32(0.0)) / np.float32(window_s)).astype(np.float32)
    np.multiply(d.drops, decay, out=d.drops, where=fresh)
    begins = dropped & ~d.was_dropped
    np.add(d.drops, np.float32(1.0), out=d.drops, where=begins)
    np.copyto(d.down_s, np.float32(0.0), where=begins)
    np.add(d.down_s, np.nan_to_num(held, nan=0.0), out=d.down_s, where=dropped)
    np.copyto(d.last_down_s, d.down_s, where=fresh & ~dropped & d.was_dropped)
    np.copyto(d.was_dropped, dropped, where=fresh)


# ---- random columns with the awkward values every detector sees ------------------------------------------------

N = 48
_SPECIAL = (np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1e-30, 3e38)


def column(rng: np.random.Generator, *, scale: float = 10.0, special: float = 0.1) -> F32:
    """Return N float32 values, about ``special`` of them NaN, infinite, zero, negative or extreme."""
    out = (rng.standard_normal(N) * scale + scale).astype(np.float32)
    pick = rng.random(N) < special
    out[pick] = rng.choice(np.array(_SPECIAL), int(pick.sum()))
    return out


def intervals(rng: np.random.Generator) -> F32:
    """Return N sample intervals: mostly 0.5-5 s, some NaN, zero or negative."""
    out = rng.choice(np.array([0.5, 1.0, 1.0, 1.0, 2.0, 5.0], np.float32), N)
    pick = rng.random(N) < 0.1
    out[pick] = rng.choice(np.array([np.nan, 0.0, -1.0], np.float32), int(pick.sum()))
    return out


def mask(rng: np.random.Generator, share: float = 0.7) -> B:
    return np.asarray(rng.random(N) < share)


def same(a: npt.NDArray[np.generic], b: npt.NDArray[np.generic], *, ulp: int = 0) -> bool:
    """Return whether two columns agree: NaN where the other is, else within ``ulp`` float32 steps."""
    if a.dtype == np.bool_:
        return bool((a == b).all())
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    if not (np.isnan(a32) == np.isnan(b32)).all():
        return False
    finite = np.isfinite(a32)
    if not (a32[~finite & ~np.isnan(a32)] == b32[~finite & ~np.isnan(b32)]).all():
        return False
    spacing = np.spacing(np.maximum(np.abs(a32[finite]), np.abs(b32[finite])))
    return bool((np.abs(a32[finite] - b32[finite]) <= ulp * spacing).all())


seeds = st.integers(min_value=0, max_value=2**32 - 1)


class TestBaselineKernels:
    @settings(max_examples=60, deadline=None)
    @given(seeds, st.sampled_from([0.02, 0.1]), st.sampled_from([0.0, 3.0, 30.0]))
    def test_update_is_the_numpy_reference(self, seed: int, clip: float, learn_s: float) -> None:
        """Twenty updates of random samples, acceptances and intervals leave the same levels and histories."""
        rng = np.random.default_rng(seed)
        kernel = Baseline.empty(N, halflife_s=60.0, learn_s=learn_s, clip=clip)
        ref = Baseline.empty(N, halflife_s=60.0, learn_s=learn_s, clip=clip)
        for _ in range(20):
            x, accept, seconds = column(rng, scale=1.0), mask(rng), intervals(rng)
            kernel.update(x, accept, seconds)
            ref_baseline_update(ref, x, accept, seconds)
            assert same(kernel.level, ref.level)
            assert same(kernel.history_s, ref.history_s)

    @settings(max_examples=30, deadline=None)
    @given(seeds, st.sampled_from([1, 3, 6]))
    def test_reference_repeats_the_peers_pattern(self, seed: int, period: int) -> None:
        """An entity without learn_s of history takes its place's figure of the peers' pattern, else its own."""
        rng = np.random.default_rng(seed)
        base = Baseline.empty(N, halflife_s=60.0, learn_s=3.0, clip=0.1)
        base.level[:] = column(rng)
        base.history_s[:] = rng.choice(np.array([0.0, 2.9, 3.0, 10.0], np.float32), N)
        pattern = column(rng)[:period]
        assert same(base.reference(pattern), ref_reference(base, np.tile(pattern, N // period)))
        assert same(base.reference(7.0), ref_reference(base, np.full(N, 7.0, np.float32)))

    @settings(max_examples=60, deadline=None)
    @given(seeds, st.sampled_from([0.0, 30.0]), st.sampled_from([0.0, 5.0]))
    def test_rate_update_is_the_numpy_reference(self, seed: int, learn_s: float, delay_s: float) -> None:
        """Thirty windows of random counts leave the same discounted counts, seconds and pending windows
        (exp2 as numpy's, to a float32 step)."""
        rng = np.random.default_rng(seed)
        kernel = RateBaseline.empty(N, halflife_s=20.0, prior_s=30.0, learn_s=learn_s, delay_s=delay_s)
        ref = RateBaseline.empty(N, halflife_s=20.0, prior_s=30.0, learn_s=learn_s, delay_s=delay_s)
        for _ in range(30):
            counts, seconds, accept, clean = column(rng, scale=3.0), intervals(rng), mask(rng), mask(rng, 0.9)
            kernel.update(counts, seconds, accept=accept, clean=clean)
            ref_rate_update(ref, counts, seconds, accept, clean)
            for name in ("count", "seconds", "pending_count", "pending_seconds", "pending_clean", "history_s"):
                assert same(getattr(kernel, name), getattr(ref, name), ulp=4), name


class TestStatsKernels:
    @settings(max_examples=60, deadline=None)
    @given(seeds, st.booleans(), st.sampled_from([1.0, 2.0, 6.0]))
    def test_cusum_is_the_numpy_reference(self, seed: int, timed: bool, samples: float) -> None:
        """Twenty updates of random evidence (NaN, infinite, huge) leave the same sums and alarms."""
        rng = np.random.default_rng(seed)
        kernel = ClippedCusum.zeros(N, k=2.0, h=20.0, cap=6.0, ceiling=26.0, samples=samples)
        ref = ClippedCusum.zeros(N, k=2.0, h=20.0, cap=6.0, ceiling=26.0, samples=samples)
        for _ in range(20):
            x, known, seconds = column(rng, scale=4.0), mask(rng), intervals(rng) if timed else None
            alarm = kernel.update(x, known, seconds=seconds)
            assert same(alarm, ref_cusum_update(ref, x, known, seconds))
            assert same(kernel.s, ref.s)

    @settings(max_examples=60, deadline=None)
    @given(seeds, st.sampled_from([0.2, 0.5]))
    def test_ewma_is_the_numpy_reference(self, seed: int, alpha: float) -> None:
        """Twenty blends, seeded where the average is NaN, leave the same averages."""
        rng = np.random.default_rng(seed)
        kernel = np.full(N, np.nan, np.float32)
        ref = kernel.copy()
        for _ in range(20):
            current, where = column(rng), mask(rng)
            assert ewma(kernel, current, where, alpha=alpha) is kernel
            ref_ewma(ref, current, where, alpha)
            assert same(kernel, ref)


class TestDropKernel:
    @settings(max_examples=60, deadline=None)
    @given(seeds)
    def test_count_drops_is_the_numpy_reference(self, seed: int) -> None:
        """Forty samples of random drops leave the same timings, and counts within two float32 steps of each
        sample's (numpy's SIMD exp and the kernel's libm exp round apart; the reference then resumes from the
        kernel's counts, so steps do not add up)."""
        rng = np.random.default_rng(seed)

        def fresh_state() -> Drops:
            return Drops(np.zeros(N, np.float32), np.zeros(N, np.float32), np.full(N, np.inf, np.float32),
                         np.zeros(N, bool))

        kernel, ref = fresh_state(), fresh_state()
        for _ in range(40):
            dropped, fresh, dt, held = mask(rng, 0.3), mask(rng, 0.8), intervals(rng), intervals(rng)
            kernels.count_drops(kernel.drops, kernel.down_s, kernel.last_down_s, kernel.was_dropped, dropped, fresh,
                                dt, held, np.float32(60.0))
            ref_count_drops(ref, dropped, fresh, dt, held, window_s=60.0)
            assert same(kernel.drops, ref.drops, ulp=2)
            ref.drops[:] = kernel.drops
            for name in ("down_s", "last_down_s", "was_dropped"):
                assert same(getattr(kernel, name), getattr(ref, name)), name


class TestSignatures:
    def test_every_kernel_is_compiled_once_for_one_signature(self) -> None:
        """Each kernel holds exactly the signature it declares, so no tick ever compiles a second one."""
        names = ("baseline_update", "baseline_reference", "cusum_update", "ewma_update", "rate_baseline_update",
                 "count_drops")
        assert compiled() == dict.fromkeys(names, 1)

    def test_a_column_of_another_dtype_is_refused_not_compiled(self) -> None:
        """A float64 column handed straight to a kernel raises instead of compiling a float64 variant."""
        with pytest.raises(TypeError):
            kernels.ewma_update(np.zeros(3, np.float32), np.zeros(3), np.ones(3, bool), np.float32(0.5))
