"""Every compiled kernel of the core, in one list, and the command that
compiles them ahead: ``python -m rainierd.core.kernels``.

Each kernel has one explicit signature, so importing its module compiles it,
or loads it from numba's on-disk cache (``cache=True``: ``__pycache__``
beside the source, or ``NUMBA_CACHE_DIR``).  A cold compile takes seconds, so
it is done once, ahead: scripts/_setup.sh runs this module after installing
(the demo's start and each of the test suite's processes then load), and the
Dockerfile at build time (the image carries the cache).  docs/performance.md
gives the cold and warm start times.
"""

from __future__ import annotations

from typing import Final

from rainierd.core.detect._kernels import KERNELS as DETECT_KERNELS

__all__ = ["KERNELS", "compiled"]

KERNELS: Final = DETECT_KERNELS
"""Every compiled kernel of the core."""


def compiled() -> dict[str, int]:
    """Return each kernel's name and how many signatures it holds compiled (one each, from its import)."""
    return {kernel.py_func.__name__: len(kernel.signatures) for kernel in KERNELS}


if __name__ == "__main__":  # importing compiled them: nothing more to do
    compiled()
