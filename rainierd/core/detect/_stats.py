"""Robust statistics and change detection shared by the detectors: median/MAD
peer comparison, a clipped one-sided CUSUM, and an EWMA.

The CUSUM is the persistence mechanism: a single noise burst adds at most
``cap - k`` to the sum, so only evidence that persists for several ticks
crosses ``h``; the sum is bounded by ``ceiling`` so an alarm that ends
clears within ``(ceiling - h) / k`` clean ticks instead of lingering.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ClippedCusum", "ewma", "robust_center_scale"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

_MAD_TO_SIGMA = 1.4826


def robust_center_scale(values: F64, mask: B, *, floor: float) -> tuple[float, float]:
    """Return (median, 1.4826 x MAD) of ``values[mask]``, the scale at least ``floor``.

    With nothing selected returns (nan, floor): callers then see no deviation.
    """
    selected = values[mask]
    if selected.size == 0:
        return float("nan"), floor
    center = float(np.median(selected))
    scale = float(_MAD_TO_SIGMA * np.median(np.abs(selected - center)))
    return center, max(scale, floor)


def ewma(previous: F64, current: F64, mask: B, *, alpha: float) -> F64:
    """Return the EWMA updated with ``current`` where ``mask`` (seeded where previous is NaN)."""
    blended = np.where(np.isnan(previous), current, previous + alpha * (current - previous))
    return np.where(mask, blended, previous)


@dataclass(eq=False)
class ClippedCusum:
    """One-sided CUSUM per entity: S = clip(S + min(x, cap) - k, 0, ceiling); alarm while S >= h."""

    k: float
    h: float
    cap: float
    ceiling: float
    s: F64

    @classmethod
    def zeros(cls, n: int, *, k: float, h: float, cap: float, ceiling: float | None = None) -> ClippedCusum:
        """Return a CUSUM of ``n`` entities at rest."""
        return cls(k, h, cap, ceiling if ceiling is not None else 2.0 * h, np.zeros(n))

    def update(self, x: F64, mask: B) -> B:
        """Add the evidence ``x`` where ``mask`` (NaN counts as none); return the alarm mask."""
        step = np.minimum(np.nan_to_num(x, nan=0.0), self.cap) - self.k
        self.s = np.where(mask, np.clip(self.s + step, 0.0, self.ceiling), self.s)
        return self.s >= self.h
