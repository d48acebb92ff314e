"""The monitor's configuration as one frozen value.

Built once, at the edge, from the settings (``Settings.monitor_config``); the
core takes every figure it judges by from here: staleness, admission bounds,
detection thresholds, the throughput model, and the hardware, which is
injected rather than read from the global ``TRN2``.  So a setting either
reaches the code that uses it or does not exist (tests/unit/core/test_config.py pins
each one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rainierd.core.bounds import CounterBounds
from rainierd.core.detect import DetectionParams
from rainierd.core.model import ModelParams
from rainierd.fleet import TRN2, Trainium2


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorConfig:
    """Everything a monitor's core is configured by."""

    tick_s: float = 1.0
    stale_after_ticks: int = 3  # a chip not heard from for this many ticks of listening is stale
    max_frame_bytes: int = 1 << 20
    max_clock_skew_s: float = 300.0
    max_seq_jump: int = 100_000
    feed_lost_share: float = 0.5  # of the nodes heard in the last minute, silent together: the feed is lost
    feed_hold_s: float = 60.0  # how long a feed loss holds its nodes' silence back from judgement
    # A counter may rise at most its hardware's peak rate times this (core/bounds.py says why 1.05).
    counter_rate_margin: float = 1.05
    hardware: Trainium2 = TRN2
    detection: DetectionParams = field(default_factory=DetectionParams)
    model: ModelParams = field(default_factory=ModelParams)

    def __post_init__(self) -> None:
        if not self.tick_s > 0 or self.stale_after_ticks < 1 or self.max_frame_bytes < 1:
            raise ValueError(f"tick_s, stale_after_ticks and max_frame_bytes must be positive: {self}")
        if not self.max_clock_skew_s > 0:
            raise ValueError(f"max_clock_skew_s must be positive, not {self.max_clock_skew_s}")
        self.counter_bounds()  # raises ValueError for a margin out of its range

    @property
    def stale_after_s(self) -> float:
        """Return the listening time after which a silent chip is stale."""
        return self.stale_after_ticks * self.tick_s

    def counter_bounds(self) -> CounterBounds:
        """Return the figures the state bounds counters by: this hardware's, times the margin."""
        return CounterBounds(hardware=self.hardware, margin=self.counter_rate_margin)

    def detection_params(self) -> DetectionParams:
        """Return the detectors' thresholds with what derives from the rest filled in."""
        stale = self.stale_after_s
        chips = replace(self.detection.chips, stale_after_s=stale)
        # "Heard lately" must outlast a stale interval, however long a deployment makes that.
        feed = replace(self.detection.feed, stale_after_s=stale, tick_s=self.tick_s, lost_share=self.feed_lost_share,
                       hold_s=self.feed_hold_s, heard_within_s=max(self.detection.feed.heard_within_s, 2 * stale))
        return replace(self.detection, chips=chips, feed=feed)
