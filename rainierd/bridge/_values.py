"""How one value of a neuron-monitor report or an EFA counter is judged: a
value is taken, or refused for one reason and counted by field and reason,
or it is simply absent.  Pure, no I/O.

Why a module of its own: every part of the bridge reads numbers out of
untrusted JSON or sysfs text, and each must refuse the same things the same
way (``true`` is not a count, ``1e300`` is not a utilisation, ``NaN`` is
nothing) and count them under the same reasons, the ones the bridge's
``rainier_bridge_values_refused_total{field,reason}`` documents.  A field
label is always one of the literal names the callers pass, never a key read
from the input, so the series stay bounded.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Final

MAX_COUNT: Final = 2**53
"""Counts at or above this lose exactness as float64 (the monitor's counter arithmetic): refused."""

REFUSAL_REASONS: Final = (
    "wrong_type",  # not the JSON type the documentation gives (a string, a boolean, null, a float for a count)
    "non_finite",  # NaN or an infinity
    "negative",
    "too_large",  # a count past 2**53, or a total it would carry past it
    "out_of_range",  # outside a documented range: utilisation above 100 %, a period outside (0, 1 h], an index
    "above_peak",  # a device's FLOP/s above the chip's FP8 dense peak times the margin
    "above_capacity",  # a device's HBM in use above its memory
    "above_line_rate",  # EFA bytes faster than the port's line rate times the margin
    "inconsistent",  # contradicts the rest of the report (a core or device listed twice, a core on two devices)
)


class Refusals:
    """Values refused, counted by (field, reason)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, field: str, reason: str, n: int = 1) -> None:
        """Count ``n`` values of ``field`` refused for ``reason`` (one of ``REFUSAL_REASONS``)."""
        self.counts[field, reason] += n


def number(value: object, field: str, refusals: Refusals, *, upper: float = math.inf) -> float | None:
    """Return a JSON number as a float if it is finite, not negative and at most ``upper``; else None, counted.

    ``None`` (JSON null) counts as ``wrong_type``: the documented fields that
    may be null are read by their callers before they get here.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        refusals.add(field, "wrong_type")
        return None
    if isinstance(value, int) and abs(value) > 1e308:  # float() of it would raise
        refusals.add(field, "out_of_range" if value > 0 else "negative")
        return None
    number = float(value)
    if not math.isfinite(number):
        refusals.add(field, "non_finite")
        return None
    if number < 0:
        refusals.add(field, "negative")
        return None
    if number > upper:
        refusals.add(field, "out_of_range")
        return None
    return number


def count(value: object, field: str, refusals: Refusals) -> int | None:
    """Return a JSON integer count if it is 0 to 2**53 - 1; else None, counted (a float, even 3.0, is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        refusals.add(field, "non_finite" if isinstance(value, float) and not math.isfinite(value) else "wrong_type")
        return None
    if value < 0:
        refusals.add(field, "negative")
        return None
    if value >= MAX_COUNT:
        refusals.add(field, "too_large")
        return None
    return value


def is_error(value: object) -> bool:
    """Return True when a documented ``error`` field says the data beside it is not to be trusted.

    Absent, null and ``""`` are no error; any other string is one, and so is
    any other type (an error field that cannot be read cannot vouch for the data).
    """
    return value not in (None, "")
