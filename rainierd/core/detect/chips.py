"""Health of chips: healthy, straggler, throttled, stale or failed.

* failed: an uncorrectable HBM ECC error (definitive, raised at once); a
  failed chip that then falls silent stays failed;
* stale: no sample for ``stale_after_ticks`` ticks;
* throttled: the firmware's throttle flag, or a clock well below its site's;
* straggler: a chip that needs more busy time than its synchronous-group peers
  for the same FLOP.  In a synchronous group every chip executes the same
  FLOP per step, so efficiency = FLOP rate / (peak x utilisation x clock)
  sinks on a straggler while its error counters stay still.  It is compared
  with the group's median (robust to the group slowing as a whole) and
  accumulated in a clipped CUSUM.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rainierd.core.detect._common import Reason, counter_delta, new_samples
from rainierd.core.detect._stats import ClippedCusum, ewma, robust_center_scale
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState

__all__ = ["FAILED", "HEALTHY", "STALE", "STRAGGLER", "THROTTLED", "ChipDetector", "ChipParams"]

HEALTHY, STRAGGLER, THROTTLED, STALE, FAILED = 0, 1, 2, 3, 4
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChipParams:
    """Thresholds of the chip detector (docs/detection.md justifies them)."""

    stale_after_ticks: int = 3
    clock_margin: float = 0.03  # below the site's median clock by more than this: throttled
    active_util: float = 0.2  # efficiency is judged only while the chip is busy
    efficiency_floor: float = 0.003
    z_cap: float = 6.0
    z_k: float = 1.5
    z_h: float = 16.0
    throttle_after: int = 2
    clear_after: int = 10
    ewma_alpha: float = 0.2


@dataclass(eq=False)
class ChipDetector:
    """Chip health for the whole fleet."""

    state: FleetState
    peak_flops: float
    params: ChipParams = field(default_factory=ChipParams)

    def __post_init__(self) -> None:
        n, p = self.state.topology.n_chips, self.params
        self.seen = np.full(n, -1, dtype=np.int64)
        self.cusum = ClippedCusum.zeros(n, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.efficiency = np.full(n, np.nan)  # EWMA, relative to the group's median
        # Persistence per state: straggler 1 (its CUSUM already persists),
        # throttled 2, stale 1 (the age already is persistence), failed 1.
        self.tracker = StateTracker.create(n, raise_after=[0, 1, p.throttle_after, 1, 1],
                                           clear_after=p.clear_after)

    def update(self, tick: int, *, suppress_stale: npt.NDArray[np.bool_] | None = None) -> Transitions:
        """Fold in the chips' new samples; return the state changes.

        ``suppress_stale`` marks chips whose silence is reported elsewhere
        (their whole node is lost), so one lost node is one event.
        """
        p, table, topo = self.params, self.state.chips, self.state.topology
        fresh = new_samples(table, self.seen)
        self.seen = np.where(fresh, table.tick, self.seen)
        cur = table.cur
        util = cur["util"].astype(np.float64)
        clock = cur["clock_ratio"].astype(np.float64)

        dt = table.t_s - table.prev_t_s
        with np.errstate(invalid="ignore", divide="ignore"):
            flop_rate = counter_delta(table, "fp8_flop_total") / dt
            efficiency = flop_rate / (self.peak_flops * util * clock)
        active = fresh & (util > p.active_util) & np.isfinite(efficiency) & (flop_rate > 0)
        per_us = topo.chips_per_node * topo.nodes_per_ultraserver
        by_group = np.where(active, efficiency, np.nan).reshape(-1, per_us)
        with warnings.catch_warnings():  # an all-NaN group (stalled, silent) has no median
            warnings.simplefilter("ignore", RuntimeWarning)
            group_median = np.repeat(np.nanmedian(by_group, axis=1), per_us)
        relative = efficiency / group_median
        _, scale = robust_center_scale(relative, active & np.isfinite(relative), floor=p.efficiency_floor)
        judged = active & np.isfinite(relative)
        self.efficiency = ewma(self.efficiency, relative, judged, alpha=p.ewma_alpha)
        straggling = self.cusum.update((1.0 - relative) / scale, judged)

        site = topo.chip_site
        site_clock = np.zeros(topo.n_sites)
        for s in range(topo.n_sites):  # a handful of sites, never a loop over chips
            site_clock[s], _ = robust_center_scale(clock, fresh & (site == s), floor=0.0)
        throttled = (cur["throttled"] > 0) | (clock < site_clock[site] - p.clock_margin)
        failed = counter_delta(table, "ecc_uncorrected_total") > 0
        stale = self.state.stale_chips(p.stale_after_ticks)
        if suppress_stale is not None:
            stale &= ~suppress_stale

        reasons = np.zeros(util.shape, dtype=np.int64)
        reasons |= np.where(fresh & straggling, int(Reason.EFFICIENCY), 0)
        reasons |= np.where(fresh & (cur["throttled"] > 0), int(Reason.THROTTLE_FLAG), 0)
        reasons |= np.where(fresh & (clock < site_clock[site] - p.clock_margin), int(Reason.CLOCK), 0)
        reasons |= np.where(fresh & failed, int(Reason.ECC_UNCORRECTED), 0)
        reasons |= np.where(stale, int(Reason.SILENT), 0)
        candidate = np.select(
            [fresh & failed, stale, fresh & throttled, fresh & straggling], [FAILED, STALE, THROTTLED, STRAGGLER],
            HEALTHY,
        )
        # A failed chip keeps its state while silent: its silence is the failure.
        candidate = np.where((self.tracker.state == FAILED) & stale, FAILED, candidate)
        evidence = fresh | stale
        return self.tracker.update(candidate, reasons, evidence, tick)

    def speed(self) -> F64:
        """Return each chip's estimated speed (clock x relative efficiency) for the throughput model."""
        clock = self.state.chips.cur["clock_ratio"].astype(np.float64)
        straggler = self.tracker.state == STRAGGLER
        eff = np.clip(np.nan_to_num(self.efficiency, nan=1.0), 0.05, 1.0)
        return np.where(straggler, clock * eff, clock)
