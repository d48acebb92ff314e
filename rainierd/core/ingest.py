"""Admission of telemetry into the fleet state, one analysis window at a time.

A window is every message received since the last analysis.  ``admit``
decodes them and ``apply`` admits the frames with a fixed number of numpy
passes however many nodes they carry: the frames' headers and records are
joined column by column, every check runs over the whole window, and only
then do sequence numbers move and records land, so a frame that is rejected
changes nothing (docs/wire-format.md lists the reasons).

Checks, in order, each rejecting the whole frame: ``unknown_node``,
``topic_mismatch``, ``non_finite``, ``clock_skew`` (a sample time more than
``max_clock_skew_s`` from the monitor's clock at receipt), ``unknown_id``,
``duplicate_id``; then per
node stream (publisher, node) the sequence rules of ``core/streams.py``:
gaps (missing, then lost), late frames, restarts under the same id, new
publishers, ``stale_seq`` and ``seq_jump``.  When one node has several frames in a window
(the monitor caught up after a backlog) they apply in arrival order, one
"generation" at a time, so rates come out between consecutive samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64, B
from rainierd.core.state import FleetState, Scratch, Table
from rainierd.core.streams import Advance, Streams
from rainierd.errors import FrameError
from rainierd.wire import decode_frame
from rainierd.wire.records import (
    FACILITY_DTYPE,
    ID_FIELDS,
    RECORD_DTYPES,
    RECORD_KINDS,
    FacilityFrame,
    Frame,
    NodeBatch,
    NodeFrame,
    column_dtypes,
    float_fields,
)
from rainierd.wire.topics import TopicAddress, parse_topic

__all__ = ["FRAME_REASONS", "FlushResult", "Ingest", "IngestStats", "Message", "Received"]

FRAME_REASONS: Final = ("unknown_node", "topic_mismatch", "non_finite", "clock_skew", "unknown_id", "duplicate_id")
_FLOATS: Final = {kind: float_fields(dtype) for kind, dtype in RECORD_DTYPES.items()}
_COLUMNS: Final = {kind: column_dtypes(dtype) for kind, dtype in RECORD_DTYPES.items()}
_ALL_FIELDS: Final = {kind: (1 << len(columns)) - 1 for kind, columns in _COLUMNS.items()}
# Whatever the receiving clock, no sample is taken after the year 5138: beyond, t_s is garbage.
_LATEST_PLAUSIBLE_S: Final = 1e11
_MAX_TICK: Final = 2**63 - 1  # ticks are u64 on the wire; what the monitor keeps is an int64


@dataclass(frozen=True, slots=True)
class Message:
    """One MQTT message as received: when (listening clock, and wall clock), where, what."""

    rx_s: float
    topic: str
    payload: bytes
    rx_wall_s: float = float("nan")


@dataclass(frozen=True, slots=True)
class Received:
    """One decoded frame, when it was received and the topic it came on."""

    rx_s: float
    address: TopicAddress | None
    frame: Frame
    rx_wall_s: float = float("nan")


@dataclass(eq=False)
class IngestStats:
    """Cumulative ingest counters, exported as rainier_ingest_* metrics."""

    messages: Counter[str] = field(default_factory=Counter)  # payloads received, by encoding
    bytes: Counter[str] = field(default_factory=Counter)  # payload bytes, by encoding
    frames: Counter[str] = field(default_factory=Counter)  # frames decoded (a batch carries many), by encoding
    rejected: Counter[str] = field(default_factory=Counter)  # by reason
    frames_lost: int = 0  # missing for longer than the late window: certainly lost
    frames_late: int = 0  # were missing, then arrived within the window (never counted lost)
    frames_missing: int = 0  # missing now: may still arrive late (a gauge)
    publisher_changes: int = 0
    publisher_restarts: int = 0
    frames_applied: int = 0
    samples_applied: Counter[str] = field(default_factory=Counter)  # entity samples, by record kind

    def reject(self, reason: str, count: int = 1) -> None:
        """Count rejected frames (or payloads that did not decode)."""
        self.rejected[reason] += count


@dataclass(frozen=True, eq=False)
class FlushResult:
    """What one window applied, rejected (by reason) and found missing."""

    applied: int
    rejected: Counter[str]
    lost: int = 0
    publisher_changes: int = 0
    latest_tick: int = -1
    frames: Counter[str] = field(default_factory=Counter)  # decoded, by encoding
    applied_t_s: F64 = field(default_factory=lambda: np.zeros(0))  # sample times of the frames applied
    # Wall time at receipt minus sample time, of the frames applied (a publisher's clock skew included).
    receive_lag_s: F64 = field(default_factory=lambda: np.zeros(0))
    samples: Counter[str] = field(default_factory=Counter)  # entity samples applied, by record kind
    late: int = 0  # frames that were missing and arrived after all (never lost, not applied)
    restarts: int = 0  # a publisher restarted under the same id
    missing: int = 0  # frames missing after this window (may still come late; not yet lost)


@dataclass(eq=False)
class _Tally:
    """What a window's sequence accounting adds up to."""

    applied: int = 0
    lost: int = 0
    late: int = 0
    restarts: int = 0
    changes: int = 0

    def add(self, advance: Advance, applied: int) -> None:
        self.applied += applied
        self.lost += advance.lost
        self.late += advance.late
        self.restarts += advance.restarts
        self.changes += advance.changes


