"""The monitor's whole analysis of one tick, with no I/O: apply the queued
frames, run the detectors, compute throughput and lost FP8 by cause, and copy
out what the exporter needs.  The daemon, the benchmarks and the tests all
drive this one object, so they measure and test the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64, Floats
from rainierd.core.aggregates import Aggregates, CounterSums, aggregate
from rainierd.core.config import MonitorConfig
from rainierd.core.detect import STATE_NAMES, Event, FeedView, FleetDetector, PeerSample
from rainierd.core.eventjobs import with_jobs
from rainierd.core.fleetloss import LostByCause, price_fleet
from rainierd.core.ingest import FlushResult, Ingest, IngestStats, Message, Received
from rainierd.core.jobmodel import JobLoss
from rainierd.core.jobphase import JobPhases, PhaseTracker
from rainierd.core.jobs import JobMembership
from rainierd.core.learned import fingerprint, learned_arrays, restore_learned
from rainierd.core.model import HealthyShares
from rainierd.core.state import FleetState
from rainierd.core.throughput import Throughput, compute_throughput
from rainierd.fleet import Topology
from rainierd.wire import Frame, NodeBatch


def _lowest(values: Floats, k: int, sample: PeerSample) -> tuple[I64, F64]:
    """Return the ids and values of the ``k`` lowest finite values, lowest first.

    Candidates are the values at or below the ``4k``-th lowest of the peer
    sample (one comparison pass instead of a partition of millions); when
    that finds fewer than ``k``, every finite value is a candidate.
    """
    picked = sample.pick(values)
    picked = picked[np.isfinite(picked)]
    candidates = np.zeros(0, np.int64)
    if picked.size > 4 * k:
        bound = np.partition(picked, 4 * k)[4 * k]
        candidates = np.flatnonzero(values <= bound)
    if candidates.size < k:
        candidates = np.flatnonzero(np.isfinite(values))
    if candidates.size > k:
        candidates = candidates[np.argpartition(values[candidates], k)[:k]]
    order = candidates[np.argsort(values[candidates], kind="stable")]
    return order.astype(np.int64), values[order].astype(np.float64)


DETAIL_FIELDS: Final = ("util", "clock_ratio", "temp_c", "power_w", "hbm_used_bytes")
DETAIL_TOTALS: Final = ("ecc_corrected_total", "ecc_uncorrected_total")


@dataclass(frozen=True, eq=False)
class DetailView:
    """The chips of the inventory's detail nodes, one by one (copies; NaN where unknown)."""

    ids: I64
    gauges: dict[str, F64]
    totals: dict[str, F64]
    effective: F64

    @classmethod
    def of(cls, core_state: FleetState, nodes: tuple[int, ...], effective: F64) -> DetailView:
        """Return the detail chips' latest values."""
        topo, chips = core_state.topology, core_state.chips
        ids = (np.asarray(nodes, np.int64)[:, None] * topo.chips_per_node
               + np.arange(topo.chips_per_node)).ravel()
        gauges = {name: chips.gauges[name][ids].astype(np.float64) for name in DETAIL_FIELDS}
        totals = {}
        for name in DETAIL_TOTALS:
            values = chips.totals[name][ids].astype(np.float64)
            values[~chips.has(name)[ids]] = np.nan
            totals[name] = values
        fresh = effective[ids].copy()
        fresh[~chips.reported()[ids]] = np.nan
        return cls(ids, gauges, totals, fresh)


