"""Health of NeuronLinks and EFA ports: healthy, degraded or down, with the
reasons, from peer comparison (robust median/MAD over links of the same kind,
or EFA ports of the same UltraServer), per-link clipped CUSUMs for gray
degradation, direct evidence (lanes, zero traffic) for hard faults, and a
decaying count of drops for flapping.  docs/detection.md explains the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from rainierd._types import F32, I64, B
from rainierd.core.detect._baseline import Baseline, RateBaseline
from rainierd.core.detect._common import Reason, counter_delta, flag, new_samples, persistence_seconds
from rainierd.core.detect._stats import ClippedCusum, PeerSample, ewma, robust_center_scale, row_nanmedian
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState
from rainierd.hardware import TRN2, Trainium2
from rainierd.topology import LINK_KIND_NAMES

__all__ = ["DEGRADED", "DOWN", "HEALTHY", "NEEDS", "EfaDetector", "LinkDetector", "PathParams", "slow_path_stretch"]

HEALTHY, DEGRADED, DOWN = 0, 1, 2
NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "neuronlink": ("bw_bytes_s", "lanes_up"),  # latency and error counters are judged when present
    "efa": ("tx_bytes_total", "rx_bytes_total"),  # latency and retransmits are judged when present
}
"""Fields a sample must carry for its link or port to be judged at all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PathParams:
    """Thresholds of the path detectors (docs/detection.md justifies them).

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
    # Error and retransmit CUSUMs take rates per second, each step weighted by its interval: the same
    # storm raises in the same seconds at any tick (h is in errors; at a 1 s tick, as before).
    errors_cap: float = 10.0  # errors a second counted at most
    errors_k: float = 3.0  # errors a second that are noise
    errors_h: float = 28.0
    retrans_cap: float = 10.0  # retransmits a second above the port's own baseline counted at most
    retrans_k: float = 2.0
    retrans_h: float = 32.0
    down_below: float = 0.05  # bandwidth ratio (to the link's own level, at its group's pace) under which it is down
    drop_below: float = 0.5  # a sample this low with every lane up counts as a drop (with retraining replays)
    # The shortest drop an interval's average must show (flaps last 0.5-3 s: MegaScale): at a long tick a
    # drop of drop_min_s dilutes to 1 - drop_min_s / interval, so the threshold rises to that.
    drop_min_s: float = 0.5
    retrain_replays: float = 20.0  # replays in one interval that mean the link retrained (a CRC burst makes ~5)
    idle_below: float = 0.05  # a group whose links carry under this share of their levels is not communicating
    latency_band: float = 3.0  # latency this many times its kind's median is degraded whatever its baseline
    bandwidth_band: float = 0.5  # a learned level under this share of its kind's is degraded whatever it learned
    band_h_s: float = 10.0  # seconds outside a band (half of them net of any inside it) before it counts
    flap_window_s: float = 60.0  # decay time of the drop count
    flap_drops: float = 1.8  # ~2 drops within the window is flapping
    flap_hold_s: float = 25.0  # extra clean seconds a link that blipped recently needs to clear
    # A drop this short is a blip, the flapping signature (down 0.5-3 s, up 5-30 s: MegaScale, Alibaba
    # HPN): only after a blip does a link wait flap_hold_s to clear.  A link that was down longer was
    # reseated, replaced or retrained for good, and clears like any other fault.
    flap_blip_s: float = 15.0
    recent_drop: float = 0.3  # drop count above which a drop was recent (~70 s)
    raise_after_s: float = 2.0  # persistence a degraded state needs
    clear_after_s: float = 5.0  # clean seconds to clear
    ewma_alpha: float = 0.2
    # Per-entity baselines (core/detect/_baseline.py): learned for baseline_learn_s before an entity is
    # judged against itself, then forgetting with an hour's half-life, each sample pulling at most
    # baseline_clip (relative).
    baseline_halflife_s: float = 3_600.0
    baseline_learn_s: float = 30.0
    baseline_clip: float = 0.1
    # Slow EFA loss (docs/detection.md, layer 4): a Poisson CUSUM per port of its retransmits, in
    # packets per second, so it means the same at any tick.  In control: the port's own rate (its
    # history, shrunk to the fleet's background with a prior of loss_prior_s seconds).  Out of
    # control: that rate plus loss_detect of the packets it sends (a loss fraction, so the test means
    # the same at any load), at least loss_min_per_s.  Each port's threshold is set by its own rate,
    # so every port has the same false-alarm rate: Siegmund's approximation puts the chance that a
    # healthy excursion reaches h at exp(-loss_exponent).  Counts a port can add in one interval are
    # capped, so a burst is not loss.
    loss_detect: float = 2e-7
    loss_min_per_s: float = 0.05
    loss_exponent: float = 20.0
    loss_h_min: float = 10.0  # packets: the threshold of a port whose rate is near zero
    loss_packet_bytes: float = 8_192.0  # EFA's SRD packet (jumbo frames), to turn bytes into packets
    loss_floor_per_s: float = 0.01  # the background rate assumed at least
    loss_background_halflife_s: float = 600.0  # how slowly the fleet's background adapts
    loss_prior_s: float = 30.0  # seconds of the fleet's background a port's own rate starts from
    # A port is judged for slow loss only after loss_learn_s of its own history: the test needs its
    # rate to a few %, and a port sending 0.5 retransmits a second counts ~900 in half an hour (3 %).
    # Its rate is then taken loss_margin_se standard errors high, so what it does not know yet about
    # its rate is not read as loss.
    loss_learn_s: float = 1_800.0
    loss_margin_se: float = 1.0
    # Hysteresis of the loss test, in units of each port's h: raised at 1, cleared under loss_clear,
    # the sum held under loss_ceiling.  Clearing drains (ceiling - clear) h at the healthy drift, about
    # half of what raising took: a rate test cannot know that loss ended much faster than it saw it
    # begin, and a narrower band would let noise during the loss clear and re-raise it.
    loss_ceiling: float = 1.25
    loss_clear: float = 0.75
    loss_delay_s: float = 900.0  # then a port's rate learns what it saw this long ago, if it stayed healthy
    loss_baseline_halflife_s: float = 3_600.0


def slow_path_stretch(latency_ratio: F32, share: F32, retrans_share: F32, *, latency_share: float) -> F32:
    """Return how much a path stretches its group's collective: 1 + latency_share x (L - 1) + r.

    L is its latency over its own level beyond what its lost throughput
    explains (``latency_ratio x share``, at least 1: a degraded path's
    queueing is priced in its throughput share), r the bytes it retransmits
    above its own rate over the bytes it sends (docs/throughput-model.md).
    """
    slower = np.maximum(latency_ratio * share, np.float32(1.0))
    stretch: F32 = (np.float32(1.0) + np.float32(latency_share) * (slower - np.float32(1.0)) + retrans_share)
    return stretch.astype(np.float32, copy=False)


def _cusum(n: int, p: PathParams, *, k: float, h: float, cap: float) -> ClippedCusum:
    """Return a CUSUM whose ceiling lets a saturated sum fall under ``h`` in ``drain_s`` clean seconds."""
    return ClippedCusum.zeros(n, k=k, h=h, cap=cap, ceiling=h + p.drain_s * k, samples=p.samples_to_raise)


def _deviation(values: F32, reference: F32, ok: B, *, floor: float, sample: PeerSample) -> F32:
    """Return (values / reference - 1) in robust sigmas of that ratio over the fleet (0 where not ``ok``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        dev: F32 = np.divide(values, reference, dtype=np.float32)
    _, scale = robust_center_scale(dev, ok, floor=floor, sample=sample)
    dev -= np.float32(1.0)
    dev /= np.float32(scale)
    np.copyto(dev, np.float32(0.0), where=~ok)
    return dev


def _band(n: int, p: PathParams) -> ClippedCusum:
    """Return the persistence of being outside the wide band against peers: a spike is not a drift."""
    return ClippedCusum.zeros(n, k=0.5, h=0.5 * p.band_h_s, cap=1.0, ceiling=0.5 * p.band_h_s + p.drain_s * 0.5,
                              samples=p.samples_to_raise)


@dataclass(eq=False)
class LinkDetector:
    """NeuronLink health for the whole fleet."""

    state: FleetState
    params: PathParams = field(default_factory=PathParams)
    hardware: Trainium2 = TRN2

    def __post_init__(self) -> None:
        topo = self.state.topology
        n = topo.n_links
        p = self.params
        self.seen = np.zeros(n, dtype=np.uint32)
        self.bw = _cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.latency = _cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.errors = _cusum(n, p, k=p.errors_k, h=p.errors_h, cap=p.errors_cap)
        self.band = _band(n, p)
        baseline = {"halflife_s": p.baseline_halflife_s, "learn_s": p.baseline_learn_s, "clip": p.baseline_clip}
        self.bw_base = Baseline.empty(n, **baseline)  # bandwidth / nominal, at its group's pace
        self.latency_base = Baseline.empty(n, **baseline)
        self.drops = np.zeros(n, np.float32)
        self.was_dropped = np.zeros(n, dtype=bool)
        self.down_s = np.zeros(n, np.float32)  # seconds of the current (or last) run of dropped samples
        self.last_down_s = np.full(n, np.inf, np.float32)  # how long the last drop that ended lasted
        self.was_low = np.zeros(n, dtype=bool)  # the last sample's bandwidth was near zero with lanes up
        self.now_ratio = np.ones(n, np.float32)  # the latest such ratio
        # A drop (lanes gone, or bandwidth far below any noise) raises at once.
        self.tracker = StateTracker.create(n, raise_after_s=[0.0, p.raise_after_s, 0.0], clear_after_s=p.clear_after_s)
        self.sample = PeerSample.of(n)
        kind = topo.link_kind
        self.kind = kind.astype(np.int8)
        # Every node reports its links in one order (topology.py), so a kind's
        # figure reaches each link by broadcasting over that order, with no
        # gather over millions of links.
        self.per_node = topo.links_per_node
        self.per_us = topo.links_per_node * topo.nodes_per_ultraserver
        self.kind_order = kind[:self.per_node].copy()
        assert (kind.reshape(-1, self.per_node) == self.kind_order).all(), "nodes must share one link order"
        hw = self.hardware
        # The nominal figure only sets the units (a share of nominal); no threshold is against it.
        self.nominal = np.where(kind == 1, hw.neuronlink_ring_bytes_s, hw.neuronlink_intra_bytes_s).astype(np.float32)

    def _per_link(self, per_kind: F32) -> F32:
        """Return each link's figure of its kind, by broadcasting over the nodes' common link order."""
        return np.tile(per_kind[self.kind_order], self.state.topology.n_nodes).astype(np.float32)

    def _downs(self, fresh: B, full: B, ratio: F32, up: B, held: F32) -> tuple[B, B]:
        """Return (down, dropped this sample), and count the drops that begin.

        No lane up is the link down.  Bandwidth alone never is, in one
        sample: a healthy link's interval average has heavy tails (a stall,
        contention), so near-zero bandwidth with lanes up must persist for two
        samples, and a dip under half its level (at a long tick, under
        1 - drop_min_s / interval) with every lane up (``full``) counts as a
        drop (a brief down inside the interval) only with the replays a
        retraining link makes: it replays its whole in-flight window,
        tens of packets, where a CRC burst on a healthy link replays a few.
        """
        p, table = self.params, self.state.links
        low = fresh & (ratio < p.down_below) & up
        down = ~up | (low & self.was_low)
        np.copyto(self.was_low, low, where=fresh)
        retrained = counter_delta(table, "replay_total") >= np.float32(p.retrain_replays)
        below = np.maximum(np.float32(p.drop_below), np.float32(1.0) - np.float32(p.drop_min_s) / held)
        dropped = fresh & (down | (full & (ratio < below) & retrained))
        self._count_drops(dropped, fresh, table.dt_s, held)
        return down, dropped

    def _count_drops(self, dropped: B, fresh: B, dt: F32, held: F32) -> None:
        """Decay each link's drop count over its interval, count a drop where one begins, time each drop."""
        decay = np.exp(-np.fmax(dt, np.float32(0.0)) / np.float32(self.params.flap_window_s)).astype(np.float32)
        np.multiply(self.drops, decay, out=self.drops, where=fresh)
        begins = dropped & ~self.was_dropped
        np.add(self.drops, np.float32(1.0), out=self.drops, where=begins)
        np.copyto(self.down_s, np.float32(0.0), where=begins)
        np.add(self.down_s, np.nan_to_num(held, nan=0.0), out=self.down_s, where=dropped)
        np.copyto(self.last_down_s, self.down_s, where=fresh & ~dropped & self.was_dropped)
        np.copyto(self.was_dropped, dropped, where=fresh)

    def _kind_centers(self, share: F32, latency: F32, judged: B) -> tuple[F32, F32, F32]:
        """Return each kind's median bandwidth share, latency and learned bandwidth level, on the peer sample.

        They are the reference of a link that has no history yet, and the
        wide band against peers that no learning moves.
        """
        picked = {name: self.sample.pick(a) for name, a in
                  (("share", share), ("latency", latency), ("judged", judged), ("kind", self.kind),
                   ("level", self.bw_base.level), ("learned", self.bw_base.learned()))}
        n_kinds = len(LINK_KIND_NAMES)
        share_center, lat_center, level_center = (np.full(n_kinds, np.nan, np.float32) for _ in range(3))
        for kind in range(n_kinds):
            of_kind = picked["kind"] == kind
            share_center[kind], _ = robust_center_scale(picked["share"], of_kind & picked["judged"], floor=0.0)
            lat_center[kind], _ = robust_center_scale(
                picked["latency"], of_kind & picked["judged"] & (picked["latency"] > 0), floor=0.0)
            level_center[kind], _ = robust_center_scale(picked["level"], of_kind & picked["learned"], floor=0.0)
        return share_center, lat_center, level_center

    def update(self, tick: int) -> Transitions:
        """Fold in the links' new samples; return the state changes."""
        p, table = self.params, self.state.links
        # A link is judged only on samples that carry its bandwidth and lanes;
        # without them it is unknown (never healthy, never down by default).
        fresh = new_samples(table, self.seen) & table.has(*NEEDS["neuronlink"])
        np.copyto(self.seen, table.samples)
        dt = table.dt_s
        # Evidence, persistence and learning count a sample after a gap as one typical interval.
        held = persistence_seconds(dt, fresh, self.sample)
        share = table.gauges["bw_bytes_s"] / self.nominal  # units only: a share of nominal
        latency = table.gauges["latency_us"]
        lanes = table.gauges["lanes_up"]
        up = lanes > 0
        share_center, lat_center, level_center = self._kind_centers(share, latency, fresh & up)
        # Bandwidth: against the link's own level (its kind's median until it has history), then
        # against its UltraServer's links at this moment, so a group that slows or idles as a whole
        # (its job's pace, a straggler, the diurnal swing) is not a group of bad links.
        relative = share / self.bw_base.reference(self._per_link(share_center))
        paced = np.where(fresh & up, relative, np.float32(np.nan)).reshape(-1, self.per_us)
        pace = np.repeat(row_nanmedian(paced), self.per_us)
        communicating = pace > p.idle_below
        with np.errstate(invalid="ignore", divide="ignore"):  # an idle or silent group: judged below as idle
            ratio = np.divide(relative, pace, dtype=np.float32)
        np.copyto(ratio, np.float32(1.0), where=~communicating)
        bw_judged = fresh & up & communicating
        _, bw_scale = robust_center_scale(ratio, bw_judged, floor=p.bw_floor, sample=self.sample)
        bw_dev: F32 = np.subtract(np.float32(1.0), ratio, dtype=np.float32)
        bw_dev /= np.float32(bw_scale)
        # Latency: against its own level (its kind's median until it has history).
        lat_ok = fresh & up & (latency > 0)
        lat_dev = _deviation(latency, self.latency_base.reference(self._per_link(lat_center)), lat_ok,
                             floor=p.latency_floor, sample=self.sample)
        np.copyto(self.now_ratio, ratio, where=fresh)
        errors = counter_delta(table, "crc_errors_total", "replay_total")
        errors /= dt  # per second

        all_lanes = self.hardware.neuronlink_lanes
        down, dropped = self._downs(fresh, communicating & (lanes == all_lanes), ratio, up, held)
        # The wide band against peers: a link far slower than its kind, or whose own level has sunk
        # far under its kind's, is degraded whatever its baseline learned.
        far_latency = lat_ok & (latency > np.float32(p.latency_band) * self._per_link(lat_center))
        far_level = self.bw_base.learned() & (self.bw_base.level < np.float32(p.bandwidth_band)
                                              * self._per_link(level_center))

        reasons = np.zeros(share.shape, dtype=np.int32)
        flag(reasons, up & (lanes < all_lanes), Reason.LANES)
        judged = bw_judged & ~down
        # The evidence arrays are spent once added: each is its CUSUM's scratch.
        outside = self.band.update((far_latency | far_level).astype(np.float32), fresh, seconds=held)
        # Until a link has history it is judged only by hard evidence and the band (_baseline.py).
        flag(reasons, self.bw.update(bw_dev, judged & self.bw_base.learned(), scratch=bw_dev, seconds=held)
             | (outside & far_level),
             Reason.BANDWIDTH)
        flag(reasons, self.latency.update(lat_dev, lat_ok & ~down & self.latency_base.learned(), scratch=lat_dev,
                                          seconds=held)
             | (outside & far_latency), Reason.LATENCY)
        flag(reasons, self.errors.update(errors, fresh, scratch=errors, seconds=held), Reason.ERRORS)
        flag(reasons, self.drops >= p.flap_drops, Reason.FLAPPING)
        flag(reasons, dropped, Reason.DOWN)
        # A drop raises at once; a link that blipped (dropped briefly) recently must stay clean
        # for flap_hold_s more before it clears, so a flapping link is one
        # event for its whole episode, never a string of downs.  Flapping names
        # the episode but holds nothing by itself: the hold does, for a bounded
        # time after the last drop, however many drops came before.
        candidate = ((reasons & ~np.int32(Reason.FLAPPING)) != 0).astype(np.int8)  # DEGRADED
        candidate[dropped] = DOWN
        blipped = np.where(self.last_down_s < p.flap_blip_s, np.float32(p.flap_hold_s), np.float32(0.0))
        np.copyto(self.tracker.hold_s, blipped, where=self.drops > p.recent_drop)
        changes = self.tracker.update(candidate, reasons, fresh, tick,
                                      seconds=held)
        with np.errstate(invalid="ignore", divide="ignore"):
            level = np.divide(share, pace, dtype=np.float32)
        self._learn(level, latency, fresh & up & ~dropped & communicating, lat_ok, held)
        return changes

    def _learn(self, level: F32, latency: F32, bw_ok: B, lat_ok: B, dt: F32) -> None:
        """Fold the sample into the baselines of healthy links with little evidence against them (_baseline.py)."""
        p = self.params
        healthy = self.tracker.state == HEALTHY
        self.bw_base.update(level, bw_ok & healthy & (self.bw.s < 0.25 * p.z_h), dt)
        self.latency_base.update(latency, lat_ok & healthy & (self.latency.s < 0.25 * p.z_h), dt)

    def path_fraction(self) -> F32:
        """Return, per link, the bandwidth share its collectives get now (1 if healthy).

        From the latest sample, not the smoothed one: a flapping link held
        unhealthy between drops costs only while it is actually down.  A link
        that is down now costs half (its traffic reroutes over a neighbour).
        """
        out = np.ones(self.state.topology.n_links, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        out[bad] = self._fraction(bad)
        return out

    def _fraction(self, ids: I64) -> F32:
        lanes = self.state.links.gauges["lanes_up"][ids]
        ratio = self.now_ratio[ids]
        down_now = (lanes == 0) | (ratio < self.params.down_below)
        return np.where(down_now, np.float32(0.5), np.clip(ratio, 0.05, 1.0)).astype(np.float32)

    def slowest_by_ultraserver(self) -> F32:
        """Return each UltraServer's lowest path fraction (1 where every link is healthy).

        Only unhealthy links can be below 1, so only they are visited.
        """
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        np.minimum.at(out, topo.node_ultraserver[topo.link_node[bad]], self._fraction(bad))
        return out


@dataclass(eq=False)
class EfaDetector:
    """EFA port health for the whole fleet, each port compared with itself and its UltraServer's ports."""

    state: FleetState
    params: PathParams = field(default_factory=PathParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        n = topo.n_efa
        self.per_us = topo.efa_ports_per_node * topo.nodes_per_ultraserver
        self.seen = np.zeros(n, dtype=np.uint32)
        self.throughput = _cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.latency = _cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.retrans = _cusum(n, p, k=p.retrans_k, h=p.retrans_h, cap=p.retrans_cap)
        self.band = _band(n, p)
        baseline = {"halflife_s": p.baseline_halflife_s, "learn_s": p.baseline_learn_s, "clip": p.baseline_clip}
        self.share_base = Baseline.empty(n, **baseline)  # throughput / its UltraServer's median
        self.latency_base = Baseline.empty(n, **baseline)
        self.retrans_base = RateBaseline.empty(n, halflife_s=p.loss_baseline_halflife_s, prior_s=p.loss_prior_s,
                                               learn_s=p.loss_learn_s, delay_s=p.loss_delay_s)
        self.share = np.full(n, np.nan, np.float32)  # EWMA of throughput / its own share of its UltraServer's
        self.latency_ratio = np.full(n, np.nan, np.float32)  # EWMA of latency / its own level
        self.was_low = np.zeros(n, dtype=bool)  # the last sample's traffic was near zero
        self.retrans_share = np.zeros(n, np.float32)  # EWMA of bytes retransmitted above its own rate / bytes sent
        self.sample = PeerSample.of(n)
        self.loss = np.zeros(n, np.float32)  # Poisson CUSUM of retransmits over the port's rate, in its own h
        self.lossy = np.zeros(n, bool)  # over h, and not yet back under half of it
        self.background_per_s = float("nan")  # the fleet's retransmit rate per port, bursts clipped
        self._background_s = 0.0  # seconds the background has been estimated over (a plain mean at first)
        self.tracker = StateTracker.create(n, raise_after_s=[0.0, p.raise_after_s, p.raise_after_s],
                                           clear_after_s=p.clear_after_s)

    def update(self, tick: int) -> Transitions:
        """Fold in the ports' new samples; return the state changes."""
        p, table = self.params, self.state.efa
        fresh = new_samples(table, self.seen) & table.has(*NEEDS["efa"])
        np.copyto(self.seen, table.samples)
        dt = table.dt_s
        # Evidence, persistence and learning count a sample after a gap as one typical interval.
        held = persistence_seconds(dt, fresh, self.sample)
        rate = table.rates["tx_bytes_total"] + table.rates["rx_bytes_total"]
        np.copyto(rate, np.float32(np.nan), where=~fresh)
        # Traffic follows the job: compare a port with its UltraServer's ports,
        # so a stalled or slowed group does not look like a group of bad ports;
        # then with its own usual share of them (traffic is never perfectly
        # balanced).  An all-NaN group (stalled, silent) has no median: NaN.
        ref = np.repeat(row_nanmedian(rate.reshape(-1, self.per_us)), self.per_us)
        active = fresh & (ref > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            share: F32 = np.divide(rate, ref, dtype=np.float32)
        np.copyto(share, np.float32(1.0), where=~active)
        ratio = share / self.share_base.reference(1.0)
        _, scale = robust_center_scale(ratio, active, floor=p.bw_floor, sample=self.sample)
        self.share = ewma(self.share, ratio, active, alpha=p.ewma_alpha)
        latency = table.gauges["latency_us"]
        lat_ok = fresh & (latency > 0)
        lat_center, _ = robust_center_scale(latency, lat_ok, floor=p.latency_floor, sample=self.sample)
        lat_reference = self.latency_base.reference(lat_center)
        lat_dev = _deviation(latency, lat_reference, lat_ok, floor=p.latency_floor, sample=self.sample)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.latency_ratio = ewma(self.latency_ratio, latency / lat_reference, lat_ok, alpha=p.ewma_alpha)
        retrans = counter_delta(table, "retrans_pkts_total")
        own_rate = self._own_rate()
        slow_loss = self._slow_loss(retrans, dt, fresh, own_rate, table.rates["tx_bytes_total"])
        # Retransmit bursts are judged above the port's own rate: a trickle it always had, or that
        # every port shares, is not a fault; and above two of its Poisson deviations a second, so a
        # port with a high rate is held to the same false-alarm rate as a quiet one.
        excess = retrans / dt
        excess -= own_rate
        self._price_retransmits(excess, fresh)
        excess -= np.maximum(np.float32(0.0), 2.0 * np.sqrt(own_rate) - np.float32(p.retrans_k))
        unresponsive = counter_delta(table, "unresponsive_remote_events_total") > 0

        down = self._downs(active, ratio, unresponsive, fresh)
        shortfall = 1.0 - ratio
        shortfall /= np.float32(scale)
        far_latency = lat_ok & (latency > np.float32(p.latency_band * lat_center))
        reasons = np.zeros(share.shape, dtype=np.int32)
        # Until a port has history it is judged only by hard evidence and the band (_baseline.py).
        flag(reasons, self.throughput.update(shortfall, active & ~down & self.share_base.learned(), seconds=held),
             Reason.BANDWIDTH)
        outside = self.band.update(far_latency.astype(np.float32), fresh, seconds=held)
        flag(reasons, self.latency.update(lat_dev, lat_ok & ~down & self.latency_base.learned(), seconds=held)
             | (outside & far_latency),
             Reason.LATENCY)
        rate_learned = self.retrans_base.history_s >= np.float32(p.baseline_learn_s)
        flag(reasons, self.retrans.update(excess, fresh & rate_learned, seconds=held), Reason.RETRANSMITS)
        flag(reasons, slow_loss, Reason.LOSS_RATE)
        flag(reasons, down, Reason.DOWN)
        flag(reasons, fresh & unresponsive, Reason.UNRESPONSIVE)
        candidate = (reasons != 0).astype(np.int8)  # DEGRADED
        candidate[down] = DOWN
        changes = self.tracker.update(candidate, reasons, fresh, tick, seconds=held)
        healthy = fresh & (self.tracker.state == HEALTHY)
        self._learn(share, latency, healthy & active, healthy & lat_ok, held)
        self._learn_rate(retrans, own_rate, fresh, dt)
        return changes

    def _downs(self, active: B, ratio: F32, unresponsive: B, fresh: B) -> B:
        """Return which ports are down: traffic near zero in two samples running, or the remote unresponsive.

        One sample is not enough: an agent that restarted twice within a few
        seconds leaves counters that never went backwards but moved only since
        its last start, which reads as one interval of near-zero traffic.
        """
        low = active & (ratio < self.params.down_below)
        down = (low & self.was_low) | (active & unresponsive)
        np.copyto(self.was_low, low, where=fresh)
        return down

    def _learn(self, share: F32, latency: F32, share_ok: B, lat_ok: B, held: F32) -> None:
        """Fold the sample into the baselines of healthy ports with little evidence against them (_baseline.py)."""
        p = self.params
        self.share_base.update(share, share_ok & (self.throughput.s < 0.25 * p.z_h), held)
        self.latency_base.update(latency, lat_ok & (self.latency.s < 0.25 * p.z_h), held)

    def _learn_rate(self, retrans: F32, own_rate: F32, fresh: B, dt: F32) -> None:
        """Fold the retransmits into each port's own rate: learned after a delay, if the port stayed healthy.

        A burst (a count beyond a few deviations of the rate it has learned)
        counts as that rate: bursts are not the trickle, and a rate that
        learned them would hide loss.  For its first seconds a port caps
        bursts only loosely (ten times its rate, plus ten): a strict cap near
        a rate still at the prior would hold a port that really retransmits
        more at the prior for good.
        """
        interval = np.fmax(dt, np.float32(0.0)).astype(np.float32, copy=False)
        counted = np.fmax(retrans, np.float32(0.0)).astype(np.float32, copy=False)
        loose = own_rate * interval
        loose *= np.float32(10.0)
        loose += np.float32(10.0)
        np.minimum(counted, loose, out=counted)
        settled = self.retrans_base.history_s >= np.float32(self.params.baseline_learn_s)
        burst = settled & (counted > self._burst_cap(own_rate, interval))
        np.copyto(counted, own_rate * interval, where=burst)
        clean = (self.tracker.state == HEALTHY) & ~self.lossy & (self.retrans.s < 0.25 * self.params.retrans_h)
        self.retrans_base.update(counted, dt, accept=fresh & np.isfinite(retrans), clean=clean)

    def _own_rate(self) -> F32:
        """Return each port's baseline retransmit rate per second: its own history, shrunk to the fleet's."""
        p = self.params
        background = self.background_per_s if np.isfinite(self.background_per_s) else p.loss_floor_per_s
        rate = self.retrans_base.rate(max(background, p.loss_floor_per_s))
        np.maximum(rate, np.float32(p.loss_floor_per_s), out=rate)
        return rate

    def _in_control_rate(self, own_rate: F32) -> F32:
        """Return the slow-loss test's in-control rate: the port's own, plus loss_margin_se standard errors."""
        p = self.params
        exposure = self.retrans_base.seconds + np.float32(p.loss_prior_s)
        margin = np.sqrt(own_rate / exposure, dtype=np.float32)
        margin *= np.float32(p.loss_margin_se)
        return (own_rate + margin).astype(np.float32)

    @staticmethod
    def _burst_cap(alternative: F32, dt_s: F32) -> F32:
        """Return the most retransmits an interval counts: a few deviations over the alternative; more is a burst."""
        expected: F32 = alternative * np.fmax(dt_s, np.float32(0.0)).astype(np.float32, copy=False)
        cap: F32 = np.sqrt(expected, dtype=np.float32)
        cap *= np.float32(3.0)
        cap += expected
        cap += np.float32(1.0)
        return cap

    def _slow_loss(self, counts: F32, dt_s: F32, fresh: B, own_rate: F32, sent_bytes_s: F32) -> B:
        """Fold each port's retransmits into its loss CUSUM; return where it is over its threshold.

        The in-control rate is the port's own (``RateBaseline``: its history,
        starting from the fleet's background, estimated on the peer sample
        with each port's count capped, adapting over
        ``loss_background_halflife_s``), so a trickle a port or its site
        always had is not a fault, and neither is one every port shares.
        """
        p = self.params
        ok = fresh & np.isfinite(counts) & (dt_s > 0)
        started = np.isfinite(self.background_per_s)
        interval = np.where(ok, dt_s, np.float32(0.0))  # seconds each port's count covers (0: none)
        # The rise to detect: loss_detect of the packets the port sends, at least loss_min_per_s.
        rise = np.fmax(sent_bytes_s, np.float32(0.0)).astype(np.float32)
        rise *= np.float32(p.loss_detect / p.loss_packet_bytes)
        np.maximum(rise, np.float32(p.loss_min_per_s), out=rise)
        # Counts above a few standard deviations of the alternative are a burst, not a rate: a burst
        # counts as the alternative's mean, so bursts add no more evidence of loss than loss itself
        # would (a cap at the threshold would add several packets a burst, and bursts come every few
        # minutes).  Before there is a background, nothing is a burst.
        counted = np.where(ok, counts, np.float32(0.0))
        if started:
            burst = counted > self._burst_cap(own_rate + rise, interval)
            np.copyto(counted, (own_rate + rise) * interval, where=burst)
        self._update_background(counted, interval, ok)
        if not started:  # the first interval only sets the background
            return np.zeros(counts.shape, bool)
        own_rate = self._in_control_rate(own_rate)
        # Lucas's Poisson CUSUM between rate r and r + d: reference value k = d / ln(1 + d / r).  Its
        # healthy drift is r - k < 0, and an excursion reaches h with chance exp(-2 (k - r) h / r):
        # h = loss_exponent r / (2 (k - r)) gives every port the same false-alarm rate.
        k_per_s = rise / np.log1p(rise / own_rate)
        h = np.float32(0.5 * p.loss_exponent) * own_rate / (k_per_s - own_rate)
        np.maximum(h, np.float32(p.loss_h_min), out=h)
        step = counted - k_per_s * interval
        step /= h  # the CUSUM is kept in units of each port's own threshold
        # No one interval raises alone: after a long gap (a node back from silence) a burst or two in
        # its one interval would otherwise read as minutes of loss.
        np.minimum(step, np.float32(0.25), out=step)
        # A port is judged for slow loss only once its own rate has loss_learn_s of history: before, its
        # rate is mostly the fleet's, and a port that always retransmitted more would read as lossy.
        judged = ok & self.retrans_base.learned()
        np.add(self.loss, step.astype(np.float32), out=self.loss, where=judged)
        # Hysteresis: raised at h, cleared under loss_clear of it, so noise around the threshold during a
        # fault is one detection; the ceiling bounds how long it takes to clear once the loss has ended.
        np.clip(self.loss, 0.0, np.float32(p.loss_ceiling), out=self.loss)
        self.lossy |= self.loss >= 1.0
        self.lossy &= self.loss > np.float32(p.loss_clear)
        return self.lossy

    def _update_background(self, clipped: F32, interval: F32, ok: B) -> None:
        """Fold this interval into the fleet's retransmit background (the prior of every port's own rate)."""
        p = self.params
        sample_ok, sample_dt = self.sample.pick(ok), self.sample.pick(interval)
        seconds = float(sample_dt[sample_ok].sum())
        if seconds <= 0:
            return
        now = float(self.sample.pick(clipped)[sample_ok].sum()) / seconds
        step_s = float(np.median(sample_dt[sample_ok]))
        # A plain mean over what has been seen, until that is longer than the half-life allows.
        self._background_s += step_s
        weight = max(1.0 - 0.5 ** (step_s / p.loss_background_halflife_s), step_s / self._background_s)
        self.background_per_s = now if not np.isfinite(self.background_per_s) else (
            self.background_per_s + weight * (now - self.background_per_s))

    def _price_retransmits(self, excess_per_s: F32, fresh: B) -> None:
        """Track each port's retransmitted bytes above its own rate as a share of the bytes it sends."""
        p, table = self.params, self.state.efa
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.maximum(excess_per_s, np.float32(0.0)) * np.float32(p.loss_packet_bytes)
            share /= table.rates["tx_bytes_total"]
        ok = fresh & np.isfinite(share)
        self.retrans_share = ewma(self.retrans_share, share, ok, alpha=p.ewma_alpha)

    def path_fraction(self, *, latency_share: float = 0.0) -> F32:
        """Return, per port, the share of its bandwidth collectives get (1 if healthy), its slowness priced in."""
        out = np.ones(self.state.topology.n_efa, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        out[bad] = self._fraction(bad, latency_share)
        return out

    @property
    def failover_fraction(self) -> float:
        """Return the bandwidth share a node keeps when one of its ports is down (its other ports carry on)."""
        return 1.0 - 1.0 / self.state.topology.efa_ports_per_node

    def _fraction(self, ids: I64, latency_share: float) -> F32:
        """Return the share of a healthy port's pace each port keeps: its throughput share over its stretch.

        A port that keeps its traffic but answers slowly, or retransmits,
        stretches its group's EFA collective by 1 + latency_share x (L - 1) + r
        (docs/throughput-model.md): L its latency over its own level beyond
        what its lost throughput explains (a degraded port's queueing is priced
        in its throughput), r the bytes it retransmits above its own rate over
        the bytes it sends.
        """
        measured = np.clip(np.nan_to_num(self.share[ids], nan=1.0), 0.0, 1.0)
        stretch = slow_path_stretch(np.nan_to_num(self.latency_ratio[ids], nan=1.0), measured,
                                    self.retrans_share[ids], latency_share=latency_share)
        kept = np.maximum(measured / stretch, 0.05)
        down = self.tracker.state[ids] == DOWN
        return np.where(down, np.float32(self.failover_fraction), kept).astype(np.float32)

    def slowest_by_ultraserver(self, *, latency_share: float = 0.0) -> F32:
        """Return each UltraServer's lowest port fraction (1 where every port is healthy)."""
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        np.minimum.at(out, topo.node_ultraserver[topo.efa_node[bad]], self._fraction(bad, latency_share))
        return out
