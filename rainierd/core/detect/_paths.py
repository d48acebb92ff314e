"""What the two path detectors (NeuronLinks, EFA ports) share: their states,
the fields a sample needs to be judged, the thresholds both judge by
(``PathParams``, the base of ``NeuronLinkParams`` and ``EfaParams``), and how
both build their CUSUMs and deviations.  docs/detection.md explains the choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rainierd.core.detect._stats import ClippedCusum

HEALTHY, DEGRADED, DOWN = 0, 1, 2
NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "neuronlink": ("bw_bytes_s", "lanes_up"),  # latency and error counters are judged when present
    "efa": ("tx_bytes_total", "rx_bytes_total"),  # latency and retransmits are judged when present
}
"""Fields a sample must carry for its link or port to be judged at all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PathParams:
    """Thresholds both path detectors judge by (docs/detection.md justifies them).

    Every threshold is a rate per second, a ratio to the entity's own
    baseline, to its group's or its kind's median, or a number of seconds:
    none is in ticks, none is an absolute figure a publisher or a workload
    could move (docs/detection.md, "Units").
    """

    # Deviation CUSUMs (bandwidth, throughput, latency) take robust z-scores, each step weighted by its
    # sample's interval in seconds: h is in z-seconds, so a step raises in the same seconds at any tick.
    z_cap: float = 6.0  # most one second can add to a deviation CUSUM
    z_k: float = 2.0  # deviation below this many sigmas is noise
    z_h: float = 20.0  # ~5 s of a full-cap deviation to raise
    # A saturated CUSUM falls back under h within drain_s seconds of clean evidence (its ceiling is
    # h + drain_s x k): with clear_after_s this bounds how long an alarm outlives its fault.
    drain_s: float = 3.0
    # However long the tick, this many samples must agree before a CUSUM raises: an interval's
    # average cannot tell a second-long spike from a step that filled it, and at a 5 s tick one
    # entity in forty sees a spike every interval (docs/detection.md, "Long ticks").  At a 1 s tick
    # the per-second cap binds first (z: 4 z-s a sample, 5 to raise), so this changes nothing there.
    samples_to_raise: float = 6.0
    bw_floor: float = 0.02  # smallest bandwidth-ratio sigma believed
    latency_floor: float = 0.03
    down_below: float = 0.05  # bandwidth ratio (to the link's own level, at its group's pace) under which it is down
    latency_band: float = 3.0  # latency this many times its kind's median is degraded whatever its baseline
    band_h_s: float = 10.0  # seconds outside a band (half of them net of any inside it) before it counts
    raise_after_s: float = 2.0  # persistence a degraded state needs
    clear_after_s: float = 5.0  # clean seconds to clear
    # Per-entity baselines (core/detect/_baseline.py): learned for baseline_learn_s before an entity is
    # judged against itself, then forgetting with an hour's half-life, each sample pulling at most
    # baseline_clip (relative).
    baseline_halflife_s: float = 3_600.0
    baseline_learn_s: float = 30.0
    baseline_clip: float = 0.1
    # A latency level starts at the median of its first this-many accepted samples (_warmup.py): latency is a
    # gauge with heavy tails, and a first sample 37 % low, walked up by the learning clip, left a NeuronLink's
    # level 8 % under its samples when learned and raised it 77 times in 90 minutes (issue 38).
    latency_seed_samples: int = 5


def cusum(n: int, p: PathParams, *, k: float, h: float, cap: float) -> ClippedCusum:
    """Return a CUSUM whose ceiling lets a saturated sum fall under ``h`` in ``drain_s`` clean seconds."""
    return ClippedCusum.zeros(n, k=k, h=h, cap=cap, ceiling=h + p.drain_s * k, samples=p.samples_to_raise)


def band(n: int, p: PathParams) -> ClippedCusum:
    """Return the persistence of being outside the wide band against peers: a spike is not a drift."""
    return ClippedCusum.zeros(n, k=0.5, h=0.5 * p.band_h_s, cap=1.0, ceiling=0.5 * p.band_h_s + p.drain_s * 0.5,
                              samples=p.samples_to_raise)
