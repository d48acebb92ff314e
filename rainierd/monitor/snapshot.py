"""The one value the monitor publishes per analysis: what the tick concluded
and the monitor's own status, frozen.  The exporter, the probes, the daemon,
the benchmarks and the tests read only this; none of them reaches into the
live objects the event loop and the analysis thread keep mutating.

Built in one place (``MonitorSnapshot.of``), so every reader sees the same
fields filled the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from rainierd.actions import ActionsView, ActionTotals
from rainierd.core import (
    Aggregates,
    Analysis,
    DetailView,
    HealthView,
    JobLoss,
    JobMembership,
    JobPhases,
    LostByCause,
    Throughput,
)
from rainierd.core.ingest import IngestStats
from rainierd.mqtt import Connection
from rainierd.runtime import Histogram


def _empty() -> Mapping[str, int]:
    return MappingProxyType({})


def _frozen(counts: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(counts))


@dataclass(slots=True)
class Receipts:
    """What reached the monitor's inbox: payloads and bytes by encoding, and payloads refused there, by reason.

    Written only by the inbox; the core's ``IngestStats`` counts what
    happened to the frames after that.  Refusals are before decoding:
    ``retained``, ``oversize``, a broken header by the decoding's reason,
    ``over_share``, ``over_share_unconfirmed``, ``too_many_topics``.
    """

    messages: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class IngestCounts:
    """The ingest counters as of one analysis: the inbox's receipts joined with the core's frame counts."""

    messages: Mapping[str, int] = field(default_factory=_empty)  # payloads received, by encoding
    bytes: Mapping[str, int] = field(default_factory=_empty)  # payload bytes, by encoding
    frames: Mapping[str, int] = field(default_factory=_empty)  # frames decoded (a batch carries many), by encoding
    rejected: Mapping[str, int] = field(default_factory=_empty)  # by reason (oversize included)
    # The sequence accounting a checkpoint carries; None while it is withheld (monitor/checkpointing.py).
    frames_lost: int | None = 0
    frames_late: int | None = 0
    frames_missing: int | None = 0
    publisher_changes: int | None = 0
    publisher_restarts: int | None = 0
    frames_applied: int | None = 0
    samples_applied: Mapping[str, int] = field(default_factory=_empty)  # entity samples, by record kind
    # Counters of applied samples refused over their bounds, by (kind, field, reason) (core/bounds.py).
    counters_refused: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, stats: IngestStats, receipts: Receipts | None = None, *, withhold_accounting: bool = False,
           ) -> IngestCounts:
        """Return the counters of ``stats`` (the core's) and ``receipts`` (the inbox's), copied; the sequence
        accounting as None if ``withhold_accounting`` (a checkpoint older than it is left for a later start)."""
        receipts = receipts or Receipts()
        rejected = Counter(stats.rejected)
        rejected.update(receipts.refused)
        counts = cls(
            messages=_frozen(receipts.messages), bytes=_frozen(receipts.bytes), frames=_frozen(stats.frames),
            rejected=_frozen(rejected), frames_lost=stats.frames_lost, frames_late=stats.frames_late,
            frames_missing=stats.frames_missing, publisher_changes=stats.publisher_changes,
            publisher_restarts=stats.publisher_restarts, frames_applied=stats.frames_applied,
            samples_applied=_frozen(stats.samples_applied),
            counters_refused=MappingProxyType(dict(stats.counters_refused)),
        )
        if withhold_accounting:
            return replace(counts, frames_lost=None, frames_late=None, frames_missing=None, publisher_changes=None,
                           publisher_restarts=None, frames_applied=None)
        return counts


@dataclass(frozen=True, slots=True)
class Backlog:
    """Messages waiting for analysis, what overflow dropped, and whether the monitor is behind."""

    messages: int = 0
    bytes: int = 0
    oldest_s: float = 0.0  # how long the oldest message of the last window waited
    dropped_messages: int = 0
    dropped_bytes: int = 0
    overloaded: bool = False
    overload_episodes: int = 0
    reasons: tuple[str, ...] = ()
    # Wall time at receipt minus sample time over the last window, (median, largest magnitude):
    # publishers' clock offsets plus transport delay.
    receive_offset_s: tuple[float, float] = (float("nan"), float("nan"))


@dataclass(frozen=True, slots=True)
class Checkpointing:
    """How the monitor's stream checkpoint (``--state-file``) is keeping up."""

    saves: int = 0
    failures: int = 0
    last_save_wall_s: float = float("nan")  # wall time of the last checkpoint written
    # An older checkpoint is left that could be neither replaced, removed nor marked: the accounting is withheld.
    stale_left: bool = False