@dataclass(frozen=True, eq=False)
class HealthView:
    """The unhealthy entities of every kind (ids, states, reason masks, onsets), and the
    ``worst_k`` lowest gray-failure ratios even among healthy entities (copies)."""

    ids: dict[str, I64]
    states: dict[str, I64]
    reasons: dict[str, I64]
    onsets: dict[str, I64]
    worst: dict[str, tuple[I64, F64]]
    unknown: dict[tuple[str, str], int] = field(default_factory=dict)  # entities not judgeable, by judgement
    feed: FeedView = field(default_factory=FeedView)  # the monitor's feed (detect/feed.py)
    # Entities whose claim is far above their peers' now, by judgement, and how many became so since the start.
    implausible: dict[tuple[str, str], I64] = field(default_factory=dict)
    implausible_onsets: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def of(cls, detector: FleetDetector, *, worst_k: int = 10) -> HealthView:
        """Return a copy of the detectors' current unhealthy sets and worst ratios."""
        ids, states, reasons, onsets = {}, {}, {}, {}
        for entity, tracker in detector.trackers().items():
            bad = np.flatnonzero(tracker.state)
            ids[entity], states[entity] = bad, tracker.state[bad].astype(np.int64)
            reasons[entity], onsets[entity] = tracker.reason[bad].astype(np.int64), tracker.onset[bad]
        worst = {
            "neuronlink": _lowest(detector.links.now_ratio, worst_k, detector.links.sample),
            "efa": _lowest(detector.efa.share, worst_k, detector.efa.sample),
            "chip": _lowest(detector.chips.efficiency, worst_k, detector.chips.sample),
        }
        return cls(ids, states, reasons, onsets, worst, detector.unknown(), detector.feed.view,
                   detector.implausible(), detector.implausible_onsets())

    def counts(self) -> dict[tuple[str, str], int]:
        """Return how many entities of each kind are in each unhealthy state."""
        out = {}
        for entity, names in STATE_NAMES.items():
            states = self.states.get(entity, np.zeros(0, dtype=np.int64))
            for value, name in enumerate(names[1:], start=1):
                out[entity, name] = int((states == value).sum())
        return out


@dataclass(frozen=True, eq=False)
class Analysis:
    """What one analysis tick produced."""

    flush: FlushResult
    events: list[Event]
    throughput: Throughput
    lost: LostByCause
    health: HealthView
    detail: DetailView | None = None
    aggregates: Aggregates | None = None
    # The tick's jobs (the membership it was given) and what each loses (core/jobmodel.py): one pair, so every
    # reader of this analysis sees the same jobs.
    jobs: JobMembership | None = None
    job_loss: JobLoss | None = None
    job_phases: JobPhases | None = None  # each job's phase (core/jobphase.py), in the same order


