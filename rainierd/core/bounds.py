"""How far each counter can rise between two samples of one entity, so that
no sample, however wrong, can poison a rate or a fleet total.

Why: a counter's increase is believed twice over, once as a per-second rate
(a chip's effective FLOP/s, a port's traffic) and once summed into the fleet,
UltraServer and site counters that only ever grow (``aggregates.CounterSums``).
A single frame with ``fp8_flop_total`` 1e300 once made
``rainier_fleet_fp8_flop_total`` 1e300 until the monitor restarted.  So every
counter a figure is derived from has a bound, and a sample above it is
*refused*: its rate is unknown for that sample, its increase is summed
nowhere, and it is counted (``Table.apply``; docs/metrics.md,
``rainier_ingest_counters_refused_total``).

Two kinds of bound:

* **Physical**, per second of the sample interval and per entity, for
  counters whose rate the hardware caps: a chip's FP8 FLOP at its dense peak,
  an EFA port's bytes at its line rate, a NeuronLink's bytes at its
  bandwidth, each times ``margin``.  The margin (1.05 by default) is for the
  sample clock, not the hardware: a publisher reads its counters a little
  before or after the ``t_s`` it stamps, so an interval's count may cover a
  few tens of milliseconds more than its stamps say (5 % is 50 ms of a 1 s
  interval, 250 ms of a 5 s one, at the full peak, which training never
  sustains).  Trainium2 does not clock above nominal (``clock_ratio`` is at
  most 1), so the dense peak is the most a chip executes.
* **Exactness**, for counters with no physical rate (ECC and execution
  errors, retransmits, a site's water and energy, for which hardware.py has
  no figure): at most 2**53 per sample, the largest count whose float64
  difference is exact.  It stops the absurd (a counter of 1e19 or 1e300), not
  the merely wrong.

A counter that goes backwards is a restart counting from zero: its new total
is the increase, believed only if it fits the bound itself (over the
interval, or 2**53).  A negative total (a float counter of a binary frame) is
refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd._types import F64, I64
from rainierd.fleet import TRN2, Topology, Trainium2

EXACT: Final = 2.0**53
"""The largest increase per sample a counter without a physical rate may make: float64 counts exactly below it."""

REFUSAL_REASONS: Final = ("over_bound", "reset_over_bound", "negative")
"""Why a sample's counter is refused: it rose above its bound; it went backwards (a restart) to a total above
the bound; a float counter's total is below zero."""

RATIOS: Final = {"chips": ("util", "clock_ratio")}
"""Per table, the gauges that are ratios in [0, 1] by their definition (wire/records.py): a chip's utilisation,
and its clock over nominal (Trainium2 does not clock above it).  A chip's delivered FP8 is its peak times both,
so a value outside is no reading: it is stored unknown and counted ``out_of_range`` beside the counters'
refusals (the JSON form's schema refuses such a frame whole; a binary record is checked finite only)."""
OUT_OF_RANGE: Final = "out_of_range"


@dataclass(frozen=True, slots=True, eq=False)
class Bound:
    """At most how much one counter of one entity may rise between two of its samples.

    ``per_s`` is the physical bound per second of the interval (None: there
    is none, and a sample may rise by at most ``EXACT``); with ``kind_of``,
    ``per_s`` holds one figure per entity class and ``kind_of`` each entity's
    class (NeuronLinks: torus or ring).
    """

    per_s: float | tuple[float, ...] | None = None
    kind_of: I64 | None = None

    def limit_per_s(self, at: slice | I64) -> float | F64:
        """Return the per-second bound of the entities ``at`` (a figure, or one per entity); inf for none."""
        if self.per_s is None:
            return math.inf
        if isinstance(self.per_s, tuple):
            assert self.kind_of is not None
            return np.asarray(self.per_s, np.float64)[self.kind_of[at]]
        return self.per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterBounds:
    """The figures counters are bounded by: the hardware (from configuration) and the margin on its rates."""

    hardware: Trainium2 = TRN2
    margin: float = 1.05

    def __post_init__(self) -> None:
        if not 1.0 <= self.margin <= 100.0:
            raise ValueError(f"the counter rate margin must be in [1, 100], not {self.margin}")

    def of(self, kind: str, topology: Topology) -> dict[str, Bound]:
        """Return the physical bound of each counter of record ``kind`` that has one (others: ``Bound()``)."""
        hw, m = self.hardware, self.margin
        if kind == "chips":
            return {"fp8_flop_total": Bound(hw.fp8_dense_flops * m)}
        if kind == "efa":
            # A retransmitted byte is a byte sent: the line rate bounds it too.
            line = Bound(hw.efa_port_bytes_s * m)
            return {"tx_bytes_total": line, "rx_bytes_total": line, "retrans_bytes_total": line}
        if kind == "links":
            # Indexed by topology.link_kind: LINK_KIND_TORUS (0, inside the node), LINK_KIND_RING (1).
            return {"tx_bytes_total": Bound((hw.neuronlink_intra_bytes_s * m, hw.neuronlink_ring_bytes_s * m),
                                            np.asarray(topology.link_kind))}
        return {}
