"""The bridge's sample clock: when each report was sampled, from the report's
own periods.  Pure: the wall clock is handed in, never read here.

neuron-monitor's reports carry no timestamp, only each metric group's
"actual captured period, in seconds" (neuron-monitor user guide, "Metric
Groups").  Stamping a frame when its line happens to be read makes rates
out of the reader's timing: after a stall, lines that queued in the pipe
are read milliseconds apart, and a period's FLOP over 6 ms reads as 65
times the chip's peak.  So the clock starts at the wall time of the first
line and advances by each report's captured period; rates over it are the
reports' own.

Two bounds keep it honest against the wall clock:

- **never ahead**: a clock ahead of the wall clock (the first line had
  waited in the pipe, so the start was late) is pulled back to it.  A pull
  shorter than ``clamp_ratio`` of the period changes a rate by at most that
  share and is kept quiet; a longer one is a *step*;
- **not too far behind**: more than ``max_lag_s`` behind (neuron-monitor's
  periods summing to less than the time that passed, or a stall longer than
  any backlog should be) steps it to the wall clock.

A step is counted by reason, and the frame it stamps carries no counters
and no EFA ports: a rate across a step would be wrong, and the monitor
gives none for a counter its previous sample lacked, while the bridge's
totals keep counting, so nothing is lost from the sums.  A report with no
usable period at all steps to the wall clock too (``no_period``).

Each tick also says how far its lag is above the lag's **floor**, which
follows the lag down at once and rises at most ``FLOOR_RISE`` of the wall
time that passes: a frame of a backlog (lines that waited in the pipe) is
well above it, a frame read as it was written is at it, even while
neuron-monitor's periods drift a little from the wall clock.  That is what
says whether counters read *now* (the EFA driver's) belong with the frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Step = Literal["ahead", "behind", "no_period"]
STEP_REASONS: Final[tuple[Step, ...]] = ("ahead", "behind", "no_period")
FLOOR_RISE: Final = 0.01  # the lag's floor rises at most 1 s per 100 s of wall time (a drift of 1 %)


@dataclass(frozen=True, slots=True)
class Tick:
    """One report's sample time."""

    t_s: float
    lag_s: float  # wall time minus sample time, >= 0
    first: bool = False
    step: Step | None = None  # why the clock was stepped to the wall clock (None: it advanced by the period)
    excess_s: float = 0.0  # the lag above its floor: how long this report waited beyond the usual


class SampleClock:
    """Sample times from report periods, bounded by the wall clock (see the module docstring)."""

    def __init__(self, *, max_lag_s: float, clamp_ratio: float) -> None:
        self.max_lag_s, self.clamp_ratio = max_lag_s, clamp_ratio
        self.t_s: float | None = None
        self._floor_s = 0.0
        self._wall_s: float | None = None

    def advance(self, period_s: float | None, *, wall_s: float) -> Tick:
        """Return the sample time of a report of ``period_s`` (None: it has none) read at ``wall_s``."""
        step: Step | None = None
        if self.t_s is None:
            t_s = wall_s
        elif period_s is None:
            t_s, step = max(self.t_s, wall_s), "no_period"
        else:
            t_s = self.t_s + period_s
            if t_s > wall_s:
                if t_s - wall_s > self.clamp_ratio * period_s:
                    step = "ahead"
                t_s = max(self.t_s, wall_s)  # pulled back, but never backwards
            elif wall_s - t_s > self.max_lag_s:
                t_s, step = wall_s, "behind"
        lag_s = max(0.0, wall_s - t_s)
        rise_s = FLOOR_RISE * max(0.0, wall_s - self._wall_s) if self._wall_s is not None else 0.0
        self._floor_s = lag_s if self.t_s is None else min(lag_s, self._floor_s + rise_s)
        first = self.t_s is None
        self.t_s, self._wall_s = t_s, wall_s
        return Tick(t_s, lag_s, first=first, step=step, excess_s=lag_s - self._floor_s)