@dataclass(eq=False)
class _Window:
    """The node frames of a window, joined: one entry per node frame, records by kind."""

    node: I64
    seq: npt.NDArray[np.uint64]
    tick: npt.NDArray[np.uint64]
    t_s: F64
    rx_s: F64
    rx_wall_s: F64
    publisher: I64
    want_site: I64  # the site the topic names (-1: no topic)
    want_node: I64  # the node a node topic names (-1: a batch or no topic)
    counts: dict[str, I64]
    columns: dict[str, dict[str, npt.NDArray[Any]]]
    known: dict[str, npt.NDArray[np.uint16] | int]
    # Kinds whose records are every frame's whole complement, in id order (set by the checks).
    complete: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        return int(self.node.size)


def _saved(arrays: dict[str, npt.NDArray[Any]], name: str, dtype: Any, size: int | None = None) -> npt.NDArray[Any]:
    """Return the 1-d array ``name`` of a checkpoint; raises ValueError unless it is there with that dtype."""
    array = arrays.get(name)
    if array is None or array.dtype != dtype or array.ndim != 1 or (size is not None and array.size != size):
        raise ValueError(f"{name}: missing, or not a 1-d {np.dtype(dtype)} array{f' of {size}' if size else ''}")
    return array


class Ingest:
    """Turns windows of frames into in-place updates of a FleetState."""

    def __init__(
        self, state: FleetState, stats: IngestStats, *, max_frame_bytes: int = 1 << 20,
        max_clock_skew_s: float = 300.0, max_seq_jump: int = 100_000,
    ) -> None:
        self.state = state
        self.stats = stats
        self.max_frame_bytes = max_frame_bytes
        self.max_clock_skew_s = max_clock_skew_s
        topo = state.topology
        # One sequence stream per node (and per site's facility frames).
        self._nodes = Streams(topo.n_nodes, max_jump=max_seq_jump)
        self._sites = Streams(topo.n_sites, max_jump=max_seq_jump)
        self._publishers: dict[str, int] = {}
        # The window's joined columns live here from one window to the next.
        self._scratch = Scratch()
        self._apply_scratch = Scratch()

    # -- decoding ---------------------------------------------------------------

    def admit(self, messages: Sequence[Message]) -> FlushResult:
        """Decode ``messages`` and apply their frames; decode failures count as rejections."""
        received: list[Received] = []
        rejected: Counter[str] = Counter()
        frames: Counter[str] = Counter()
        for message in messages:
            address = parse_topic(message.topic)
            if address is None:
                rejected["bad_topic"] += 1
                continue
            try:
                frame, encoding = decode_frame(message.payload, max_bytes=self.max_frame_bytes, check_finite=False)
            except FrameError as exc:
                rejected[exc.reason] += 1
                continue
            frames[encoding] += frame.n_nodes if isinstance(frame, NodeBatch) else 1
            received.append(Received(message.rx_s, address, frame, message.rx_wall_s))
        result = self.apply(received)
        result.rejected.update(rejected)
        result.frames.update(frames)
        return result

    # -- admission --------------------------------------------------------------

    def apply(self, items: Iterable[Received]) -> FlushResult:
        """Check every frame of a window, then apply the good ones; safe to run off the event loop.

        It touches the state and the sequence streams, nothing else; ``record``
        adds the result to the stats on the thread that owns them.
        """
        rejected: Counter[str] = Counter()
        nodes: list[tuple[Received, NodeBatch]] = []
        sites: list[Received] = []
        # Between windows, never inside one: a window's frames hold publisher numbers until it is applied.
        if len(self._publishers) > 4 * (self.state.topology.n_nodes + self.state.topology.n_sites) + 1_024:
            self._compact_publishers()
        for item in items:
            if isinstance(item.frame, FacilityFrame):
                sites.append(item)
            elif (reason := self._topic_check(item)) is not None:
                rejected[reason] += item.frame.n_nodes if isinstance(item.frame, NodeBatch) else 1
            else:
                frame = item.frame
                nodes.append((item, frame if isinstance(frame, NodeBatch) else _as_batch(frame)))
        samples: Counter[str] = Counter()
        tally = _Tally()
        applied_t_s, receive_lag_s = self._apply_nodes(nodes, rejected, samples, tally)
        samples["facility"] += self._apply_sites(sites, rejected, tally)
        return FlushResult(tally.applied, rejected, tally.lost, tally.changes, self.state.latest_tick, Counter(),
                           applied_t_s, receive_lag_s, samples, tally.late, tally.restarts, self.missing())

    def missing(self) -> int:
        """Return how many frames are missing now and may still arrive late (not yet counted lost)."""
        return self._nodes.missing_count() + self._sites.missing_count()

    def record(self, result: FlushResult) -> None:
        """Add a window's result to the cumulative stats."""
        stats = self.stats
        stats.frames_applied += result.applied
        stats.frames_lost += result.lost
        stats.frames_late += result.late
        stats.frames_missing = result.missing
        stats.publisher_changes += result.publisher_changes
        stats.publisher_restarts += result.restarts
        stats.rejected.update(result.rejected)
        stats.frames.update(result.frames)
        stats.samples_applied.update(result.samples)

    def _topic_check(self, item: Received) -> str | None:
        address, frame, topo = item.address, item.frame, self.state.topology
        if address is None:
            return None
        if isinstance(frame, NodeBatch):
            return None if address.kind == "batch" and address.site == frame.site else "topic_mismatch"
        assert isinstance(frame, NodeFrame)
        if address.kind != "node":
            return "topic_mismatch"
        if frame.node >= topo.n_nodes or not topo.node_present[frame.node]:
            return "unknown_node"
        if topo.node_path(frame.node) != (address.site, address.ultraserver, address.node):
            return "topic_mismatch"
        return None

    # -- checkpoint --------------------------------------------------------------

    def checkpoint(self) -> dict[str, npt.NDArray[Any]]:
        """Return the sequence accounting as arrays: every stream, the publisher table and the counters.

        Restored by a later monitor, its first frame of each stream is judged
        against the last one applied before: frames published while no monitor
        listened are counted lost, exactly once.  The counters travel with the
        streams, so a checkpoint is consistent whenever it was taken: frames
        applied after it are in neither, and count as lost after a restore.
        """
        names = [name.encode() for name in sorted(self._publishers, key=self._publishers.__getitem__)]
        counters = [self.stats.frames_applied, self.stats.frames_lost, self.stats.frames_late,
                    self.stats.publisher_changes, self.stats.publisher_restarts]
        arrays = {f"nodes.{k}": v for k, v in self._nodes.arrays().items()}
        arrays |= {f"sites.{k}": v for k, v in self._sites.arrays().items()}
        # UTF-8 bytes and their lengths: a numpy string array would drop a publisher id's trailing NULs.
        arrays["publishers.utf8"] = np.frombuffer(b"".join(names), np.uint8).copy()
        arrays["publishers.len"] = np.array([len(name) for name in names], np.int64)
        arrays["counters"] = np.array([min(c, 2**63 - 1) for c in counters], np.int64)
        return arrays

    def restore(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Continue from ``checkpoint()``'s arrays.

        All or nothing: everything is checked and built aside first, so arrays
        that do not fit raise ValueError and change nothing.
        """
        nodes = Streams(self._nodes.publisher.size, max_jump=int(self._nodes.max_jump))
        sites = Streams(self._sites.publisher.size, max_jump=int(self._sites.max_jump))
        nodes.restore({k.removeprefix("nodes."): v for k, v in arrays.items() if k.startswith("nodes.")})
        sites.restore({k.removeprefix("sites."): v for k, v in arrays.items() if k.startswith("sites.")})
        utf8 = _saved(arrays, "publishers.utf8", np.uint8)
        lengths = _saved(arrays, "publishers.len", np.int64)
        counters = _saved(arrays, "counters", np.int64, size=5)
        if (lengths < 0).any() or int(lengths.sum()) != utf8.size or (counters < 0).any():
            raise ValueError("the publisher table or the counters are inconsistent")
        blob, names, at = utf8.tobytes(), [], 0
        for length in lengths.tolist():
            try:
                names.append(blob[at:at + length].decode())
            except UnicodeDecodeError:
                raise ValueError("a publisher id is not UTF-8") from None
            at += length
        if len(set(names)) != len(names):
            raise ValueError("a publisher id is listed twice")
        for streams in (nodes, sites):
            if streams.publisher.size and (streams.publisher.min() < -1 or streams.publisher.max() >= len(names)):
                raise ValueError(f"a stream names a publisher outside the table of {len(names)}")
        self._nodes, self._sites = nodes, sites
        self._publishers = {name: index for index, name in enumerate(names)}
        stats = self.stats
        (stats.frames_applied, stats.frames_lost, stats.frames_late, stats.publisher_changes,
         stats.publisher_restarts) = (int(c) for c in counters.tolist())
        stats.frames_missing = nodes.missing_count() + sites.missing_count()

    def _publisher(self, name: str) -> int:
        index = self._publishers.get(name)
        if index is None:
            index = self._publishers[name] = len(self._publishers)
        return index

    def _compact_publishers(self) -> None:
        """Forget publisher names no stream uses any more (bounds memory against id churn)."""
        live = np.unique(np.concatenate([self._nodes.publisher, self._sites.publisher]))
        live = live[live >= 0]
        names = {index: name for name, index in self._publishers.items()}
        remap = np.full(len(self._publishers) + 1, -1, np.int64)
        remap[live] = np.arange(live.size)
        self._publishers = {names[int(old)]: new for new, old in enumerate(live.tolist())}
        self._nodes.remap_publishers(remap)
        self._sites.remap_publishers(remap)

    def _join(self, parts: list[tuple[Received, NodeBatch]]) -> _Window:
        """Join the node frames of a window column by column (one copy of each column)."""

        def cat(arrays: list[npt.NDArray[Any]], dtype: Any, key: str) -> npt.NDArray[Any]:
            out = self._scratch.get(key, sum(a.size for a in arrays), dtype)
            if arrays:
                np.concatenate(arrays, out=out, casting="same_kind")
            return out

        sizes = [batch.n_nodes for _, batch in parts]

        def per_part(values: list[int] | list[float], dtype: Any) -> npt.NDArray[Any]:
            return np.repeat(np.asarray(values, dtype=dtype), sizes)

        want_node = []
        for item, _ in parts:
            address = item.address
            if isinstance(item.frame, NodeFrame) and address is not None:
                want_node.append(address.node)
            else:
                want_node.append(-1)
        columns: dict[str, dict[str, npt.NDArray[Any]]] = {}
        known: dict[str, npt.NDArray[np.uint16] | int] = {}
        counts = {kind: cat([b.counts[kind] for _, b in parts], np.int64, f"count.{kind}") for kind in RECORD_KINDS}
        for kind in RECORD_KINDS:
            have = [sum(1 << i for i, name in enumerate(_COLUMNS[kind]) if name in b.columns[kind]) for _, b in parts]
            columns[kind] = {}
            for name, dtype in _COLUMNS[kind].items():
                pieces = [batch.columns[kind].get(name) for _, batch in parts]
                if any(piece is None for piece in pieces):
                    pieces = [np.zeros(int(batch.counts[kind].sum()), dtype) if piece is None else piece
                              for piece, (_, batch) in zip(pieces, parts, strict=True)]
                columns[kind][name] = cat(pieces, dtype, f"{kind}.{name}")  # type: ignore[arg-type]
            full = _ALL_FIELDS[kind]
            per_record = [b.known.get(kind) if b.known else None for _, b in parts]
            if all(h == full for h in have) and all(r is None for r in per_record):
                known[kind] = full
            else:
                masks: list[npt.NDArray[Any]] = [
                    np.full(int(b.counts[kind].sum()), h, np.uint16) if r is None else (r & np.uint16(h))
                    for (_, b), h, r in zip(parts, have, per_record, strict=True)
                ]
                known[kind] = cat(masks, np.uint16, f"known.{kind}")
        return _Window(
            node=cat([b.node for _, b in parts], np.int64, "node"),
            seq=cat([b.node_seq for _, b in parts], np.uint64, "seq"),
            tick=cat([b.node_tick for _, b in parts], np.uint64, "tick"),
            t_s=cat([b.node_t_s for _, b in parts], np.float64, "t_s"),
            rx_s=per_part([item.rx_s for item, _ in parts], np.float64),
            rx_wall_s=per_part([item.rx_wall_s for item, _ in parts], np.float64),
            publisher=per_part([self._publisher(b.publisher) for _, b in parts], np.int64),
            want_site=per_part([item.address.site if item.address is not None else -1 for item, _ in parts],
                               np.int64),
            want_node=per_part(want_node, np.int64),
            counts=counts, columns=columns, known=known,
        )

    def _check(self, w: _Window) -> dict[str, B]:
        """Return, per reason, which frames of the window fail it (before anything changes)."""
        topo = self.state.topology
        n = w.size
        reasons = {reason: np.zeros(n, dtype=bool) for reason in FRAME_REASONS}
        outside = w.node >= topo.n_nodes
        node = np.where(outside, 0, w.node)
        reasons["unknown_node"] = outside | ~topo.node_present[node]  # beyond the fleet, or not in the inventory
        reasons["topic_mismatch"] = ((w.want_site >= 0) & (topo.node_site[node] != w.want_site)) | (
            (w.want_node >= 0) & (node != w.want_node))
        reasons["non_finite"] = ~np.isfinite(w.t_s)
        # A sample time this far from the monitor's clock at receipt is not
        # believed: a clock that far off would misdate every rate and lag.
        with np.errstate(invalid="ignore"):
            reasons["clock_skew"] = (np.abs(w.rx_wall_s - w.t_s) > self.max_clock_skew_s) | (
                np.abs(w.t_s) > _LATEST_PLAUSIBLE_S)
        per_node = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node}
        owners = {"chips": topo.chip_node, "links": topo.link_node, "efa": topo.efa_node}
        for kind in RECORD_KINDS:
            counts = w.counts[kind]
            if not counts.any():
                continue
            frame_of: I64 | None = None
            for name in _FLOATS[kind]:
                finite = np.isfinite(w.columns[kind][name])
                if not finite.all():
                    frame_of = np.repeat(np.arange(n), counts) if frame_of is None else frame_of
                    reasons["non_finite"][frame_of[~finite]] = True
            id_field = ID_FIELDS[kind]
            if id_field is None:
                continue
            per = per_node[kind]
            if bool((counts == per).all()):
                # The usual frame carries its node's whole complement in id
                # order: one comparison proves every id owned and none twice.
                local = w.columns[kind][id_field].reshape(n, per) - (node * per)[:, None]
                if bool((local == np.arange(per)).all()):
                    w.complete.add(kind)
                    continue
            frame_of = np.repeat(np.arange(n), counts) if frame_of is None else frame_of
            ids = w.columns[kind][id_field].astype(np.int64)
            owner = owners[kind]
            known = ids < owner.size
            mine = node[frame_of]
            wrong = ~known
            wrong[known] = owner[ids[known]] != mine[known]
            reasons["unknown_id"][frame_of[wrong]] = True
            # Ids of a node are one contiguous range, so (frame, id - base) is
            # dense: an id listed twice in one frame shows as a count of 2.
            owned = ~wrong
            key = frame_of[owned] * per + (ids[owned] - mine[owned] * per)
            twice = np.bincount(key, minlength=n * per)[key] > 1
            reasons["duplicate_id"][frame_of[owned][twice]] = True
        return reasons

    def _apply_nodes(
        self, parts: list[tuple[Received, NodeBatch]], rejected: Counter[str], samples: Counter[str], tally: _Tally,
    ) -> tuple[F64, F64]:
        if not parts:
            return np.zeros(0), np.zeros(0)
        w = self._join(parts)
        bad = np.zeros(w.size, dtype=bool)
        for reason, flagged in self._check(w).items():  # one reason per frame, in this order
            newly = flagged & ~bad
            if newly.any():
                rejected[reason] += int(newly.sum())
                bad |= newly
        good = np.flatnonzero(~bad)
        # Generation g holds each node's (g+1)-th good frame of the window, in arrival order.
        by_node = good[np.argsort(w.node[good], kind="stable")]
        nodes_sorted = w.node[by_node]
        first = np.ones(by_node.size, dtype=bool)
        first[1:] = nodes_sorted[1:] != nodes_sorted[:-1]
        generation = np.arange(by_node.size) - np.maximum.accumulate(np.where(first, np.arange(by_node.size), 0))
        applied_t_s, receive_lag_s, applied = [], [], []
        for g in range(int(generation.max(initial=-1)) + 1):
            frames = np.sort(by_node[generation == g])
            advance = self._nodes.advance(w.node[frames], w.publisher[frames], w.seq[frames], w.t_s[frames])
            if advance.stale:
                rejected["stale_seq"] += advance.stale
            if advance.jumps:
                rejected["seq_jump"] += advance.jumps
            rebased = advance.rebased[advance.keep]
            frames = frames[advance.keep]
            self._scatter(w, frames, samples)
            if rebased.any():
                self._forget_rates(w.node[frames[rebased]].astype(np.int64))
            tally.add(advance, int(frames.size))
            applied_t_s.append(w.t_s[frames])
            receive_lag_s.append(w.rx_wall_s[frames] - w.t_s[frames])
            applied.append(frames)
        if not applied_t_s:
            return np.zeros(0), np.zeros(0)
        # "Latest" is the window's median sample, not its newest sample nor its largest tick: a publisher's
        # tick is only its own count (one absurd tick would pin the gauge), and one node whose clock runs
        # minutes fast (within max_clock_skew_s) would otherwise hold the lag gauge negative for good.
        chosen = np.concatenate(applied)
        if chosen.size:
            times = w.t_s[chosen]
            at = int(np.argpartition(times, times.size // 2)[times.size // 2])
            self.state.latest_t_s = float(times[at])
            self.state.latest_tick = min(int(w.tick[chosen][at]), _MAX_TICK)
        lags = np.concatenate(receive_lag_s)
        return np.concatenate(applied_t_s), lags[np.isfinite(lags)]

    def _forget_rates(self, nodes: I64) -> None:
        """Make the counter rates of ``nodes``' entities unknown: their publisher counts from a new start."""
        topo = self.state.topology
        per_node = {"chips": topo.chips_per_node, "links": topo.links_per_node, "efa": topo.efa_ports_per_node,
                    "cooling": 1}
        for kind, table in self.state.tables().items():
            per = per_node[kind]
            table.forget_rates((nodes[:, None] * per + np.arange(per)).ravel())

    def _scatter(self, w: _Window, frames: I64, samples: Counter[str]) -> None:
        """Store the records of ``frames`` (good, one per node) in the state tables."""
        if not frames.size:
            return
        tables = self.state.tables()
        everything = frames.size == w.size
        # Consecutive ascending nodes (an aggregator's batches, in order), or the same nodes in another order:
        # the simulator's batches hold one topic bucket each (every 256th UltraServer of a site), so a whole
        # fleet's window is a permutation of one run.  Its records are put in node order once, column by column,
        # and stored through slices: at rainier, indexing 1.5M links' counters by id array instead (a gather
        # and two scatters a column) cost ~0.1 s a tick.
        run = everything and bool(w.size) and int(w.node[-1]) - int(w.node[0]) == w.size - 1 and bool(
            (np.diff(w.node) == 1).all())
        order: I64 | None = None
        if everything and not run and w.size > 1 and int(w.node.max()) - int(w.node.min()) == w.size - 1:
            order = np.argsort(w.node)  # unique nodes (one generation) spanning exactly w.size ids
        if not everything:
            chosen = np.zeros(w.size, dtype=bool)
            chosen[frames] = True
        for kind in RECORD_KINDS:
            counts = w.counts[kind]
            columns = w.columns[kind]
            known = w.known[kind]
            id_field = ID_FIELDS[kind]
            table: Table = tables[kind]
            if everything and kind in w.complete and (run or order is not None):
                # The usual window: consecutive nodes, each with its whole
                # complement in order, so the records are one run of ids.
                per = int(counts[0])
                first = int(w.node.min()) * per
                t_s, rx_s = w.t_s, w.rx_s
                if order is not None:
                    columns = {name: self._in_order(values, per, order, f"{kind}.{name}")
                               for name, values in columns.items()}
                    if not isinstance(known, int):
                        known = self._in_order(known, per, order, f"known.{kind}")
                    t_s, rx_s = t_s[order], rx_s[order]
                table.apply(slice(first, first + w.size * per), columns, t_s=t_s, rx_s=rx_s, known=known,
                            scratch=self._apply_scratch, per_frame=per)
                samples[kind] += w.size * per
                continue
            if everything:
                if not counts.any():
                    continue
                ids = columns[id_field].astype(np.int64) if id_field else np.repeat(w.node, counts)
                t_s, rx_s = np.repeat(w.t_s, counts), np.repeat(w.rx_s, counts)
            else:
                frame_of = np.repeat(np.arange(w.size), counts)
                take = chosen[frame_of]
                if not take.any():
                    continue
                frame_of = frame_of[take]
                columns = {name: values[take] for name, values in columns.items()}
                if not isinstance(known, int):
                    known = known[take]
                ids = columns[id_field].astype(np.int64) if id_field else w.node[frame_of]
                t_s, rx_s = w.t_s[frame_of], w.rx_s[frame_of]
            table.apply(ids, columns, t_s=t_s, rx_s=rx_s, known=known, scratch=self._apply_scratch)
            samples[kind] += int(ids.size)

    def _in_order(self, values: npt.NDArray[Any], per: int, order: I64, key: str) -> npt.NDArray[Any]:
        """Return ``values`` (``per`` records a frame) with its frames in ``order``, in a reused buffer."""
        out = self._scratch.get(f"ordered.{key}", values.size, values.dtype)
        np.take(values.reshape(-1, per), order, axis=0, out=out.reshape(-1, per))
        return out

    def _apply_sites(self, items: list[Received], rejected: Counter[str], tally: _Tally) -> int:
        """Check and apply facility frames (a handful a window)."""
        topo = self.state.topology
        good: list[Received] = []
        for item in items:
            frame = item.frame
            assert isinstance(frame, FacilityFrame)
            address = item.address
            if frame.site >= topo.n_sites:
                rejected["unknown_node"] += 1
            elif address is not None and (not address.is_facility or address.site != frame.site):
                rejected["topic_mismatch"] += 1
            elif len(frame.facility) != 1:
                rejected["bad_header"] += 1
            elif not all(np.isfinite(frame.facility[name]).all() for name in float_fields(FACILITY_DTYPE)):
                rejected["non_finite"] += 1
            elif abs(frame.t_s) > _LATEST_PLAUSIBLE_S or abs(item.rx_wall_s - frame.t_s) > self.max_clock_skew_s:
                rejected["clock_skew"] += 1
            else:
                good.append(item)
        applied = 0
        for item in good:  # one at a time: a handful of sites, and a site may repeat in a window
            frame = item.frame
            assert isinstance(frame, FacilityFrame)
            site = np.array([frame.site], np.int64)
            advance = self._sites.advance(
                site, np.array([self._publisher(frame.publisher)], np.int64), np.array([frame.seq], np.uint64),
                np.array([frame.t_s]),
            )
            tally.add(advance, int(advance.keep.sum()))
            if advance.stale:
                rejected["stale_seq"] += 1
            if advance.jumps:
                rejected["seq_jump"] += 1
            if not advance.keep.all():
                continue
            record = frame.facility
            self.state.facility.apply(
                site, {name: record[name] for name in record.dtype.names or ()},
                t_s=np.array([frame.t_s]), rx_s=np.array([item.rx_s]), known=(1 << len(record.dtype.names or ())) - 1,
            )
            if advance.rebased.any():
                self.state.facility.forget_rates(site)
            applied += 1
        return applied


def _as_batch(frame: NodeFrame) -> NodeBatch:
    """Return a node frame as a batch of one (its record fields as columns)."""
    records = {"chips": frame.chips, "links": frame.links, "efa": frame.efa, "cooling": frame.cooling}
    return NodeBatch(
        frame.publisher, frame.seq, frame.tick, frame.t_s, -1,
        np.array([frame.node], np.uint32), np.array([frame.seq], np.uint64), np.array([frame.tick], np.uint64),
        np.array([frame.t_s], np.float64),
        {kind: np.array([len(records[kind])], np.uint16) for kind in RECORD_KINDS},
        {kind: {name: records[kind][name] for name in _COLUMNS[kind]} for kind in RECORD_KINDS},
        known=frame.known,
    )
