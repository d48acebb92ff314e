"""The detectors' per-entity updates as compiled loops: one pass over each
column, running state updated in place.

Why compiled: written as numpy, each update is a dozen to twenty full passes
over fleet-sized arrays (a temporary per operation), and at ``rainier`` a
NeuronLink column is 3M entries: the per-entity baselines and CUSUMs alone
were ~40 % of detection (docs/performance.md, "Detection").  Here each is one
loop that reads each entity's inputs once and writes its state once.

Same answers as the numpy they replace: every operation is float32 where the
numpy was, in the same order, NaN handled as numpy's ``minimum``/``maximum``
handle it (the NaN wins), no fastmath.  Transcendentals (``exp``, ``exp2``)
may differ from numpy's own SIMD versions by float32 rounding.
tests/test_kernels.py compares each with a plain numpy reference.

Every kernel has one explicit signature, so it compiles (or loads from the
on-disk cache, ``cache=True``) when this module is imported, never on a
tick, and a caller passing another dtype or layout gets a TypeError instead
of a silent second compile.  ``python -m rainierd.core.kernels`` imports it
once to fill the cache (scripts/_setup.sh and the Dockerfile run it).  numba itself
takes a second to import, so the detectors import this module only when the
first one is built (``FleetDetector``): a health check, a simulator or
``--help`` never loads it.  The
kernels release the GIL (``nogil``): the analysis thread runs them while the
event loop goes on.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numba import njit

from rainierd._types import F32, B

__all__ = [
    "KERNELS",
    "baseline_reference",
    "baseline_update",
    "count_drops",
    "cusum_update",
    "ewma_update",
    "rate_baseline_update",
]

_F32: Final = np.float32
_ZERO: Final = np.float32(0.0)
_ONE: Final = np.float32(1.0)
_INF: Final = np.float32(np.inf)
_F32_MAX: Final = np.finfo(np.float32).max

# One signature a kernel: C-contiguous 1-D float32 and bool columns, float32 parameters.  Each is
# njit(signature, cache=True, nogil=True, error_model="numpy"): numpy's error model makes a float
# division by zero inf or NaN as numpy does, not a ZeroDivisionError.


@njit(inline="always")
def _minimum(a: np.float32, b: np.float32) -> np.float32:
    """Return numpy's ``minimum``: the smaller, or NaN when either is NaN."""
    return a if (a < b or np.isnan(a)) else b


@njit(inline="always")
def _maximum(a: np.float32, b: np.float32) -> np.float32:
    """Return numpy's ``maximum``: the larger, or NaN when either is NaN."""
    return a if (a > b or np.isnan(a)) else b


@njit(inline="always")
def _fmax0(a: np.float32) -> np.float32:
    """Return numpy's ``fmax(a, 0)``: ``a`` when it is at least 0, else 0 (NaN: 0)."""
    return a if a >= _ZERO else _ZERO


@njit("void(float32[::1], float32[::1], float32[::1], boolean[::1], float32[::1], float32, float32, float32)",
      cache=True, nogil=True, error_model="numpy")
def baseline_update(level: F32, history_s: F32, x: F32, accept: B, seconds: F32, window_max_s: np.float32,
                    learn_s: np.float32, clip: np.float32) -> None:  # pragma: no cover - compiled
    """Fold ``x`` into each entity's ``level`` where accepted (``_baseline.Baseline.update``)."""
    for i in range(level.shape[0]):
        xi, dt = x[i], seconds[i]
        if not (accept[i] and dt > _ZERO and np.isfinite(xi)):
            continue
        old = level[i]
        first = np.isnan(old)
        if first:
            old = xi
            level[i] = xi
        history = history_s[i]
        window = _minimum(history + dt, window_max_s)
        bound = _INF if history < learn_s else abs(old) * clip
        step = _minimum(_maximum(xi - old, -bound), bound)
        step = step * dt
        step = step / window
        if not first:
            level[i] = old + step
        history_s[i] = history + dt


@njit("float32[::1](float32[::1], float32[::1], float32, float32[::1])",
      cache=True, nogil=True, error_model="numpy")
def baseline_reference(level: F32, history_s: F32, learn_s: np.float32, peers: F32) -> F32:  # pragma: no cover
    """Return each entity's level where learned, else its peers' (``peers`` repeated over the entities)."""
    n, period = level.shape[0], peers.shape[0]
    out = np.empty(n, np.float32)
    for start in range(0, n, period):
        for j in range(min(period, n - start)):
            i = start + j
            out[i] = level[i] if history_s[i] >= learn_s else peers[j]
    return out


@njit("boolean[::1](float32[::1], float32[::1], boolean[::1], float32[::1], boolean, float32, float32, float32, "
      "float32, float32)", cache=True, nogil=True,
      error_model="numpy")
