"""FP8 throughput and work spelled one way on every surface: an SI prefix and three significant figures, as
``rainierd top`` prints them (``1.2 PF/s`` a rate, ``4.3 EF`` an amount of FLOP), so an advisory's reason, a
runbook and the screen an SRE reads beside them never mix TFLOP/s with PF/s."""

from __future__ import annotations

import math
from typing import Final

_PREFIXES: Final = ((1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"))


def _si(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def flops_text(value: float | None) -> str:
    """Spell a rate of FP8 FLOP/s: ``7.17 PF/s`` (``-`` when unknown)."""
    return "-" if value is None else _si(value, "F/s")


def flop_text(value: float | None) -> str:
    """Spell an amount of FP8 FLOP (a rate over a time): ``25.8 EF`` (``-`` when unknown)."""
    return "-" if value is None else _si(value, "F")
