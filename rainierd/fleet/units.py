"""How a figure reads in text an SRE reads (an advisory's reason, a log line,
``top``): FLOP/s with an SI prefix and three significant figures, ``7.17 PF/s``,
the one spelling every surface uses (docs/ids.md, "Units"), and an amount of
FLOP (a rate over a time: what a cause costs over an hour) the same way,
``45.5 EF``.  Data (the read API, events, metrics) carries plain FLOP/s; only
text is prefixed.
"""

from __future__ import annotations

import math
from typing import Final

_PREFIXES: Final = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"))


def flops_text(value: float | None) -> str:
    """Return FLOP/s ``value`` as text: ``166 PF/s``, ``7.17 PF/s``, ``24 TF/s``; ``-`` when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}F/s"
    return f"{value:.3g} F/s"


def flop_text(value: float | None) -> str:
    """Return an amount of FLOP as text, with the same prefixes and Z beyond E: ``25.8 EF``, ``3.1 ZF``; ``-``
    when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    for scale, prefix in ((1e21, "Z"), *_PREFIXES):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}F"
    return f"{value:.3g} F"
