"""Health of chips: healthy, straggler, throttled, stale or failed.

* failed: an uncorrectable ECC error in its HBM or its SRAM (definitive,
  raised at once), executions that keep failing or timing out
  (``chip_errors.py``), or its agent reporting the device gone (``present``
  0, at once); a failed chip that then falls silent stays failed;
* stale: not heard from for ``stale_after_s`` (the monitor's listening clock);
* throttled: the firmware's throttle flag, or a clock well below its site's;
* straggler: a chip that needs more busy time than its synchronous-group peers
  for the same FLOP.  In a synchronous group every chip executes the same
  FLOP per step, so efficiency = FLOP rate / (peak x utilisation x clock)
  sinks on a straggler while its error counters stay still.  It is compared
  with the group's median (robust to the group slowing as a whole) and
  accumulated in a clipped CUSUM.  Also a straggler: a chip whose utilisation
  collapses while its peers stay busy, or whose executions take far longer
  than theirs (``chip_peers.py``).

A chip's group (its peers, ``_peers.py``) is its job's chips when the jobs
are known, else its UltraServer's.  The clock divides the efficiency only
where every active chip of the group reports one: AWS neuron-monitor reports
none, and the comparison with the group's median absorbs a clock the group
shares (a site's mid-day heat), so a fleet without clocks is judged on
FLOP per busy second alone; a group of chips with clocks is judged exactly
as before.  A chip whose own clock alone is low (throttled) then reads as a
straggler by efficiency: without a clock the two cannot be told apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rainierd._types import F32, I64, B, Floats
from rainierd.core.detect._baseline import Baseline
from rainierd.core.detect._common import Reason, persistence_seconds, typical_interval
from rainierd.core.detect._common import flag as set_reason
from rainierd.core.detect._peers import ChipPeers
from rainierd.core.detect._stats import (
    MAD_TO_SIGMA,
    ClippedCusum,
    Latch,
    PeerSample,
    ewma,
    robust_center_scale,
    row_nanmedian,
)
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.detect._warmup import Warmup
from rainierd.core.detect.chip_errors import ExecutionFailures
from rainierd.core.detect.chip_peers import PeerActivity
from rainierd.core.state import FleetState

HEALTHY, STRAGGLER, THROTTLED, STALE, FAILED = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True, kw_only=True)
class ChipParams:
    """Thresholds of the chip detector (docs/detection.md justifies them)."""

    stale_after_s: float = 3.0  # set from the monitor's configuration (stale_after_ticks x tick)
    clock_margin: float = 0.03  # below the site's median clock by more than this: throttled
    active_util: float = 0.2  # efficiency is judged only while the chip is busy
    efficiency_floor: float = 0.004
    # The same floor for a chip judged without a clock: its clock may sit a few % under its peers' with its
    # temperature (a chip 0.3 degC into throttling loses 1.5 %), which then reads as efficiency (docs/detection.md,
    # "Chips without a clock"); a straggler must then be ~5 % slow to gather evidence.
    unclocked_floor: float = 0.02
    z_cap: float = 6.0
    z_k: float = 1.5
    z_h: float = 16.0  # z-seconds (each step weighted by its sample's interval)
    drain_s: float = 3.0  # a saturated CUSUM falls under z_h within this many clean seconds
    samples_to_raise: float = 3.0  # samples that must agree at a long tick (at 1 s the cap binds: 4.5 z-s each)
    throttle_after_s: float = 2.0
    clear_after_s: float = 5.0
    ewma_alpha: float = 0.2
    # Each chip's efficiency relative to its group, learned (core/detect/_baseline.py): chips differ a
    # little for good (silicon, HBM), and a straggler is a chip slower than it used to be.
    baseline_halflife_s: float = 3_600.0
    baseline_learn_s: float = 30.0
    baseline_clip: float = 0.02
    # The level starts at the median of the chip's first this-many judged samples (_warmup.py): a first sample
    # straddling compute and a collective reads 0.75-1.24 of its group's and, taken alone, set the level.
    baseline_seed_samples: int = 5
    # A learned level this far under its group's, and under its own node's chips' levels, is a straggler whatever
    # it learned (a chip that was already slow when first seen, or that slowed too gradually for the CUSUM).
    # Healthy chips' levels spread by a few % (silicon, and publishers sampling utilisation at their own phase of
    # the step); a whole node steadily slower than its group is a heterogeneous fleet (``_band``).
    efficiency_band: float = 0.9
    band_node_chips: int = 3  # learned chips of a node its median level is taken over (fewer: its group's, 1.0)
    # A chip against its peers on what every publisher reports (chip_peers.py): its utilisation under
    # util_collapse of its peers' busy median, or its execution latency over latency_band times theirs, for
    # these many seconds net (and samples_to_raise samples).
    util_collapse: float = 0.5
    collapse_after_s: float = 10.0
    latency_band: float = 1.5
    latency_after_s: float = 10.0
    # Samples that must agree, as for paths (docs/detection.md, "Long ticks"): a gauge's spikes come at a rate a
    # second, so at a 5 s tick one chip in forty has one in any sample, and three in a row raised 2 healthy chips
    # in 155 chip-hours (benchmarks/realnode.py).  At 1 s, the 10 s above bind first.
    peer_samples_to_raise: float = 6.0
    # Execution errors and timeouts (chip_errors.py), each counter a rate per second in its own CUSUM: exec_k a
    # second tolerated, at most exec_cap a second counted, failed at exec_h net, and held until exec_hold_s pass
    # without an error (errors come one by one: a shorter hold would clear and raise again between them).
    exec_k: float = 0.02
    exec_cap: float = 1.0
    exec_h: float = 2.4
    exec_hold_s: float = 60.0
    # An uncorrectable ECC error (HBM or SRAM) keeps a reporting chip failed until this long of its samples passes
    # without another (``_ecc``): longer than the advisory's hold (300 s), so its replace is proposed.
    ecc_hold_s: float = 600.0


@dataclass(eq=False)
class ChipDetector:
    """Chip health for the whole fleet."""

    state: FleetState
    peak_flops: float
    params: ChipParams = field(default_factory=ChipParams)

    def __post_init__(self) -> None:
        n, p = self.state.topology.n_chips, self.params
        self.seen = np.zeros(n, dtype=np.uint32)
        self.cusum = ClippedCusum.zeros(n, k=p.z_k, h=p.z_h, cap=p.z_cap, ceiling=p.z_h + p.drain_s * p.z_k,
                                         samples=p.samples_to_raise)
        self.efficiency = np.full(n, np.nan, np.float32)  # EWMA, relative to the group's median and its own level
        self.baseline = Baseline.empty(n, halflife_s=p.baseline_halflife_s, learn_s=p.baseline_learn_s,
                                       clip=p.baseline_clip)
        self.warmup = Warmup.of(n, p.baseline_seed_samples)
        self.sample = PeerSample.of(n)
        self.activity = PeerActivity.create(n, p)
        self.failures = ExecutionFailures.create(n, p)
        self.hbm_held = Latch.zeros(n, hold_s=p.ecc_hold_s)
        self.sram_held = Latch.zeros(n, hold_s=p.ecc_hold_s)
        # Persistence per state, in seconds: straggler none (its CUSUM already
        # persists), throttled throttle_after_s, stale none (the age already is
        # persistence), failed none.
        self.tracker = StateTracker.create(n, raise_after_s=[0.0, 0.0, p.throttle_after_s, 0.0, 0.0],
                                           clear_after_s=p.clear_after_s)

    def update(self, tick: int, *, suppress_stale: B | None = None, node_group: I64 | None = None) -> Transitions:
        """Fold in the chips' new samples; return the state changes.

        ``suppress_stale`` marks chips whose silence is reported elsewhere
        (their whole node is lost), so one lost node is one event.
        ``node_group`` is each node's job (-1: none; None: jobs unknown): a
        chip's peers are its job's chips, else its UltraServer's (``_peers.py``).
        """
        p, table = self.params, self.state.chips
        heard = table.samples > self.seen
        fresh = heard & np.isfinite(table.dt_s)  # a sample with an interval to diff (_common.new_samples)
        np.copyto(self.seen, table.samples)
        present = ~(table.gauges["present"] == 0)  # unknown (NaN) is not absent
        absent = heard & ~present
        peers = ChipPeers.of(self.state.topology, node_group)
        # Evidence, persistence and learning count a sample after a gap as one typical interval.
        held = persistence_seconds(table.dt_s, fresh, self.sample, self.state.node_cadence.typical_s())
        straggling, learn = self._efficiency(fresh, present, peers, held)
        flag, low_clock = self._clock(fresh)
        stale = self.state.silent(table, p.stale_after_s)
        failed, sram = self._ecc(fresh, held, silent=stale)
        if suppress_stale is not None:
            stale &= ~suppress_stale
        collapsed, slow = self.activity.update(util=table.gauges["util"], latency=table.gauges["exec_latency_us"],
                                               fresh=fresh, present=present, peers=peers, held=held)
        erring, timing_out = self.failures.update(table, fresh, held)

        reasons = np.zeros(table.n, dtype=np.int32)
        set_reason(reasons, fresh & straggling, Reason.EFFICIENCY)
        set_reason(reasons, fresh & collapsed, Reason.UTILISATION)
        set_reason(reasons, fresh & slow, Reason.LATENCY)
        set_reason(reasons, fresh & flag, Reason.THROTTLE_FLAG)
        set_reason(reasons, fresh & low_clock, Reason.CLOCK)
        set_reason(reasons, fresh & failed, Reason.ECC_UNCORRECTED)
        set_reason(reasons, fresh & sram, Reason.SRAM_ECC_UNCORRECTED)
        set_reason(reasons, fresh & erring, Reason.EXEC_ERRORS)
        set_reason(reasons, fresh & timing_out, Reason.EXEC_TIMEOUTS)
        set_reason(reasons, absent, Reason.ABSENT)
        set_reason(reasons, stale, Reason.SILENT)
        # The worst state that applies, each written over the milder ones.
        candidate = np.zeros(table.n, dtype=np.int8)
        candidate[fresh & (straggling | collapsed | slow)] = STRAGGLER
        candidate[fresh & (flag | low_clock)] = THROTTLED
        candidate[stale] = STALE
        candidate[(fresh & (failed | sram | erring | timing_out)) | absent] = FAILED
        # A failed chip keeps its state while silent: its silence is the failure.
        candidate[(self.tracker.state == FAILED) & stale] = FAILED
        changes = self.tracker.update(candidate, reasons, fresh | stale | absent, tick, seconds=held, at_s=table.t_s)
        learn(held)
        return changes

    def _efficiency(self, fresh: B, present: B, peers: ChipPeers, held: F32) -> tuple[B, Callable[[F32], None]]:
        """Judge each chip's efficiency against its group's and its own level; return the stragglers by it and
        what folds the sample into the baselines once the tracker has judged (``learn(held)``)."""
        p, table = self.params, self.state.chips
        util = table.gauges["util"]
        clock = table.gauges["clock_ratio"]
        flop_rate = table.rates["fp8_flop_total"]
        with np.errstate(invalid="ignore", divide="ignore"):
            busy_time = self.peak_flops * util.astype(np.float64)
            working = fresh & present & (util > p.active_util) & (flop_rate > 0) & np.isfinite(flop_rate)
            # The clock only where every active chip of the group reports one (module docstring).
            unclocked = peers.any(working & np.isnan(clock))
            efficiency = (flop_rate / (busy_time * np.where(unclocked, np.float32(1.0), clock))).astype(np.float32)
            active = working & np.isfinite(efficiency)
        # An all-NaN group (stalled, silent) has no median: NaN.
        group_median = peers.median(np.where(active, efficiency, np.float32(np.nan)).astype(np.float32))
        relative = efficiency / group_median
        judged = active & np.isfinite(relative)
        # Against the chip's own usual share of its group (its group's median until it has history).
        own = relative / self.baseline.reference(1.0)
        self.efficiency = ewma(self.efficiency, own, judged, alpha=p.ewma_alpha)
        # Until a chip has history it is judged by its clock, flags and counters only (_baseline.py).
        learned = self.baseline.learned()
        _, spread = robust_center_scale(own, judged, floor=0.0, sample=self.sample)
        floor = np.where(unclocked, np.float32(p.unclocked_floor), np.float32(p.efficiency_floor))
        sigmas_per_s = self._evidence_per_s(1.0 - own, self._group_spread(own, judged, spread, peers), floor,
                                            fresh, held)
        straggling = self.cusum.update(sigmas_per_s, judged & learned, seconds=held, drain_seconds=table.dt_s)
        straggling |= self._band(judged & learned)

        def learn(seconds: F32) -> None:
            # (Half its threshold, not a quarter as for paths: a chip's efficiency wanders by a fraction of a %
            # with the phase at which its publisher samples utilisation, and a level frozen early stays off.)
            quiet = judged & (self.tracker.state == HEALTHY) & (self.cusum.s < 0.5 * p.z_h)
            # The first samples seed the level by their median (_warmup.py), unclamped: a chip steadily off its
            # group's median is learned at its own level, and one outlier among them moves nothing.
            seeded = self.warmup.update(self.baseline, relative, quiet, seconds)
            self.baseline.update(self._believed(relative, spread), seeded, seconds)

        return straggling, learn

    @staticmethod
    def _group_spread(own: F32, judged: B, spread: float, peers: ChipPeers) -> F32:
        """Return each chip's spread: the fleet's, or its group's where that is wider (1.4826 x the median of
        its group's absolute deviations from their own levels).

        A chip's efficiency is FLOP over busy time, and busy time is a
        utilisation read with an error of its own: at a third of training's
        utilisation (an evaluation: forward passes only) the same error is
        three times the share of it.  Judged by the fleet's spread, which
        the training majority sets, a job in evaluation read as ~1.7x its
        own noise and its chips' CUSUMs ran over ``z_h`` 66x as often as in
        training (the control campaign's 13 chip raises, every one in an
        evaluation, at 1 s ticks: docs/detection.md, "The control
        campaign").  A group's own spread is the noise its chips share this
        tick; only ever wider than the fleet's, it makes no chip more
        sensitive.  A straggler is one of its group and moves its median
        deviation by one rank.
        """
        with np.errstate(invalid="ignore"):
            deviation = np.where(judged, np.abs(own - np.float32(1.0)), np.float32(np.nan)).astype(np.float32,
                                                                                                   copy=False)
        group = peers.median(deviation)
        group *= np.float32(MAD_TO_SIGMA)
        out: F32 = np.fmax(np.float32(spread), group, out=group)
        return out

    def _band(self, judged: B) -> B:
        """Return the judged chips whose learned level is under ``efficiency_band`` of the slower of their group's
        median (1.0) and their own node's chips' median level.

        A chip slow from its first sample among node-mates at the group's pace
        is a straggler by this band (its CUSUM learned nothing to be slow
        against).  A whole node whose chips have all been a few % under the
        group's median since they were first seen is not sixteen stragglers:
        it is heterogeneous hardware (another part, another firmware, a warmer
        rack), each chip at its own learned level, and its chips are held to
        the band against their node's median level instead.  What separates
        the two is the chip's own history and its node's: chips that *move*
        together after their levels were learned still gather CUSUM evidence,
        each against its own level (docs/detection.md, "A slow node or a slow
        fleet").  Only nodes with a chip under the band are looked at, so a
        healthy fleet costs one comparison a chip.
        """
        p, level = self.params, self.baseline.level
        band = np.float32(p.efficiency_band)
        low = np.flatnonzero(judged & (level < band))
        if not low.size:
            return np.zeros(judged.shape, dtype=bool)
        cpn = self.state.topology.chips_per_node
        nodes = np.unique(low // cpn)
        levels = np.where(self.baseline.learned(), level, np.float32(np.nan)).reshape(-1, cpn)[nodes]
        enough = np.isfinite(levels).sum(axis=1) >= p.band_node_chips
        node_level = np.where(enough, np.minimum(row_nanmedian(levels), np.float32(1.0)), np.float32(1.0))
        reference = node_level[np.searchsorted(nodes, low // cpn)]
        out = np.zeros(judged.shape, dtype=bool)
        out[low[level[low] < band * reference]] = True
        return out

    def _ecc(self, fresh: B, held: F32, *, silent: B) -> tuple[B, B]:
        """Return (HBM, SRAM) per chip: an uncorrectable ECC error in its new sample, or one within ``ecc_hold_s``
        of its samples before.

        An uncorrectable error fails a chip at once; a real device that keeps
        running reports the next ones seconds or minutes apart (neuron-monitor
        counts them per period), so without the latch the chip cleared after
        ``clear_after_s`` and was raised again at the next, and its advisory
        (``replace``, held ``hold_s`` first) was never proposed.  A chip that
        fell silent is released: one that reports again was reset, repaired
        or replaced, and starts afresh (the tracker kept it failed while it
        was silent).
        """
        rates = self.state.chips.rates
        with np.errstate(invalid="ignore"):
            hbm = fresh & (rates["ecc_uncorrected_total"] > 0)
            sram = fresh & (rates["sram_ecc_uncorrected_total"] > 0)
        seconds = np.where(fresh, held, np.float32(0.0))
        out = []
        for latch, now in ((self.hbm_held, hbm), (self.sram_held, sram)):
            np.logical_and(latch.on, ~silent, out=latch.on)
            out.append(latch.update(now, now, seconds))
        return out[0], out[1]

    def _clock(self, fresh: B) -> tuple[B, B]:
        """Return (throttle flag set, clock well under its site's) per chip."""
        table, topo = self.state.chips, self.state.topology
        clock = table.gauges["clock_ratio"]
        site = topo.chip_site
        site_clock = np.zeros(topo.n_sites)
        for s in range(topo.n_sites):  # a handful of sites, never a loop over chips
            site_clock[s], _ = robust_center_scale(clock, fresh & (site == s), floor=0.0, sample=self.sample)
        flag = table.gauges["throttled"] > 0
        with np.errstate(invalid="ignore"):
            low_clock = clock < (site_clock[site] - self.params.clock_margin).astype(np.float32)
        return flag, low_clock

    def _believed(self, relative: Floats, spread: float) -> F32:
        """Return ``relative`` as the baseline may learn it: within ``z_cap`` spreads of the chip's level.

        The CUSUM believes no more than ``z_cap`` sigmas of one sample, and the
        level is what its evidence is measured from, so one sample moves the
        level by no more than that either.  A chip's efficiency spreads by a
        fraction of a % while one instant utilisation reading can be 20 % off
        (heavy-tailed noise): taken up to ``Baseline.learn_clip`` (30 %) in the
        learning seconds, such a sample left the level of the plain mean 0.3 / n
        high, still 0.8 % (two floor sigmas) after 47 s, when the CUSUM, fed
        by that offset, froze the level and raised a healthy chip three times
        in one run (issue 22, training profile).  A chip's first samples are
        not clamped: their median seeds its level (``_warmup.py``), since a
        bound around its group's median (1.0) held a chip or a node steadily
        a few % off it above its own level, and a first sample set where the
        fleet's spread was wide was kept by this clamp once it narrowed
        (issue 38).  Two fleet-sized temporaries a tick, no loop: at
        ``rainier`` a few MB.
        """
        level = self.baseline.level
        center = np.where(np.isnan(level), np.float32(1.0), level).astype(np.float32)
        bound = np.float32(self.params.z_cap * max(spread, self.params.efficiency_floor))
        return np.clip(relative, center * (np.float32(1.0) - bound), center * (np.float32(1.0) + bound)).astype(
            np.float32, copy=False)

    def _evidence_per_s(self, deficit: Floats, spread: F32, floor: F32, fresh: B, held: F32) -> F32:
        """Return each chip's efficiency deficit as the CUSUM's evidence: sigmas per second of its interval.

        The CUSUM weighs each sample by its interval ``held``, so a sample's
        deviation must be in units of a one-second sample's spread.  This
        tick's samples show the spread of one interval of T seconds (their
        median); whether its variance is T times smaller than a 1 s one's
        depends on the publisher: utilisation averaged over the interval, or
        read at one instant.  A sample counts as the stronger of two readings:

        * averaged: the deficit over the spread x sqrt(T), so T seconds of
          healthy noise add N(-kT, T), what T one-second samples add;
        * instant: the deficit over the spread itself, whose excess over
          ``z_k`` is worth at most one second (a shortfall under it drains
          per second of the interval, so an alarm whose cause ended clears
          as fast as before, and one low sample of a slow chip does not).

        Healthy noise then raises no more often per second than at a 1 s tick
        under either reading, so at most twice as often together; at 1 s the
        two are one.  Taken as T seconds of the per-sample spread instead, a
        5 s sample added N(-5k, 25): three healthy samples 2.6 sigma out
        raised a straggler, 64 in a 10-minute fault-free soak at ``rainier``
        (issue 22).
        """
        p = self.params
        typical = typical_interval(self.state.chips.dt_s, fresh, self.sample,
                                   self.state.node_cadence.typical_s()) or 1.0
        averaged: F32 = (deficit / np.maximum(spread * np.float32(math.sqrt(typical)), floor)).astype(np.float32)
        excess = np.minimum(deficit / np.maximum(spread, floor), np.float32(p.z_cap)) - np.float32(p.z_k)
        with np.errstate(invalid="ignore", divide="ignore"):
            # held x (rate - k) = min(held, 1 s) x the excess above k, held x the shortfall under it.
            excess *= np.where(excess > 0, np.minimum(held, np.float32(1.0)) / held, np.float32(1.0))
        np.fmax(averaged, excess + np.float32(p.z_k), out=averaged)
        return averaged

    def speed(self) -> F32:
        """Return each chip's estimated speed (clock x relative efficiency) for the throughput model."""
        speed = np.nan_to_num(self.state.chips.gauges["clock_ratio"], nan=1.0)
        # Efficiency counts for stragglers alone: priced for those few, not for every chip (the core and the
        # per-job model call this every tick).
        straggler = np.flatnonzero(self.tracker.state == STRAGGLER)
        speed[straggler] *= np.clip(np.nan_to_num(self.efficiency[straggler], nan=1.0), 0.05, 1.0)
        return speed
