"""rainierd's compiled passes (``kernels.c``), loaded once with ctypes, each behind a typed Python function.

Why compiled: at a million chips a tick's numpy calls each make a whole pass
with its own temporary, and a column joined from ~1,300 messages paid Python
for every piece (issue 39).  Why C through ctypes: the install step builds it
(pyproject.toml's ``ext-modules``, gcc and libc's headers; no Python headers),
so a process loads a finished library in about a millisecond and compiles
nothing, ever (numba's run-time compilation and ~2 s of loading were the
alternative measured and reverted); ctypes releases the GIL for each call, so
admission off the event loop stays off it.  There is one code path: no numpy
twin of a kernel is kept to agree with it.

Each wrapper checks the shapes and dtypes it hands over; the C side checks
every index against the sizes it is given and refuses (-1) rather than write
out of bounds, which the wrapper raises as ``RuntimeError`` (a defect, not bad
input: what reaches a kernel has passed the wire's checks).
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import I64, U64

_MODULE: Final = "rainierd.native._kernels"


def library_path() -> str:
    """Return the path of the built library, or raise ImportError saying how to build it."""
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or spec.origin is None:
        raise ImportError(
            "rainierd's compiled kernels are not built (rainierd/native/kernels.c): install rainierd with pip, "
            "which compiles them (it needs gcc and libc6-dev; scripts/run and scripts/test install both)")
    return spec.origin


_lib = ctypes.CDLL(library_path())
_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_lib.rd_join.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _i64]
_lib.rd_join.restype = _i64
_lib.rd_scatter_rows.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _ptr]
_lib.rd_scatter_rows.restype = _i64


def address(values: npt.NDArray[Any]) -> int:
    """Return the address of an array's first byte (the caller keeps the array alive while it is in use)."""
    at: int = values.__array_interface__["data"][0]
    return at


def addresses(buffers: Sequence[bytes | npt.NDArray[Any]]) -> tuple[U64, list[npt.NDArray[Any]]]:
    """Return each buffer's address, and the arrays over them the caller must hold while the addresses are used."""
    held = [np.frombuffer(b, np.uint8) if isinstance(b, bytes) else b for b in buffers]
    return np.array([address(b) for b in held], dtype=np.uint64), held


def _i64s(values: Sequence[int] | I64) -> I64:
    return np.ascontiguousarray(values, dtype=np.int64)


def join(base: U64, start: I64, nbytes: I64, out: npt.NDArray[Any]) -> None:
    """Write each part's ``nbytes[p]`` bytes from ``base[p] + start[p]`` (zeros where ``start[p]`` is negative)
    end to end into ``out``, which they must fill."""
    start, nbytes = _i64s(start), _i64s(nbytes)
    n = base.size
    if base.dtype != np.uint64 or start.size != n or nbytes.size != n or not out.flags.c_contiguous:
        raise ValueError("join: one address, start and size a part, into a contiguous array")
    if _lib.rd_join(n, address(base), address(start), address(nbytes), address(out), out.nbytes):
        raise RuntimeError(f"join: the parts' {int(nbytes.sum())} bytes do not fill {out.nbytes}")


def scatter_rows(base: U64, start: I64, entries: I64, row: I64, out: npt.NDArray[Any]) -> None:
    """Write the window's ``e``-th entry (counting through the parts in order) to ``out[row[e]]``.

    Part ``p`` holds ``entries[p]`` consecutive rows from ``base[p] +
    start[p]`` (zeros where ``start[p]`` is negative), each of ``out``'s row
    size in bytes; ``out`` is 2-D and every entry's row within it.
    """
    start, entries, row = _i64s(start), _i64s(entries), _i64s(row)
    n = base.size
    if base.dtype != np.uint64 or start.size != n or entries.size != n or out.ndim != 2 \
            or not out.flags.c_contiguous:
        raise ValueError("scatter_rows: one address, start and entry count a part, into a contiguous 2-D array")
    row_bytes = out.shape[1] * out.itemsize
    if _lib.rd_scatter_rows(n, address(base), address(start), address(entries), address(row), row.size,
                            out.shape[0], row_bytes, address(out)):
        raise RuntimeError(f"scatter_rows: {row.size} entries do not fit {out.shape[0]} rows")