@dataclass(frozen=True, slots=True)
class MonitorStatus:
    """The monitor's view of itself at one analysis."""

    ingest: IngestCounts = field(default_factory=IngestCounts)
    connection: Connection = field(default_factory=Connection)
    backlog: Backlog | None = None
    sample_lag: Histogram | None = None  # frame sample time to the end of the analysis that applied it
    checkpoint: Checkpointing | None = None  # None: no --state-file
    loop_lag_worst_s: float | None = None  # worst event-loop lag of the last window (None: not measured)
    loop_lag: Histogram | None = None
    events_dropped: int = 0  # events the outbox dropped while the MQTT session was down
    share_topics: int | None = None  # telemetry topics whose share the inbox tracks now (None: no shares)
    jobs_refused: Mapping[str, int] = field(default_factory=_empty)  # job documents refused so far, by reason


@dataclass(frozen=True, eq=False)
class MonitorSnapshot:
    """What one analysis concluded, with the monitor's status at the time."""

    generation: int
    throughput: Throughput
    chips_total: int  # chips this monitor watches: its shard's present chips
    analysis_s: float
    analysed_ticks: int
    lost: LostByCause | None = None
    health: HealthView | None = None
    events: Mapping[tuple[str, str], int] = field(default_factory=dict)  # cumulative, by (entity, new state)
    lag_s: float = float("nan")  # wall time at analysis minus the newest sample's time
    detail: DetailView | None = None  # the inventory's detail nodes' chips, one by one
    aggregates: Aggregates | None = None  # the raw telemetry per UltraServer and site
    status: MonitorStatus = field(default_factory=MonitorStatus)
    jobs: JobMembership | None = None  # the jobs this analysis priced (docs/jobs.md)
    job_loss: JobLoss | None = None  # what each of them loses (core/jobmodel.py)
    job_phases: JobPhases | None = None  # each one's phase: running, checkpoint, restarting, stalled (core/jobphase.py)
    actions: ActionsView | None = None  # each unhealthy node's advisory, the brake and the lemons (docs/actions.md)
    action_totals: ActionTotals | None = None  # proposals and brake trips since the monitor started

    @classmethod
    def of(
        cls, analysis: Analysis, *, generation: int, chips_total: int, analysis_s: float, analysed_ticks: int,
        events: Mapping[tuple[str, str], int], lag_s: float, status: MonitorStatus,
        actions: ActionsView | None = None, action_totals: ActionTotals | None = None,
    ) -> MonitorSnapshot:
        """Return the snapshot of ``analysis``: every reader's fields, filled the one way."""
        return cls(
            generation=generation, throughput=analysis.throughput, chips_total=chips_total, analysis_s=analysis_s,
            analysed_ticks=analysed_ticks, lost=analysis.lost, health=analysis.health,
            events=MappingProxyType(dict(events)), lag_s=lag_s, detail=analysis.detail,
            aggregates=analysis.aggregates, status=status, jobs=analysis.jobs, job_loss=analysis.job_loss,
            job_phases=analysis.job_phases, actions=actions, action_totals=action_totals,
        )

    @property
    def computed(self) -> bool:
        """Return whether any telemetry has been applied (before that the fleet's figures are absent)."""
        return self.throughput.tick >= 0
