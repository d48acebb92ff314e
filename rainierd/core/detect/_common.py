"""What every detector needs from the state: which entities have a new sample
since the last analysis, and counter rates between their last two samples."""

from __future__ import annotations

from enum import IntFlag

import numpy as np
import numpy.typing as npt

from rainierd.core.state import EntityTable

__all__ = ["Reason", "counter_delta", "new_samples", "reason_names"]

F64 = npt.NDArray[np.float64]


class Reason(IntFlag):
    """Why an entity is unhealthy (a bitmask; several may hold)."""

    LANES = 1
    BANDWIDTH = 2
    ERRORS = 4
    LATENCY = 8
    RETRANSMITS = 16
    FLAPPING = 32
    DOWN = 64
    UNRESPONSIVE = 128
    THROTTLE_FLAG = 256
    CLOCK = 512
    EFFICIENCY = 1024
    ECC_UNCORRECTED = 2048
    SILENT = 4096
    INLET = 8192
    FANS = 16384
    TEMPERATURE = 32768


def reason_names(mask: int) -> list[str]:
    """Return the lower-case names of the reasons set in ``mask``."""
    return [str(r.name).lower() for r in Reason if mask & r]


def new_samples(table: EntityTable, seen: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Return which entities got a sample after ``seen`` (and with a previous one to diff)."""
    return (table.tick > seen) & np.isfinite(table.prev_t_s)


def counter_delta(table: EntityTable, field: str) -> F64:
    """Return cur - prev of a counter field as float (negative after a restart)."""
    return table.cur[field].astype(np.float64) - table.prev[field].astype(np.float64)
