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
sample clamped to its then level).  The buffer is ``count`` float32 an
entity (10 MB for ``rainier``'s 499,200 chips at 5), and only the entities
still warming are touched each tick.  It is not saved with the
learned state: a monitor restarted mid-warm-up starts that entity's few
samples again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, B, Floats
from rainierd.core.detect._baseline import Baseline

_SEED_SLICE: Final = 65_536  # entities seeded by one median: 1.3 MB of samples at five a row


@dataclass(eq=False)
class Warmup:
    """Each entity's first ``count`` accepted samples, and the seconds they cover."""

    samples: F32  # (n, count), NaN where not yet seen
    taken: npt.NDArray[np.uint8]  # samples in so far, per entity
    seconds: F32

    @classmethod
    def of(cls, n: int, count: int) -> Warmup:
        """Return warm-ups of ``n`` entities that seed a level from ``count`` samples (1: the first sets it)."""
        if not 1 <= count <= 255:
            raise ValueError(f"count must be 1 to 255, not {count}")
        return cls(np.full((n, count), np.nan, np.float32), np.zeros(n, np.uint8), np.zeros(n, np.float32))

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
            col = self.taken[idx]
            self.samples[idx, col] = value
            self.seconds[idx] += dt
            col += 1
            self.taken[idx] = col
            done = idx[col >= self.samples.shape[1]]
            # In slices: a whole fleet seeds at one tick (every entity's fifth sample), and one median over all of
            # rainier's 1.5M NeuronLinks at once held ~100 MiB of copies (the rows taken, the median's own).
            for start in range(0, done.size, _SEED_SLICE):
                rows = done[start:start + _SEED_SLICE]
                baseline.level[rows] = np.median(self.samples[rows], axis=1)
                baseline.history_s[rows] = self.seconds[rows]
                self.samples[rows] = np.nan
                self.taken[rows] = 0
                self.seconds[rows] = 0.0
        return keep

