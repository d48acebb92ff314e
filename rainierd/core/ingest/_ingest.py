"""``Ingest``: one window's way through the seams, in order: decode, join
(``_window``), judge (``_rules``), account (``_accounting``), store
(``_store``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64
from rainierd.core.ingest._accounting import Accounting, IngestStats, Tally
from rainierd.core.ingest._rules import Family, judge
from rainierd.core.ingest._store import Store
from rainierd.core.ingest._values import FlushResult, Message, Received
from rainierd.core.ingest._window import counted, join_nodes, join_sites
from rainierd.core.state import FleetState, Scratch
from rainierd.core.streams import Advance
from rainierd.errors import FrameError
from rainierd.wire import FacilityFrame, NodeBatch, RawBatch, decode_frame, parse_topic

_MAX_TICK: Final = 2**63 - 1  # ticks are u64 on the wire; what the monitor keeps is an int64


@dataclass(frozen=True, eq=False)
class _Lags:
    """The applied node frames' sample times and receive lags, for the load judgement and the lag gauges."""

    applied_t_s: F64 = field(default_factory=lambda: np.zeros(0))
    receive_lag_s: F64 = field(default_factory=lambda: np.zeros(0))
    excess_s: F64 = field(default_factory=lambda: np.zeros(0))  # lag above each frame's own stream's floor
    entity: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # each excess's node
    streams: int = 0  # nodes with a frame that passed the rules in the window


def _count_refusals(advance: Advance, rejected: Counter[str]) -> None:
    """Count what the sequence accounting refused, by reason (docs/wire-format.md)."""
    for reason, count in (("stale_seq", advance.stale), ("seq_jump", advance.jumps),
                          ("time_jump", advance.time_jumps), ("publisher_unconfirmed", advance.unconfirmed)):
        if count:
            rejected[reason] += count


