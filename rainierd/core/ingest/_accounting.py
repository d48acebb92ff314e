"""Sequence accounting: one stream per node and per site (``core/streams.py``),
the table of publisher ids they name, the cumulative ``IngestStats``, and the
checkpoint that carries all three across a monitor restart.

``IngestStats`` has one writer in the core: ``Accounting.record`` adds a
window's result on the thread that owns the stats, and ``Accounting.restore``
takes a checkpoint's counters.  (``messages``, ``bytes`` and the refusals
before decoding, ``oversize``, ``retained``, the shares' and a broken header's,
are the receiving edge's, counted before a payload reaches ingest.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd.core.ingest._values import FlushResult
from rainierd.core.streams import Advance, Streams

COUNTERS: Final = ("frames_applied", "frames_lost", "frames_late", "publisher_changes", "publisher_restarts")
"""The stats a checkpoint carries, each as its own array ``counters.<name>``."""
_MAX_COUNT: Final = 2**63 - 1


@dataclass(eq=False)
class IngestStats:
    """Cumulative counters of what became of the frames the monitor received, exported as rainier_ingest_*.

    Written only here, by ``Accounting.record`` and ``Accounting.restore``;
    what reached the inbox (payloads, bytes, refusals before decoding) the monitor's
    inbox counts itself (``monitor.snapshot.Receipts``).
    """

    frames: Counter[str] = field(default_factory=Counter)  # frames decoded (a batch carries many), by encoding
    rejected: Counter[str] = field(default_factory=Counter)  # by reason
    frames_lost: int = 0  # missing for longer than the late window: certainly lost
    frames_late: int = 0  # were missing, then arrived within the window (never counted lost)
    frames_missing: int = 0  # missing now: may still arrive late (a gauge)
    publisher_changes: int = 0
    publisher_restarts: int = 0
    frames_applied: int = 0
    samples_applied: Counter[str] = field(default_factory=Counter)  # entity samples, by record kind
    # Counters of applied samples refused over their bounds (core/bounds.py), by (kind, field, reason).
    counters_refused: Counter[tuple[str, str, str]] = field(default_factory=Counter)


@dataclass(eq=False)
class Tally:
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


def _saved(arrays: dict[str, npt.NDArray[Any]], name: str, dtype: Any, *, ndim: int = 1) -> npt.NDArray[Any]:
    """Return the array ``name`` of a checkpoint; raises ValueError unless it is there with that dtype and rank."""
    array = arrays.get(name)
    if array is None or array.dtype != dtype or array.ndim != ndim:
        raise ValueError(f"{name}: missing, or not a {ndim}-d {np.dtype(dtype)} array")
    return array


class Accounting:
    """The node and site streams, the publisher table, and the stats they add up to."""

    def __init__(self, n_nodes: int, n_sites: int, stats: IngestStats, *, max_seq_jump: int,
                 tick_s: float = 1.0) -> None:
        self.stats = stats
        self.nodes = Streams(n_nodes, max_jump=max_seq_jump, tick_s=tick_s)
        self.sites = Streams(n_sites, max_jump=max_seq_jump, tick_s=tick_s)
        self._publishers: dict[str, int] = {}

    def publisher(self, name: str) -> int:
        """Return the number of publisher id ``name``, numbering it if it is new."""
        index = self._publishers.get(name)
        if index is None:
            index = self._publishers[name] = len(self._publishers)
        return index

    @property
    def publisher_count(self) -> int:
        """Return how many publisher ids are numbered."""
        return len(self._publishers)

    def publisher_names(self) -> list[str]:
        """Return the publisher ids by number (``[i]`` is publisher ``i``, as the streams name it)."""
        names = [""] * len(self._publishers)
        for name, index in self._publishers.items():
            names[index] = name
        return names

    def compact(self, *, above: int) -> None:
        """Forget publisher ids no stream names any more, once there are more than ``above`` (id churn).

        Between windows, never inside one: a window's frames hold publisher numbers until it is applied.
        """
        if len(self._publishers) <= above:
            return
        live = np.unique(np.concatenate([self.nodes.publisher, self.sites.publisher]))
        live = live[live >= 0]
        names = {index: name for name, index in self._publishers.items()}
        remap = np.full(len(self._publishers) + 1, -1, np.int64)
        remap[live] = np.arange(live.size)
        self._publishers = {names[int(old)]: new for new, old in enumerate(live.tolist())}
        self.nodes.remap_publishers(remap)
        self.sites.remap_publishers(remap)

    def missing(self) -> int:
        """Return how many frames are missing now and may still arrive late (not yet counted lost)."""
        return self.nodes.missing_count() + self.sites.missing_count()

    def expire(self, rx_now_s: float) -> int:
        """Count lost what silent streams still miss (``Streams.expire``); return how many."""
        return self.nodes.expire(rx_now_s) + self.sites.expire(rx_now_s)

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
        stats.counters_refused.update(result.refused)

    def checkpoint(self) -> dict[str, npt.NDArray[Any]]:
        """Return the accounting as named arrays: every stream, the publisher table and each counter.

        Restored by a later monitor, its first frame of each stream is judged
        against the last one applied before: frames published while no monitor
        listened are counted lost, exactly once.  The counters travel with the
        streams, so a checkpoint is consistent whenever it was taken: frames
        applied after it are in neither, and count as lost after a restore.
        """
        names = [name.encode() for name in sorted(self._publishers, key=self._publishers.__getitem__)]
        arrays = {f"nodes.{k}": v for k, v in self.nodes.arrays().items()}
        arrays |= {f"sites.{k}": v for k, v in self.sites.arrays().items()}
        # UTF-8 bytes and their lengths: a numpy string array would drop a publisher id's trailing NULs.
        arrays["publishers.utf8"] = np.frombuffer(b"".join(names), np.uint8).copy()
        arrays["publishers.len"] = np.array([len(name) for name in names], np.int64)
        for name in COUNTERS:
            arrays[f"counters.{name}"] = np.array(min(getattr(self.stats, name), _MAX_COUNT), np.int64)
        return arrays

    def restore(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Continue from ``checkpoint()``'s arrays.

        All or nothing: everything is checked and built aside first, so arrays
        that do not fit raise ValueError and change nothing.  A checkpoint of
        the first layout (one positional ``counters`` array) is refused so.
        """
        if "counters" in arrays:
            raise ValueError("counters: a checkpoint of the positional layout, which this version does not read")
        nodes = Streams(self.nodes.publisher.size, max_jump=int(self.nodes.max_jump), tick_s=self.nodes.tick_s)
        sites = Streams(self.sites.publisher.size, max_jump=int(self.sites.max_jump), tick_s=self.sites.tick_s)
        nodes.restore({k.removeprefix("nodes."): v for k, v in arrays.items() if k.startswith("nodes.")})
        sites.restore({k.removeprefix("sites."): v for k, v in arrays.items() if k.startswith("sites.")})
        utf8 = _saved(arrays, "publishers.utf8", np.uint8)
        lengths = _saved(arrays, "publishers.len", np.int64)
        counters = {name: int(_saved(arrays, f"counters.{name}", np.int64, ndim=0)) for name in COUNTERS}
        if (lengths < 0).any() or int(lengths.sum()) != utf8.size or min(counters.values()) < 0:
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
        self.nodes, self.sites = nodes, sites
        self._publishers = {name: index for index, name in enumerate(names)}
        for name, value in counters.items():
            setattr(self.stats, name, value)
        self.stats.frames_missing = nodes.missing_count() + sites.missing_count()
