"""Anchor (d): a per-entity static z-score: each metric of each chip, NeuronLink, EFA port and node's cooling
judged against that entity's own history, with a fixed threshold: the classic 3-sigma-style rule of threshold
alerting, without peers, jobs or phases.

Sources:
* NIST/SEMATECH e-Handbook of Statistical Methods, section 6.3.2 "What are Variables Control Charts?" (Shewhart
  limits at the mean plus or minus a multiple of sigma),
  https://www.itl.nist.gov/div898/handbook/pmc/section3/pmc32.htm ;
* V. Chandola, A. Banerjee, V. Kumar, "Anomaly Detection: A Survey", ACM Computing Surveys 41(3) (2009),
  section 7.1 (parametric, Gaussian-model techniques: a point more than 3 sigma from the mean),
  https://doi.org/10.1145/1541880.1541882 .

How: each entity keeps the running mean and variance (Welford) of each metric over its samples, those judged
normal only (a flagged sample does not teach the baseline); after ``MIN_HISTORY`` samples a new sample whose
|z| exceeds ``Z`` raises the entity, which clears when every metric is back within ``Z``.  Threshold, set once:
the textbook 3 sigma flags 0.27 % of normal samples, about three alarms a second over a 1,000-chip fleet, so by
our stated rule Z is the two-sided normal quantile of a 10^-7 tail per sample, 5.33.  Sigma is floored at the
metric's resolution: one event per sample for a counter's rate, 0.1 % of the mean for a gauge (a counter that
has never moved would otherwise make its first healthy error infinite).

Metrics: chips (FP8 FLOP rate, utilisation, clock ratio, temperature, power), NeuronLinks (bandwidth, lanes up,
CRC rate, latency), EFA ports (bytes sent a second, retransmits a second, latency), nodes' cooling (inlet and
outlet air, fan speed): raised as the chip, link, port or node (``cooling_degraded``) they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from benchmarks.anchors._common import Fresh, Latch, View
from rainierd.core.detect import Event
from rainierd.core.state import Table

__all__ = ["MIN_HISTORY", "Z", "ZScore"]

Z: Final = 5.33
MIN_HISTORY: Final = 30  # samples before an entity is judged
GAUGE_FLOOR: Final = 1e-3  # sigma's floor, of the mean, for a gauge

# table -> (entity, state raised, [(column kind, field)])
METRICS: Final = {
    "chips": ("chip", "degraded", [("rates", "fp8_flop_total"), ("gauges", "util"), ("gauges", "clock_ratio"),
                                   ("gauges", "temp_c"), ("gauges", "power_w")]),
    "links": ("neuronlink", "degraded", [("gauges", "bw_bytes_s"), ("gauges", "lanes_up"),
                                         ("rates", "crc_errors_total"), ("gauges", "latency_us")]),
    "efa": ("efa", "degraded", [("rates", "tx_bytes_total"), ("rates", "retrans_pkts_total"),
                                ("gauges", "latency_us")]),
    "cooling": ("node", "cooling_degraded", [("gauges", "inlet_c"), ("gauges", "outlet_c"), ("gauges", "fan_rpm")]),
}


@dataclass(eq=False)
class _Welford:
    """Running mean and variance per entity of one metric."""

    n: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, size: int) -> _Welford:
        return cls(np.zeros(size), np.zeros(size), np.zeros(size))

    def add(self, x: np.ndarray, where: np.ndarray) -> None:
        n = self.n[where] + 1
        delta = x[where] - self.mean[where]
        self.mean[where] += delta / n
        self.m2[where] += delta * (x[where] - self.mean[where])
        self.n[where] = n

    def sigma(self) -> np.ndarray:
        out: np.ndarray = np.sqrt(self.m2 / np.maximum(self.n - 1, 1))
        return out


@dataclass(eq=False)
class _TableJudge:
    """One table's entities: their metrics' histories and their health."""

    table: str
    latch: Latch
    fields: list[tuple[str, str]]
    fresh: Fresh = field(default_factory=Fresh)
    stats: list[_Welford] = field(default_factory=list)

    def observe(self, view: View) -> list[Event]:
        t: Table = getattr(view.state, self.table)
        if not self.stats:
            self.stats = [_Welford.empty(t.n) for _ in self.fields]
        new = self.fresh.of(t)
        outside = np.zeros(t.n, bool)
        inside = np.ones(t.n, bool)
        for (kind, name), w in zip(self.fields, self.stats, strict=True):
            x = np.asarray(getattr(t, kind)[name], dtype=np.float64)
            known = new & np.isfinite(x)
            if kind == "rates":
                floor = 1.0 / np.maximum(np.nan_to_num(t.dt_s.astype(np.float64), nan=1.0), 1e-3)
            else:
                floor = GAUGE_FLOOR * np.abs(w.mean)
            sigma = np.maximum(w.sigma(), floor)
            with np.errstate(invalid="ignore", divide="ignore"):
                z = np.abs(x - w.mean) / np.where(sigma > 0, sigma, np.inf)
            judged = known & (w.n >= MIN_HISTORY)
            far = judged & (z > Z)
            outside |= far
            inside &= ~far
            w.add(x, known & ~far & ~self.latch.on_or_empty(t.n))
        return self.latch.update(view.tick, outside | (self.latch.on_or_empty(t.n) & ~(new & inside)), "zscore")


@dataclass(eq=False)
class ZScore:
    """The per-entity static z-score, over every table it judges."""

    name: str = "zscore"
    judges: list[_TableJudge] = field(default_factory=lambda: [
        _TableJudge(table, Latch(entity, after), list(fields)) for table, (entity, after, fields) in METRICS.items()])

    def observe(self, view: View) -> list[Event]:
        """Judge every table's new samples; return the raises and clears."""
        return [e for judge in self.judges for e in judge.observe(view)]