class Ingest:
    """Turns windows of frames into in-place updates of a FleetState."""

    def __init__(
        self, state: FleetState, stats: IngestStats, *, max_frame_bytes: int = 1 << 20,
        max_clock_skew_s: float = 300.0, max_seq_jump: int = 100_000, tick_s: float = 1.0,
    ) -> None:
        self.state = state
        self.stats = stats
        self.max_frame_bytes = max_frame_bytes
        self.max_clock_skew_s = max_clock_skew_s
        topo = state.topology
        self.accounting = Accounting(topo.n_nodes, topo.n_sites, stats, max_seq_jump=max_seq_jump, tick_s=tick_s)
        self._families = {"nodes": Family.nodes(topo), "sites": Family.sites(topo)}
        self._store = Store(state)
        # The window's joined columns live here from one window to the next.
        self._scratch = Scratch()

    # -- decoding ---------------------------------------------------------------

    def admit(self, messages: Sequence[Message], *, now_s: float | None = None) -> FlushResult:
        """Decode ``messages`` and apply their frames; decode failures count as rejections.

        A batch frame's columns are not decoded here: the window join reads
        them straight from the payloads (``_window``).
        """
        received: list[Received] = []
        rejected: Counter[str] = Counter()
        frames: Counter[str] = Counter()
        for message in messages:
            address = parse_topic(message.topic)
            if address is None:
                rejected["bad_topic"] += 1
                continue
            try:
                frame, encoding = decode_frame(message.payload, max_bytes=self.max_frame_bytes, check_finite=False,
                                               columns=False)
            except FrameError as exc:
                rejected[exc.reason] += 1
                continue
            if not isinstance(frame, RawBatch):  # a raw batch's frames count once its per-node counts are checked
                frames[encoding] += frame.n_nodes if isinstance(frame, NodeBatch) else 1
            received.append(Received(message.rx_s, address, frame, message.rx_wall_s, message.shed))
        result = self.apply(received, now_s=now_s)
        result.rejected.update(rejected)
        result.frames.update(frames)
        return result

    # -- admission --------------------------------------------------------------

    def apply(self, items: Iterable[Received], *, now_s: float | None = None) -> FlushResult:
        """Check every frame of a window, then apply the good ones; safe to run off the event loop.

        ``now_s``, the listening clock the items' ``rx_s`` are on: then the
        frames still missing from streams silent for the late window are
        counted lost (``Streams.expire``), so a publisher that stopped leaves
        nothing missing for ever.

        It touches the state and the sequence streams, nothing else; ``record``
        adds the result to the stats on the thread that owns them.
        """
        topo = self.state.topology
        self.accounting.compact(above=4 * (topo.n_nodes + topo.n_sites) + 1_024)
        nodes: list[Received] = []
        sites: list[Received] = []
        for item in items:
            (sites if isinstance(item.frame, FacilityFrame) else nodes).append(item)
        rejected: Counter[str] = Counter()
        samples: Counter[str] = Counter()
        refused: Counter[tuple[str, str, str]] = Counter()
        tally = Tally()
        nodes, bad = counted(nodes, self._scratch)
        if bad:
            rejected["bad_header"] += bad  # a message refused whole, as if its decoding had failed
        frames = Counter({"binary": sum(item.frame.n_nodes for item in nodes if isinstance(item.frame, RawBatch))})
        lags = self._apply_nodes(nodes, rejected, samples, refused, tally)
        samples["facility"] += self._apply_sites(sites, rejected, refused, tally)
        if now_s is not None:
            tally.lost += self.accounting.expire(now_s)
        return FlushResult(tally.applied, rejected, tally.lost, tally.changes, self.state.latest_tick, +frames,
                           lags.applied_t_s, lags.receive_lag_s, samples, tally.late, tally.restarts, self.missing(),
                           receive_excess_s=lags.excess_s, receive_entity=lags.entity, streams_heard=lags.streams,
                           refused=refused)

    def missing(self) -> int:
        """Return how many frames are missing now and may still arrive late (not yet counted lost)."""
        return self.accounting.missing()

    def record(self, result: FlushResult) -> None:
        """Add a window's result to the cumulative stats (``Accounting.record``)."""
        self.accounting.record(result)

    def checkpoint(self) -> dict[str, npt.NDArray[Any]]:
        """Return the sequence accounting as named arrays (``Accounting.checkpoint``)."""
        return self.accounting.checkpoint()

    def restore(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Continue from ``checkpoint()``'s arrays; raises ValueError, changing nothing, if they do not fit."""
        self.accounting.restore(arrays)

    def _apply_nodes(
        self, items: list[Received], rejected: Counter[str], samples: Counter[str],
        refused: Counter[tuple[str, str, str]], tally: Tally,
    ) -> _Lags:
        if not items:
            return _Lags()
        w = join_nodes(items, self._scratch)
        good = np.flatnonzero(judge(w, self._families["nodes"], max_clock_skew_s=self.max_clock_skew_s,
                                    rejected=rejected))
        # Publisher ids are numbered only once a frame of theirs has passed every rule.
        numbered = np.full(len(w.publishers), -1, np.int64)
        for slot in np.unique(w.publisher[good]).tolist():
            numbered[slot] = self.accounting.publisher(w.publishers[slot])
        publisher = numbered[w.publisher]
        # Generation g holds each node's (g+1)-th good frame of the window, in arrival order.
        by_node = good[np.argsort(w.entity[good], kind="stable")]
        nodes_sorted = w.entity[by_node]
        first = np.ones(by_node.size, dtype=bool)
        first[1:] = nodes_sorted[1:] != nodes_sorted[:-1]
        generation = np.arange(by_node.size) - np.maximum.accumulate(np.where(first, np.arange(by_node.size), 0))
        applied_t_s, receive_lag_s, excess_s, applied = [], [], [], []
        streams = self.accounting.nodes
        for g in range(int(generation.max(initial=-1)) + 1):
            frames = np.sort(by_node[generation == g])
            advance = streams.advance(w.entity[frames], publisher[frames], w.seq[frames], w.t_s[frames],
                                      rx_s=w.rx_s[frames], wall_s=w.rx_wall_s[frames], shed=w.shed[frames])
            _count_refusals(advance, rejected)
            excess_s.append(advance.excess_lag_s[advance.keep])
            rebased = advance.rebased[advance.keep]
            interval_s = advance.interval_s[advance.keep]
            frames = frames[advance.keep]
            self._store.nodes(w, frames, samples, refused)
            self.state.node_cadence.observe(w.entity[frames], interval_s, w.period_s[frames])
            if rebased.any():
                self._store.forget_rates(w.entity[frames[rebased]].astype(np.int64))
            tally.add(advance, int(frames.size))
            applied_t_s.append(w.t_s[frames])
            receive_lag_s.append(w.rx_wall_s[frames] - w.t_s[frames])
            applied.append(frames)
        if not applied_t_s:
            return _Lags()
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
        excess = np.concatenate(excess_s)
        known = np.isfinite(excess)
        return _Lags(np.concatenate(applied_t_s), lags[np.isfinite(lags)], excess[known], w.entity[chosen][known],
                     int(first.sum()))

    def _apply_sites(
        self, items: list[Received], rejected: Counter[str], refused: Counter[tuple[str, str, str]], tally: Tally,
    ) -> int:
        """Check and apply facility frames (a handful a window); return how many were applied."""
        if not items:
            return 0
        good = judge(join_sites(items), self._families["sites"], max_clock_skew_s=self.max_clock_skew_s,
                     rejected=rejected)
        applied = 0
        streams = self.accounting.sites
        for item in (item for item, ok in zip(items, good.tolist(), strict=True) if ok):
            # One at a time: a handful of sites, and a site may repeat in a window.
            frame = item.frame
            assert isinstance(frame, FacilityFrame)
            advance = streams.advance(
                np.array([frame.site], np.int64), np.array([self.accounting.publisher(frame.publisher)], np.int64),
                np.array([frame.seq], np.uint64), np.array([frame.t_s]),
                rx_s=np.array([item.rx_s]), wall_s=np.array([item.rx_wall_s]),
            )
            tally.add(advance, int(advance.keep.sum()))
            _count_refusals(advance, rejected)
            if not advance.keep.all():
                continue
            self._store.site(frame, item.rx_s, rebased=bool(advance.rebased.any()), refused=refused)
            self.state.site_cadence.observe(np.array([frame.site], np.int64), advance.interval_s,
                                            np.full(1, np.nan))
            applied += 1
        return applied
