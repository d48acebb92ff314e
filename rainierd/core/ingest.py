"""Admission of decoded frames into the fleet state: identity checks, sequence
accounting, and a batched, vectorised scatter once per analysis tick.

``accept`` runs once per frame and does only O(1) bookkeeping (node range,
topic match, sequence gaps); ``flush`` validates every record id of the whole
batch at once and scatters the batch into the state arrays.  A frame with one
bad record is rejected whole, and never touches the state of other frames.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from rainierd.core.state import FleetState, concat_records
from rainierd.wire.binary import finite_mask
from rainierd.wire.records import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
    FacilityFrame,
    Frame,
    NodeFrame,
)
from rainierd.wire.topics import TopicAddress

__all__ = ["FlushResult", "Ingest", "IngestStats"]


@dataclass(eq=False)
class IngestStats:
    """Cumulative ingest counters, exported as rainier_ingest_* metrics."""

    frames: Counter[str] = field(default_factory=Counter)  # by encoding
    bytes: Counter[str] = field(default_factory=Counter)  # by encoding
    rejected: Counter[str] = field(default_factory=Counter)  # by reason
    frames_lost: int = 0  # sequence gaps
    publisher_changes: int = 0
    frames_applied: int = 0

    def reject(self, reason: str) -> None:
        """Count one rejected frame."""
        self.rejected[reason] += 1


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one flush applied and rejected (by reason)."""

    applied: int
    rejected: Counter[str]
    latest_tick: int


@dataclass(slots=True)
class _Stream:
    publisher: str
    seq: int


