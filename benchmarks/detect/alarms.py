"""False alarms as an SRE reads them: per day per 10,000 chips, per entity
class (a chip, a NeuronLink, an EFA port, a node's cooling, a node...), each
with the exact one-sided 95 % Poisson upper bound on its rate, so that a
control that saw nothing still says how much it could have missed.

The bound is the Poisson mean whose probability of showing at most the
observed count is 5 %: the chi-square quantile ``chi2(0.95, 2k + 2) / 2``
(Garwood), solved here by bisection on the Poisson distribution function
with the standard library only (scipy is no dependency).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

from rainierd.core.detect import Event

__all__ = ["CHIPS_UNIT", "CLASSES", "class_of", "entity_class", "poisson_upper", "rates_by_class", "rates_of"]

# The classes every report lists, seen or not (others seen are added after them).
CLASSES: Final = ("chip", "neuronlink", "efa", "cooling", "node", "ultraserver", "feed")
CHIPS_UNIT: Final = 1e4  # per 10,000 chips


def class_of(entity: str, after: str) -> str:
    """Return the class a raise of ``entity`` into state ``after`` counts under: the entity's, or ``cooling``
    for a cooling state."""
    return "cooling" if after.startswith("cooling") else entity


def entity_class(event: Event) -> str:
    """Return the class a raised event counts under: its entity's, or ``cooling`` for a node's cooling state."""
    return class_of(event.entity, event.after)


def _poisson_cdf(k: int, mean: float) -> float:
    """Return P(X <= k) for X ~ Poisson(``mean``), summed in logs so that large means do not underflow."""
    if mean <= 0:
        return 1.0
    logs = [i * math.log(mean) - mean - math.lgamma(i + 1) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(v - top) for v in logs))


def poisson_upper(count: int, confidence: float = 0.95) -> float:
    """Return the exact one-sided upper bound of a Poisson mean after observing ``count`` events.

    The mean at which seeing ``count`` or fewer has probability ``1 - confidence``:
    2.996 for 0 events, 4.744 for 1, 16.96 for 10 at 95 %.  Raises ValueError for a negative count or a
    confidence outside (0, 1).
    """
    if count < 0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"a Poisson bound needs a count >= 0 and 0 < confidence < 1, not {count}, {confidence}")
    alpha = 1.0 - confidence
    low, high = float(count), float(count) + 10.0 * math.sqrt(count + 1.0) + 10.0
    while _poisson_cdf(count, high) > alpha:
        high *= 2.0
    for _ in range(200):  # the CDF falls as the mean grows: bisect to float precision
        mid = (low + high) / 2.0
        if _poisson_cdf(count, mid) > alpha:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2.0


def rates_of(counts: Counter[str], chip_days: float) -> dict[str, dict[str, Any]]:
    """Return, per entity class (``CLASSES`` always, then any other counted), the count of raises, their rate
    per day per 10k chips and its 95 % upper bound, over ``chip_days`` of control (rates None without
    exposure)."""
    units = chip_days / CHIPS_UNIT
    out: dict[str, dict[str, Any]] = {}
    for name in (*CLASSES, *sorted(counts.keys() - set(CLASSES))):
        n = counts[name]
        out[name] = {
            "false_alarms": n,
            "per_day_per_10k_chips": n / units if units else None,
            "upper_95_per_day_per_10k_chips": poisson_upper(n) / units if units else None,
        }
    return out


def rates_by_class(events: Iterable[Event], chip_days: float) -> dict[str, dict[str, Any]]:
    """Return, per entity class, the raised events' count, their rate per day per 10k chips and its 95 % upper
    bound, over ``chip_days`` of control (rates None without exposure)."""
    return rates_of(Counter(entity_class(e) for e in events if e.raised), chip_days)
