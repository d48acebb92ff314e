"""Columns as the compiled kernels take them (_kernels.py): C-contiguous,
writable, float32 or bool, without a copy when a column already is one.

Apart from the kernels so that a detector module can shape its columns
without importing numba (the kernels load when the first detector is built).
"""

from __future__ import annotations

import numpy as np

from rainierd._types import F32, B, Floats

__all__ = ["as_bool", "as_f32"]


def as_f32(values: Floats | float, *, like: Floats | None = None) -> F32:
    """Return ``values`` as a writable C-contiguous float32 column (one figure for all: filled to ``like``'s shape).

    A column that already is one is returned as it is (no copy).
    """
    if like is not None and np.ndim(values) == 0:
        return np.full(np.shape(like), values, np.float32)
    out = np.ascontiguousarray(values, dtype=np.float32)
    return out if out.flags.writeable else out.copy()


def as_bool(mask: B) -> B:
    """Return ``mask`` as a writable C-contiguous bool column (no copy when it already is one)."""
    out = np.ascontiguousarray(mask, dtype=np.bool_)
    return out if out.flags.writeable else out.copy()