class Ingest:
    """Turns a stream of decoded frames into in-place updates of a FleetState."""

    def __init__(self, state: FleetState, stats: IngestStats) -> None:
        self.state = state
        self.stats = stats
        self._streams: dict[tuple[str, int], _Stream] = {}
        # Generation g holds the (g+1)-th pending frame of each entity, so a
        # flush that finds two frames of one node applies them in order.
        self._pending: list[list[Frame]] = []
        self._pending_count: dict[tuple[str, int], int] = {}

    def accept(self, frame: Frame, address: TopicAddress | None = None) -> str | None:
        """Queue a frame for the next flush; return the rejection reason or None."""
        topo = self.state.topology
        if isinstance(frame, NodeFrame):
            key = ("node", frame.node)
            if frame.node >= topo.n_nodes:
                return self._rejected("unknown_node")
            if address is not None and (
                address.is_facility or topo.node_path(frame.node) != (
                    address.site, address.ultraserver, address.node_in_ultraserver,
                )
            ):
                return self._rejected("topic_mismatch")
        else:
            key = ("site", frame.site)
            if frame.site >= topo.n_sites:
                return self._rejected("unknown_node")
            if address is not None and (not address.is_facility or address.site != frame.site):
                return self._rejected("topic_mismatch")
        if (reason := self._sequence(key, frame)) is not None:
            return self._rejected(reason)
        generation = self._pending_count.get(key, 0)
        self._pending_count[key] = generation + 1
        if generation == len(self._pending):
            self._pending.append([])
        self._pending[generation].append(frame)
        return None

    def _rejected(self, reason: str) -> str:
        self.stats.reject(reason)
        return reason

    def _sequence(self, key: tuple[str, int], frame: Frame) -> str | None:
        stream = self._streams.get(key)
        if stream is None:
            self._streams[key] = _Stream(frame.publisher, frame.seq)
            return None
        if stream.publisher != frame.publisher:
            # A restarted or replaced publisher starts its own sequence.
            self.stats.publisher_changes += 1
            stream.publisher, stream.seq = frame.publisher, frame.seq
            return None
        if frame.seq <= stream.seq:
            return "stale_seq"
        self.stats.frames_lost += frame.seq - stream.seq - 1
        stream.seq = frame.seq
        return None

    def take_batch(self) -> list[list[Frame]]:
        """Return the queued frames, by generation, and start a new queue."""
        batch, self._pending = self._pending, []
        self._pending_count.clear()
        return batch

    def apply(self, batch: list[list[Frame]]) -> FlushResult:
        """Scatter a batch into the state; safe to run off the event loop.

        It touches the state and nothing else, so ``accept`` may queue the next
        batch meanwhile; ``record`` then adds the result to the stats.
        """
        applied = 0
        rejected: Counter[str] = Counter()
        for frames in batch:
            nodes = [f for f in frames if isinstance(f, NodeFrame)]
            sites = [f for f in frames if isinstance(f, FacilityFrame)]
            applied += self._apply_nodes(nodes, rejected) + self._apply_sites(sites, rejected)
        return FlushResult(applied, rejected, self.state.latest_tick)

    def record(self, result: FlushResult) -> None:
        """Add a flush result to the cumulative stats."""
        self.stats.frames_applied += result.applied
        self.stats.rejected.update(result.rejected)

    def flush(self) -> FlushResult:
        """Apply every queued frame now (take_batch, apply and record)."""
        result = self.apply(self.take_batch())
        self.record(result)
        return result

    def _apply_nodes(self, frames: list[NodeFrame], rejected: Counter[str]) -> int:
        """Validate one generation of node frames as a whole and scatter the good ones.

        A frame is rejected whole if any record holds NaN or infinity
        (non_finite), names an entity of another node (unknown_id) or names one
        twice (duplicate_id); other frames of the batch are unaffected.
        """
        if not frames:
            return 0
        topo, state = self.state.topology, self.state
        n = len(frames)
        node = np.fromiter((f.node for f in frames), np.int64, n)
        reasons = {r: np.zeros(n, dtype=bool) for r in ("non_finite", "unknown_id", "duplicate_id")}
        parts = []
        for attr, id_field, owner, dtype in (
            ("chips", "chip", topo.chip_node, CHIP_DTYPE),
            ("links", "link", topo.link_node, LINK_DTYPE),
            ("efa", "port", topo.efa_node, EFA_DTYPE),
            ("cooling", None, None, COOLING_DTYPE),
        ):
            arrays = [getattr(f, attr) for f in frames]
            records = concat_records(arrays, dtype)
            frame_of = np.repeat(np.arange(n), np.fromiter(map(len, arrays), np.int64, n))
            reasons["non_finite"][frame_of[~finite_mask(records)]] = True
            if id_field is None or owner is None:  # a cooling record belongs to its frame's node
                parts.append((records, frame_of, node[frame_of]))
                continue
            ids = records[id_field].astype(np.int64)
            known = ids < owner.size
            wrong = ~known
            wrong[known] = owner[ids[known]] != node[frame_of[known]]
            reasons["unknown_id"][frame_of[wrong]] = True
            # Records that passed the owner check belong to their frame's node,
            # and a node appears once per generation, so an id counted twice
            # means one frame listed it twice: reject that frame, not a neighbour.
            owned = ~wrong
            twice = np.bincount(ids[owned], minlength=owner.size)[ids[owned]] > 1
            reasons["duplicate_id"][frame_of[owned][twice]] = True
            parts.append((records, frame_of, ids))
        bad = np.zeros(n, dtype=bool)
        for reason, flagged in reasons.items():  # one reason per frame, in this order
            newly = flagged & ~bad
            if newly.any():
                rejected[reason] += int(newly.sum())
                bad |= newly
        t_s = np.fromiter((f.t_s for f in frames), np.float64, n)
        tick = np.fromiter((f.tick for f in frames), np.int64, n)
        tables = (state.chips, state.links, state.efa, state.cooling)
        for table, (records, frame_of, ids) in zip(tables, parts, strict=True):
            keep = ~bad[frame_of] if bad.any() else slice(None)
            table.scatter(ids[keep], records[keep], t_s[frame_of[keep]], tick[frame_of[keep]])
        if not bad.all():
            newest = int(np.argmax(np.where(bad, -1, tick)))
            if tick[newest] >= state.latest_tick:
                state.latest_tick, state.latest_t_s = int(tick[newest]), float(t_s[newest])
        return int(n - bad.sum())

    def _apply_sites(self, frames: list[FacilityFrame], rejected: Counter[str]) -> int:
        """Scatter facility frames; one with a non-finite value is rejected whole."""
        frames = [f for f in frames if len(f.facility)]
        if not frames:
            return 0
        n = len(frames)
        records = concat_records([f.facility for f in frames], FACILITY_DTYPE)
        good = finite_mask(records)  # one record per frame
        if not good.all():
            rejected["non_finite"] += int((~good).sum())
        site = np.fromiter((f.site for f in frames), np.int64, n)
        t_s = np.fromiter((f.t_s for f in frames), np.float64, n)
        tick = np.fromiter((f.tick for f in frames), np.int64, n)
        self.state.facility.scatter(site[good], records[good], t_s[good], tick[good])
        return int(good.sum())