def cusum_update(s: F32, x: F32, mask: B, seconds: F32, timed: bool, k: np.float32, cap: np.float32, most: np.float32,
                 ceiling: np.float32, h: np.float32) -> B:  # pragma: no cover - compiled
    """Add each entity's evidence to its clipped CUSUM ``s``; return where it is at least ``h``.

    ``_stats.ClippedCusum.update``: with ``timed`` each step is weighted by
    its interval (NaN or negative: 0) and bounded by ``most``.
    """
    n = s.shape[0]
    alarm = np.empty(n, np.bool_)
    for i in range(n):
        xi = x[i]
        if mask[i] and not np.isnan(xi):
            step = _minimum(xi, cap) - k
            if timed:
                step = _minimum(step * _fmax0(seconds[i]), most)
            s[i] = _minimum(_maximum(step + s[i], _ZERO), ceiling)
        alarm[i] = s[i] >= h
    return alarm


@njit("void(float32[::1], float32[::1], boolean[::1], float32)", cache=True, nogil=True,
      error_model="numpy")
def ewma_update(previous: F32, current: F32, mask: B, alpha: np.float32) -> None:  # pragma: no cover - compiled
    """Blend ``current`` into ``previous`` where ``mask``, seeding where it is NaN (``_stats.ewma``)."""
    for i in range(previous.shape[0]):
        if mask[i]:
            old, new = previous[i], current[i]
            previous[i] = new if np.isnan(old) else (new - old) * alpha + old


@njit("void(float32[::1], float32[::1], float32[::1], float32[::1], boolean[::1], float32[::1], float32[::1], "
      "float32[::1], boolean[::1], boolean[::1], float32, float32, float32)",
      cache=True, nogil=True, error_model="numpy")
def rate_baseline_update(count: F32, seconds: F32, pending_count: F32, pending_seconds: F32, pending_clean: B,
                         history_s: F32, counts: F32, interval_s: F32, accept: B, clean: B, halflife_s: np.float32,
                         learn_s: np.float32, delay_s: np.float32) -> None:  # pragma: no cover - compiled
    """Add counts over their intervals to the pending window; learn the windows due (``RateBaseline.update``)."""
    for i in range(count.shape[0]):
        c = counts[i]
        dt = _fmax0(interval_s[i]) if accept[i] and np.isfinite(c) else _ZERO
        if dt > _ZERO:
            pending_count[i] += _fmax0(c)
        pend_s = pending_seconds[i] + dt
        pending_seconds[i] = pend_s
        pend_clean = pending_clean[i] and clean[i]
        pending_clean[i] = pend_clean
        if not (pend_s > _ZERO and (history_s[i] < learn_s or pend_s >= delay_s)):
            continue
        if pend_clean:
            decay = np.exp2(-pend_s / halflife_s)
            count[i] = count[i] * decay + pending_count[i]
            seconds[i] = seconds[i] * decay + pend_s
            history_s[i] += pend_s
        pending_count[i] = _ZERO
        pending_seconds[i] = _ZERO
        pending_clean[i] = True


@njit("void(float32[::1], float32[::1], float32[::1], boolean[::1], boolean[::1], boolean[::1], float32[::1], "
      "float32[::1], float32)", cache=True, nogil=True,
      error_model="numpy")
def count_drops(drops: F32, down_s: F32, last_down_s: F32, was_dropped: B, dropped: B, fresh: B, dt_s: F32,
                held_s: F32, window_s: np.float32) -> None:  # pragma: no cover - compiled
    """Decay each link's drop count, count the drops that begin, time each drop (``LinkDetector._count_drops``)."""
    # Intervals are nearly all one tick: exp is taken once per distinct run of them, not per link.
    last_dt, decay = _ZERO, _ONE
    for i in range(drops.shape[0]):
        drop, was = dropped[i], was_dropped[i]
        if fresh[i]:
            dt = _fmax0(dt_s[i])
            if dt != last_dt:
                last_dt, decay = dt, np.exp(-dt / window_s)
            drops[i] *= decay
        if drop and not was:
            drops[i] += _ONE
            down_s[i] = _ZERO
        if drop:
            held = held_s[i]
            if np.isnan(held) or np.isinf(held):  # numpy's nan_to_num: NaN 0, infinities the largest finite
                held = _ZERO if np.isnan(held) else (_F32_MAX if held > _ZERO else -_F32_MAX)
            down_s[i] += held
        if fresh[i]:
            if was and not drop:
                last_down_s[i] = down_s[i]
            was_dropped[i] = drop


KERNELS: Final = (baseline_update, baseline_reference, cusum_update, ewma_update, rate_baseline_update,
                  count_drops)
"""Every kernel of this module (``rainierd.core.kernels`` reports them)."""
