"""Keep freed large arrays in the process for reuse (glibc only).

The monitor's analysis allocates fleet-sized temporaries every tick (tens of
MB each at Rainier scale).  By default glibc serves each from fresh pages and
hands them back on free, so every tick pays thousands of page faults a
temporary again; measured at 1,000,000 chips that is a tenth of the analysis
and half its system time.  Raising the mmap and trim thresholds lets freed
memory be reused instead: the process keeps its peak footprint (which it
needs again next tick anyway) and stops faulting.  Elsewhere than glibc this
does nothing.

Kept memory is kept per malloc arena, and glibc gives each thread that
allocates its own arena (up to eight a core): a tick made or analysed in
``asyncio.to_thread`` lands on whichever worker thread is free, and each
worker's arena then keeps its own copy of the tick's peak.  So the process
uses one arena.  Measured 2026-12-02, ``rainierd simulate`` at rainier-1m
against a local mosquitto: VmHWM 1,506 MiB after ~100 s with glibc's
arenas, 1,088 MiB after ~120 s with one (``MALLOC_ARENA_MAX=1``).  The cost
is a shared lock, which the GIL already serialises: numpy and CPython
allocate holding it.

The price is that a burst's memory stays too: measured 2026-12-01 on a demo
monitor, 400 MB of 1 MB batches took it from 61 to 100 MiB and it stayed
there (without ``keep_freed_memory`` it fell back only to 88 MiB: glibc's
own thresholds keep most of it as well).  So after a burst the monitor calls
``release_freed_memory`` (``malloc_trim``), which hands the free pages back
whatever the thresholds: back to 61 MiB at once, while every ordinary tick
keeps its reuse.  Input that grows the heap without being a burst (a fuzz
spread over many windows) is caught by the monitor's footprint check
(``monitor/footprint.py``), which releases the same way.
"""

from __future__ import annotations

import ctypes
from typing import Final

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8
_MMAP_THRESHOLD_MAX: Final = 32 * 2**20  # glibc's ceiling on 64-bit: larger arrays are always mapped
_TRIM_THRESHOLD: Final = 1 << 30


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; return True if it took effect."""
    # The process's own symbols (dlopen(NULL)), which hold the C library's: ctypes.util.find_library would run
    # `ldconfig -p` (or a compiler) in a subprocess at every daemon start to find the same library.
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
                and mallopt(_M_ARENA_MAX, 1))


def release_freed_memory() -> bool:
    """Hand the C heap's free pages back to the operating system (glibc's ``malloc_trim(0)``); return whether any
    were.

    For after a burst: a flood's payloads are freed once analysed, but the
    heap keeps their pages (glibc trims only its top, and only past the trim
    threshold), so without this the process stays at the burst's size.
    It walks the heap (milliseconds): call it off the event loop, and only
    after a burst, not every tick.  Elsewhere than glibc it does nothing.
    """
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    return bool(malloc_trim(0))
