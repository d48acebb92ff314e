"""Monotone totals, the only form a counter takes on the wire (``*_total``:
"monotone from the publisher's start", rainierd/wire/records.py), from the
two forms sources give: counts per period (added up), and cumulative
counters that can go backwards when their source restarts (a driver
reloaded, a device reset).  Pure, no I/O.

A cumulative counter that goes backwards is a reset: its new value is what
was counted since, so it is added whole and the reset counted, as
Prometheus's ``rate()`` reads a counter reset.  A total that would reach
2**53 refuses the increment (float64, the monitor's arithmetic, stops
being exact there).
"""

from __future__ import annotations

from dataclasses import dataclass

from rainierd.bridge._values import MAX_COUNT


@dataclass(eq=False, slots=True)
class PeriodTotal:
    """The running sum of per-period counts."""

    value: int = 0

    def add(self, count: int) -> bool:
        """Add one period's ``count``; return False (nothing added) when the total would reach 2**53."""
        if self.value + count >= MAX_COUNT:
            return False
        self.value += count
        return True


@dataclass(eq=False, slots=True)
class CumulativeTotal:
    """A monotone total that follows a cumulative source across its resets."""

    value: int = 0
    last: int | None = None  # the source's last reading
    resets: int = 0
    limit: int = MAX_COUNT  # the total stays below this (EFA byte counters pass 2**53 in days: 2**64 for them)

    def observe(self, reading: int) -> bool:
        """Follow the source to ``reading``; return False (the reading ignored) when the total would reach ``limit``.

        The first reading is taken as the total so far (what the source
        counted before the bridge started), so a rate starts with the second.
        """
        reset = self.last is not None and reading < self.last
        increase = reading if self.last is None or reset else reading - self.last
        if self.value + increase >= self.limit:
            return False
        self.value += increase
        self.last = reading
        self.resets += reset
        return True

    def increase(self, reading: int) -> int:
        """Return what ``reading`` would add (the reading itself after a reset), without taking it."""
        if self.last is None:
            return 0
        return reading - self.last if reading >= self.last else reading

    def rebase(self, reading: int) -> None:
        """Take ``reading`` as the source's new base without counting anything up to it (a refused jump)."""
        self.last = reading


@dataclass(eq=False, slots=True)
class FlopTotal:
    """FLOP executed since the bridge started: the sum of each period's rate times its period."""

    value: float = 0.0

    def add(self, flop: float) -> None:
        """Add one report's FLOP (already bounded by the chip's peak over its period)."""
        self.value += flop
