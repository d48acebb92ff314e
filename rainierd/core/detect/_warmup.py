"""An entity's learned level starts from the median of its first few accepted
samples, not from its first one.

Why: the first sample a chip is judged on can be its least typical.  An
agent's first interval can straddle compute and a collective, so the chip's
efficiency reads 0.75 to 1.24 of its group's; on traffic we did not write
(issue 38) that sample set the chip's level, and the clamp that holds every
later sample within ``z_cap`` spreads of the level (chips.py ``_believed``)
kept it there for the whole learning window: replaying the same frames with
only the analysis windows shifted gave 0 or 41 to 59 false stragglers, the
arrival phase alone deciding.  A median of ``count`` samples is moved by no
fewer than ``(count + 1) // 2`` outliers, and it learns a chip (or a whole
node) that is steadily a few % off its group's median at its own level, where
the clamp around the group's median (1.0) walked it down harmonically and
left it a fraction of a % above its samples: the heterogeneous fleet's false
stragglers.

Until ``count`` samples are in, the baseline holds nothing (its level NaN,
no history), so the entity is judged as one without history; at the
``count``-th, its level is the median and its history the seconds of those
samples, and ``Baseline.update`` takes over (a plain mean from there, each
sample clamped to its then level).  A fleet warms as one (every entity's
first samples in the same few ticks), so the buffer is a row of ``count``
float32, a count and seconds (25 bytes) an entity while it does: writing
rows by entity id costs nothing to find.  Once at most one entity in
``_SPARSE_BELOW`` is between its first sample and its seeding, the buffer
keeps rows for those alone (ascending entity ids, found by search), and
entities that start warming later get rows as they do: held for every entity
for good, the rows were 95 MiB of the monitor's footprint at rainier-1m (3M
NeuronLinks, 1M EFA ports, 1M chips; issue 39).  It is not saved with the
learned state: a monitor restarted mid-warm-up starts that entity's few
samples again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, I64, B, Floats
from rainierd.core.detect._baseline import Baseline

_SEED_SLICE: Final = 65_536  # entities seeded by one median: 1.3 MB of samples at five a row
_SPARSE_BELOW: Final = 64  # rows kept for the entities mid-warm-up alone once they are at most 1 in this many


@dataclass(eq=False)
class Warmup:
    """The first ``count`` accepted samples, and the seconds they cover, of the entities warming: a row for every
    entity (``rows`` None) until at most one in ``_SPARSE_BELOW`` is between its first sample and its seeding, then
    a row for each of those alone (``rows``, ascending)."""

    n: int
    count: int
    samples: F32  # (rows, count), NaN where not yet seen
    taken: npt.NDArray[np.uint8]  # samples in so far, per row
    seconds: F32
    rows: I64 | None = None  # the entity of each row; None: row i is entity i

    @classmethod
    def of(cls, n: int, count: int) -> Warmup:
        """Return warm-ups of ``n`` entities that seed a level from ``count`` samples (1: the first sets it)."""
        if not 1 <= count <= 255:
            raise ValueError(f"count must be 1 to 255, not {count}")
        return cls(n, count, np.full((n, count), np.nan, np.float32), np.zeros(n, np.uint8), np.zeros(n, np.float32))

    def update(self, baseline: Baseline, x: Floats, accept: B, seconds: Floats) -> B:
        """Take ``x`` where ``accept`` for the entities ``baseline`` has no level for; seed the level of those that
        reached ``count`` samples.  Return where the baseline may fold this sample in itself: accepted, and it had
        a level (``Baseline.update`` leaves out a NaN sample or interval itself)."""
        # Only the entities without a level are looked at: once the fleet is seeded, two passes a tick.
        warming = accept & np.isnan(baseline.level)
        idx = np.flatnonzero(warming)
        if not idx.size:
            return accept
        keep = accept & ~warming
        value = np.asarray(x, np.float32)[idx]
        dt = np.broadcast_to(np.asarray(seconds, np.float32), warming.shape)[idx]
        ok = (dt > 0) & np.isfinite(value)  # a NaN interval compares False
        idx, value, dt = idx[ok], value[ok], dt[ok]
        if idx.size:
            row = idx if self.rows is None else self._rows_of(idx)
            col = self.taken[row]
            self.samples[row, col] = value
            self.seconds[row] += dt
            col += 1
            self.taken[row] = col
            done = row[col >= self.count]
            # In slices: a whole fleet seeds at one tick (every entity's fifth sample), and one median over all of
            # rainier's 1.5M NeuronLinks at once held ~100 MiB of copies (the rows taken, the median's own).
            for start in range(0, done.size, _SEED_SLICE):
                rows = done[start:start + _SEED_SLICE]
                entities = rows if self.rows is None else self.rows[rows]
                baseline.level[entities] = np.median(self.samples[rows], axis=1)
                baseline.history_s[entities] = self.seconds[rows]
            if done.size:
                self._forget(done)
        return keep

    def _forget(self, rows: I64) -> None:
        """Forget ``rows`` (their entities are seeded); once few entities are left mid-warm-up, keep rows for them
        alone."""
        if self.rows is not None:
            kept = np.ones(self.rows.size, bool)
            kept[rows] = False
            self._keep(kept)
            return
        self.samples[rows] = np.nan
        self.taken[rows] = 0
        self.seconds[rows] = 0.0
        warming = np.flatnonzero(self.taken)
        if warming.size * _SPARSE_BELOW <= self.n:
            self.rows = np.arange(self.n, dtype=np.int64)
            self._keep(warming)

    def _keep(self, kept: B | I64) -> None:
        """Keep ``kept`` rows (a mask or ascending row numbers) and no others."""
        assert self.rows is not None
        self.rows, self.samples = self.rows[kept], self.samples[kept]
        self.taken, self.seconds = self.taken[kept], self.seconds[kept]

    def _rows_of(self, entities: I64) -> I64:
        """Return the rows of ``entities`` (ascending, unique), making rows for those not warming yet."""
        assert self.rows is not None
        at = np.searchsorted(self.rows, entities)
        known = at < self.rows.size
        known[known] = self.rows[at[known]] == entities[known]
        new = entities[~known]
        if new.size:
            where = np.searchsorted(self.rows, new)
            self.rows = np.insert(self.rows, where, new)
            self.samples = np.insert(self.samples, where, np.float32(np.nan), axis=0)
            self.taken = np.insert(self.taken, where, np.uint8(0))
            self.seconds = np.insert(self.seconds, where, np.float32(0.0))
            at = np.searchsorted(self.rows, entities)
        return at