class MonitorCore:
    """Fleet state, ingest and detectors over one topology."""

    def __init__(self, topology: Topology, config: MonitorConfig | None = None) -> None:
        self.topology = topology
        self.config = config = config or MonitorConfig()
        if config.hardware.efa_ports_per_node != topology.efa_ports_per_node:
            raise ValueError(f"the hardware has {config.hardware.efa_ports_per_node} EFA ports a node, "
                             f"the topology {topology.efa_ports_per_node}: build both from the same settings")
        # A chip is silent after this long without a sample, on the listening clock.
        self.stale_after_s = config.stale_after_s
        self.peak_flops_per_chip = config.hardware.fp8_dense_flops
        self.model = config.model
        self.state = FleetState(topology, bounds=config.counter_bounds(),
                                stale_after_ticks=config.stale_after_ticks)
        self.stats = IngestStats()
        self.ingest = Ingest(self.state, self.stats, max_frame_bytes=config.max_frame_bytes,
                             max_clock_skew_s=config.max_clock_skew_s, max_seq_jump=config.max_seq_jump,
                             tick_s=config.tick_s)
        self.detector = FleetDetector(self.state, hardware=config.hardware, params=config.detection_params())
        # Each node's healthy share of peak under the group it is in (its job, or its UltraServer's capacity in
        # no job), what a stall costs: job numbers move as jobs come and go, nodes do not (core/jobmodel.py).
        self.node_shares = HealthyShares.empty(topology.n_nodes, halflife_s=config.model.healthy_share_halflife_s)
        # The jobs the last analysis was given; an analysis given none keeps them.
        self.jobs = JobMembership.empty(topology.n_nodes)
        self.phases = PhaseTracker()  # each job's phase, carried by id from tick to tick
        self.counter_sums = CounterSums(topology)  # the raw telemetry's counters as monotonic sums
        self.analyses = 0  # analyses run: what events are numbered by, unless the caller says otherwise
        self._fingerprint: str | None = None  # the topology's (core/learned.py), hashed when first needed

    def topology_fingerprint(self) -> str:
        """Return the digest of the topology the learned state belongs to (core/learned.py)."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.topology)
        return self._fingerprint

    def learned(self) -> dict[str, npt.NDArray[Any]]:
        """Return copies of what the detectors and the model have learned, by name (core/learned.py)."""
        return learned_arrays(self, topology_fingerprint=self.topology_fingerprint())

    def restore_learned(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Take back ``learned()``'s arrays; raises LearnedStateError, saying why and changing nothing, if they are
        of another layout or topology or do not fit."""
        restore_learned(self, arrays, topology_fingerprint=self.topology_fingerprint())

    def analyse(
        self, messages: Sequence[Message], *, now_s: float, tick: int | None = None, jobs: JobMembership | None = None,
    ) -> Analysis:
        """Decode and admit ``messages``, then analyse the fleet as of ``now_s``; safe off the event loop.

        ``now_s`` is the listening clock the messages' ``rx_s`` are on;
        ``tick`` numbers this analysis in events (by default the count of
        analyses so far, from 0: one a simulator tick in the benchmarks and
        tests).  Publishers' ticks never number anything: each counts its
        own, and any value fits in a frame.  The window's result is not yet
        in the stats: ``ingest.record`` it on the thread that owns them.
        ``jobs`` is the membership this tick's per-job figures use (resolved
        against this core's topology); None keeps the last one given.
        """
        return self._analyse(self.ingest.admit(messages, now_s=now_s), now_s, tick, jobs)

    def analyse_frames(
        self, items: Sequence[Received], *, now_s: float, jobs: JobMembership | None = None,
    ) -> Analysis:
        """Admit already decoded frames, then analyse (as ``analyse``)."""
        return self._analyse(self.ingest.apply(items, now_s=now_s), now_s, None, jobs)

    def _analyse(self, flush: FlushResult, now_s: float, tick: int | None, jobs: JobMembership | None) -> Analysis:
        if jobs is not None:
            if jobs.node_job.size != self.topology.n_nodes:
                raise ValueError(f"a membership of {jobs.node_job.size} nodes for a fleet of "
                                 f"{self.topology.n_nodes}: resolve it against this core's topology")
            self.jobs = jobs
        self.state.now_s = now_s
        # A node's paths are judged against its job's nodes (its UltraServer's without one): detect/nodepaths.py.
        events = self.detector.update(self.analyses if tick is None else tick,
                                      node_group=self.jobs.node_job.astype(np.int64))
        self.analyses += 1
        throughput = compute_throughput(
            self.state, peak_flops_per_chip=self.peak_flops_per_chip, stale_after_s=self.stale_after_s,
        )
        # One pricing of every group, added up at every level (core/fleetloss.py).
        per_job, lost = price_fleet(throughput, self.detector, self.jobs, params=self.model, shares=self.node_shares)
        phases = self.phases.update(self.jobs, util=self.state.chips.gauges["util"],
                                    chip_fresh=throughput.chip_fresh, stalled=per_job.stalled, now_s=now_s)
        # The detectors know no jobs: each event gets the jobs its entity slows, priced on this tick's jobs.
        events = with_jobs(events, membership=self.jobs, loss=per_job, topology=self.topology)
        detail = self.topology.names.detail
        detail_view = DetailView.of(self.state, detail, throughput.chip_effective) if detail else None
        self.counter_sums.update(self.state)
        aggregates = aggregate(self.state, self.counter_sums, chip_fresh=throughput.chip_fresh,
                               stale_after_s=self.stale_after_s)
        return Analysis(flush, events, throughput, lost, HealthView.of(self.detector), detail_view, aggregates,
                        jobs=self.jobs, job_loss=per_job, job_phases=phases)

    def step(
        self, frames: Sequence[Frame], *, now_s: float | None = None, jobs: JobMembership | None = None,
    ) -> Analysis:
        """Admit ``frames`` as received at their own sample time, and analyse at once (benchmarks, tests).

        ``now_s`` defaults to the newest sample time among ``frames`` (or the
        last analysis's, when there are none).
        """
        items = [Received(_sample_time(frame), None, frame) for frame in frames]
        if now_s is None:
            now_s = max((item.rx_s for item in items), default=self.state.now_s)
        analysis = self.analyse_frames(items, now_s=now_s, jobs=jobs)
        self.ingest.record(analysis.flush)
        return analysis


def _sample_time(frame: Frame) -> float:
    if isinstance(frame, NodeBatch):
        return float(frame.node_t_s.max(initial=frame.t_s))
    return frame.t_s
