"""NeuronLink health for the whole fleet: healthy, degraded or down, with the
reasons.  Each link is compared with its own learned level at its node's pace
(the links of its kind its node reports in the same frame, so over the same
seconds whatever the agents' phase and skew) and with the links of its kind
(robust median/MAD), through per-link clipped
CUSUMs for gray degradation; lanes and near-zero traffic are direct evidence of
a hard fault, and a decaying count of drops tells a flapping link.
docs/detection.md explains the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from rainierd import native
from rainierd._types import F32, I64, B
from rainierd.core.detect._baseline import Baseline
from rainierd.core.detect._common import Reason, flag, new_samples, persistence_seconds
from rainierd.core.detect._paths import HEALTHY, NEEDS, PathParams, band, cusum
from rainierd.core.detect._stats import PeerSample, robust_center_scale, row_nanmedian
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.detect._warmup import Warmup
from rainierd.core.detect.nodepaths import NodeSignal
from rainierd.core.state import FleetState
from rainierd.fleet import LINK_KIND_NAMES, TRN2, Trainium2


@dataclass(frozen=True, slots=True, kw_only=True)
class NeuronLinkParams(PathParams):
    """Thresholds of the NeuronLink detector, beyond those it shares with EFA (``PathParams``)."""

    # Error CUSUMs take rates per second, each step weighted by its interval: the same storm
    # raises in the same seconds at any tick (h is in errors; at a 1 s tick, as before).
    errors_cap: float = 10.0  # errors a second counted at most
    errors_k: float = 3.0  # errors a second that are noise
    errors_h: float = 28.0
    drop_below: float = 0.5  # a sample this low with every lane up counts as a drop (with retraining replays)
    # The shortest drop an interval's average must show (flaps last 0.5-3 s: MegaScale): at a long tick a
    # drop of drop_min_s dilutes to 1 - drop_min_s / interval, so the threshold rises to that.
    drop_min_s: float = 0.5
    retrain_replays: float = 20.0  # replays in one interval that mean the link retrained (a CRC burst makes ~5)
    idle_below: float = 0.05  # a node's links of a kind carrying under this share of their kind's centre are idle
    bandwidth_band: float = 0.5  # a learned level under this share of its kind's is degraded whatever it learned
    flap_window_s: float = 60.0  # decay time of the drop count
    # Two drops within the window are flapping: the count after a drop is 1 + e^(-gap / window) >= this.
    flap_drops: float = 1.0 + float(np.exp(-1.0))
    # A link whose last drop was a blip clears this long after the blip ended (and not before clear_after_s
    # clean): merging blips up to 30 s apart (the longest up period of a flap) into one event needs it.
    flap_clear_s: float = 30.0
    # A drop this short is a blip, the flapping signature (down 0.5-3 s, up 5-30 s: MegaScale, Alibaba
    # HPN): only after a blip does a link wait flap_clear_s to clear.  A link that was down longer was
    # reseated, replaced or retrained for good, and clears like any other fault.
    flap_blip_s: float = 15.0
    recent_drop: float = 0.3  # drop count above which a drop was recent (~70 s)


def _columns(ids: I64) -> slice | I64:
    """Return column numbers ``ids`` as a slice when they are one ascending run, else unchanged."""
    if ids.size and int(ids[-1]) - int(ids[0]) == ids.size - 1:
        return slice(int(ids[0]), int(ids[-1]) + 1)
    return ids


@dataclass(eq=False)
class LinkDetector:
    """NeuronLink health for the whole fleet."""

    state: FleetState
    params: NeuronLinkParams = field(default_factory=NeuronLinkParams)
    hardware: Trainium2 = TRN2

    def __post_init__(self) -> None:
        topo = self.state.topology
        n = topo.n_links
        p = self.params
        self.seen = np.zeros(n, dtype=np.uint32)
        # The four CUSUMs' sums are the rows of one array, which the evidence pass steps together.
        self.sums = np.zeros((4, n), np.float32)
        self.band, self.bw, self.latency, self.errors = (
            replace(made, s=row) for made, row in zip(
                (band(n, p), cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap), cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap),
                 cusum(n, p, k=p.errors_k, h=p.errors_h, cap=p.errors_cap)), self.sums, strict=True))
        baseline = {"halflife_s": p.baseline_halflife_s, "learn_s": p.baseline_learn_s, "clip": p.baseline_clip}
        self.bw_base = Baseline.empty(n, **baseline)  # bandwidth / its node's median of its kind (a unit-free share)
        self.latency_base = Baseline.empty(n, **baseline)
        self.latency_warmup = Warmup.of(n, p.latency_seed_samples)
        self.drops = np.zeros(n, np.float32)
        self.was_dropped = np.zeros(n, dtype=bool)
        self.down_s = np.zeros(n, np.float32)  # seconds of the current (or last) run of dropped samples
        self.last_down_s = np.full(n, np.inf, np.float32)  # how long the last drop that ended lasted
        self.up_s = np.full(n, np.inf, np.float32)  # seconds of samples since the last drop ended
        self.was_low = np.zeros(n, dtype=bool)  # the last sample's bandwidth was near zero with lanes up
        self.now_ratio = np.ones(n, np.float32)  # the latest such ratio
        # A drop (lanes gone, or bandwidth far below any noise) raises at once.
        self.tracker = StateTracker.create(n, raise_after_s=[0.0, p.raise_after_s, 0.0], clear_after_s=p.clear_after_s)
        self.sample = PeerSample.of(n)
        self.node_signal = NodeSignal.unknown(topo.n_nodes)  # this analysis's figure a node (nodepaths.py)
        # Which nodes' links of each kind carried traffic at their last sample: only theirs set a kind's
        # centres, so nodes that are idle or whose job is stalled (a checkpoint, a restart: all links near 0)
        # never pull the reference a link without history learns from (issue 21: a job started while half
        # the fleet checkpointed learned 0.07 of nominal for links that carry 0.24, under the 0.5 band).
        # And, within them, only links carrying traffic now (over idle_below of the last centre): at the tick a
        # job stalls, its nodes still count as talking, and half a fleet's links at 0 made the centre 0.
        n_kinds = len(LINK_KIND_NAMES)
        self.talking = np.ones((topo.n_nodes, n_kinds), dtype=bool)
        self.share_ref = np.zeros(n_kinds, np.float32)
        kind = topo.link_kind
        self.kind = kind.astype(np.int8)
        # Every node reports its links in one order (topology.py), so a kind's
        # figure reaches each link by broadcasting over that order, with no
        # gather over millions of links.
        self.per_node = topo.links_per_node
        self.kind_order = kind[:self.per_node].copy()
        assert (kind.reshape(-1, self.per_node) == self.kind_order).all(), "nodes must share one link order"
        # A node's links of one kind, as columns of the (node, link) view: a slice where they are one run
        # (the topology's order), so a kind's pace is taken and divided in place, with no copy.
        self.kind_columns = [_columns(np.flatnonzero(self.kind_order == k)) for k in range(n_kinds)]
        picked = self.sample.pick(np.arange(n, dtype=np.int64))
        self._sample_group = (picked // self.per_node) * n_kinds + self.kind_order[picked % self.per_node]
        hw = self.hardware
        # The nominal figure of each kind only sets the units (a share of nominal); no threshold is against it.
        self.nominal = np.array([hw.neuronlink_ring_bytes_s if k == 1 else hw.neuronlink_intra_bytes_s
                                 for k in range(n_kinds)], np.float32)

    def _count_drops(self, dropped: B, fresh: B, dt: F32, held: F32) -> None:
        """Decay each link's drop count over its interval, count a drop where one begins, time each drop.

        Only links that ever dropped have anything to move (a drop count of 0
        decays to 0, an up time of infinity stays infinite, and ``dropped``
        is a few links a tick), so each step visits those links alone: as
        masked passes over every link these were ~65 ms a tick at rainier-1m's
        3M links (issue 39), where finding the few is three cheap passes.
        """
        counting = np.flatnonzero(self.drops)
        counting = counting[fresh[counting]]
        interval = np.fmax(dt[counting], np.float32(0.0))
        self.drops[counting] *= np.exp(-interval / np.float32(self.params.flap_window_s)).astype(np.float32)
        now = np.flatnonzero(dropped)  # fresh, every one
        before = np.flatnonzero(self.was_dropped)
        begins = now[~self.was_dropped[now]]
        self.drops[begins] += np.float32(1.0)
        self.down_s[begins] = np.float32(0.0)
        self.down_s[now] += np.nan_to_num(held[now], nan=0.0)
        ended = before[fresh[before] & ~dropped[before]]
        self.last_down_s[ended] = self.down_s[ended]
        self.up_s[now] = np.float32(0.0)
        # Up time is sample time (the publisher's interval, a lost sample's included), so the flap hold ends
        # flap_clear_s after the last blip however many samples were lost; capped at one typical interval a
        # sample, a link losing one sample in three was held 45 s instead of 30 (issue 38).
        timing = np.flatnonzero(np.isfinite(self.up_s))
        timing = timing[fresh[timing] & ~dropped[timing]]
        self.up_s[timing] += np.nan_to_num(dt[timing], nan=0.0)
        self.was_dropped[ended] = False
        self.was_dropped[now] = True

    def _kind_centers(
        self, share: F32, latency: F32, judged: B, carrying: B | None = None,
    ) -> tuple[F32, F32]:
        """Return each kind's median bandwidth share and latency, on the peer sample (``carrying``, on the
        sample, narrows the links whose share and latency count).

        They are the reference of a link that has no history yet, and the
        latency band against peers that no learning moves.  (A learned
        bandwidth level is held against its node's links of its kind instead,
        ``_far_level``: levels learned by different agents at different
        moments of a step are in different units.)
        """
        picked = {name: self.sample.pick(a) for name, a in
                  (("share", share), ("latency", latency), ("judged", judged), ("kind", self.kind))}
        if carrying is not None:
            picked["judged"] = picked["judged"] & carrying
        n_kinds = len(LINK_KIND_NAMES)
        share_center, lat_center = (np.full(n_kinds, np.nan, np.float32) for _ in range(2))
        for kind in range(n_kinds):
            of_kind = picked["kind"] == kind
            share_center[kind], _ = robust_center_scale(picked["share"], of_kind & picked["judged"], floor=0.0)
            lat_center[kind], _ = robust_center_scale(
                picked["latency"], of_kind & picked["judged"] & (picked["latency"] > 0), floor=0.0)
        return share_center, lat_center

    def _traffic_centers(self, share: F32, latency: F32, judged: B) -> tuple[F32, F32]:
        """Return ``_kind_centers`` over the judged links that carry traffic (``talking``, ``share_ref``),
        deciding which carry it on the peer sample only (no fleet-sized temporary)."""
        ref = self.share_ref[self.sample.pick(self.kind)] * np.float32(self.params.idle_below)
        carrying = self.talking.reshape(-1)[self._sample_group] & (self.sample.pick(share) > ref)
        centers = self._kind_centers(share, latency, judged, carrying)
        np.copyto(self.share_ref, centers[0], where=np.isfinite(centers[0]))
        return centers

    def _communicating(self, pace: F32) -> None:
        """Remember which nodes' links of each kind carry traffic (``pace``, per node and kind, over idle_below
        of the kind's centre); the evidence pass reads the same figure per link."""
        talking = pace > np.float32(self.params.idle_below)
        np.copyto(self.talking, talking, where=np.isfinite(pace))

    def _pace(self, relative: F32, judged: B) -> F32:
        """Return each node's pace per kind, (nodes, kinds): the median ``relative`` of its judged links of
        that kind (NaN where it has none).

        A node's links of one kind are its peers: its agent reports them in
        one frame, so their figures cover the same seconds whatever the
        agents' phase, skew and jitter, and they carry the same job's traffic.
        The links of other nodes, sampled at other moments of a training step
        whose traffic swings x16, are not (issue 22).
        """
        masked = np.where(judged, relative, np.float32(np.nan)).reshape(-1, self.per_node)
        return np.stack([row_nanmedian(masked[:, cols]) for cols in self.kind_columns], axis=1)

    def update(self, tick: int) -> Transitions:
        """Fold in the links' new samples; return the state changes.

        Each link's share of nominal is held against its node's links of its
        kind in the same frame (its pace: so a node or job that slows or
        idles as a whole, its job's pace, a straggler, the diurnal swing, is
        not a group of bad links), then against the link's own usual share
        of them (its level).  Levels are shares of the node's median, free of
        any unit: learned as bandwidth over a fleet-wide centre, taken
        across agents that sample out of phase through a x16 step, each
        link's level carried the centre of the seconds it learned in, and a
        link that stopped learning before its node's others kept a unit 5 %
        off theirs, for good (the training profile's control, issue 22).
        Latency is held against its own level (its kind's median until it
        has history).  The wide band against peers: a link far slower than
        its kind, or whose own level has sunk far under its node's links of
        its kind, is degraded whatever its baseline learned.  Until a link
        has history it is judged only by hard evidence and the band
        (_baseline.py).  A drop raises at once (``_downs`` says what one
        is); a link that blipped recently clears only flap_clear_s after its
        last blip ended (``_track``).

        What needs the fleet (the paces, the kinds' centres, the robust
        scales on the peer sample) numpy computes; every link's evidence,
        its four CUSUMs and its reasons are one compiled pass
        (``native.LinkEvidence``: as ~40 numpy passes, ~120 ms of
        rainier-1m's tick, issue 39); the drop counts and the tracker follow.
        """
        p, table = self.params, self.state.links
        # A link is judged only on samples that carry its bandwidth and lanes;
        # without them it is unknown (never healthy, never down by default).
        fresh = new_samples(table, self.seen) & table.has(*NEEDS["neuronlink"])
        np.copyto(self.seen, table.samples)
        dt = table.dt_s
        # Evidence, persistence and learning count a sample after a gap as one typical interval.
        held = persistence_seconds(dt, fresh, self.sample, self.state.node_cadence.typical_s())
        # Units only: a share of nominal, each node's links divided by their kinds' figures in one broadcast.
        share = (table.gauges["bw_bytes_s"].reshape(-1, self.per_node) / self.nominal[self.kind_order]).reshape(-1)
        latency = table.gauges["latency_us"]
        talking = fresh & (table.gauges["lanes_up"] > 0)
        _, lat_center = self._traffic_centers(share, latency, talking)
        # The pace stays one figure a node and kind: the fleet-sized temporaries of this update are most of
        # the monitor's peak memory at a million chips.
        pace = self._pace(share, talking)
        del share, talking
        # The node as a whole is judged against the nodes carrying the same work, over whole steps (nodepaths.py).
        self.node_signal = NodeSignal.of(pace.reshape(-1), dt, fresh, per_node=self.per_node,
                                         values_per_node=pace.shape[1])
        with np.errstate(invalid="ignore", divide="ignore"):
            self._communicating(pace / self.share_ref)
        links = native.LinkEvidence(
            per_node=self.per_node, kind_order=self.kind_order, bw=table.gauges["bw_bytes_s"], latency=latency,
            lanes=table.gauges["lanes_up"], dt=dt, held=held, crc=table.rates["crc_errors_total"],
            replay=table.rates["replay_total"], fresh=fresh, pace=pace, share_ref=self.share_ref,
            nominal=self.nominal, lat_center=lat_center, bw_level=self.bw_base.level,
            bw_history=self.bw_base.history_s, lat_level=self.latency_base.level,
            lat_history=self.latency_base.history_s)
        figures = self._figures(1.0, 1.0)
        ratio, bw_judged, lat_ratio, lat_judged = links.sample(self.sample.index, figures)
        _, bw_scale = robust_center_scale(ratio, bw_judged, floor=p.bw_floor)
        _, lat_scale = robust_center_scale(lat_ratio, lat_judged, floor=p.latency_floor)
        share_of_node, candidate, reasons, dropped, bw_learnable, lat_ok = links.evidence(
            self._figures(bw_scale, lat_scale),
            (Reason.LANES, Reason.BANDWIDTH, Reason.LATENCY, Reason.ERRORS, Reason.DOWN),
            now_ratio=self.now_ratio, was_low=self.was_low, sums=self.sums)
        del links
        self._count_drops(dropped, fresh, dt, held)
        flag(reasons, self.drops >= p.flap_drops, Reason.FLAPPING)
        changes = self._track(candidate, reasons, fresh, tick, held)
        del candidate, reasons
        self._learn(share_of_node, latency, bw_learnable, lat_ok, held)
        return changes

    def _figures(self, bw_scale: float, lat_scale: float) -> list[float]:
        """Return the evidence pass's figures (``native.NL_FIGURES``, then each CUSUM's), with this tick's scales.

        A drop, read by the pass: no lane up is the link down.  Bandwidth
        alone never is, in one sample: a healthy link's interval average has
        heavy tails (a stall, contention), so near-zero bandwidth
        (``down_below`` of its level) with lanes up must persist for two
        samples, and a dip under ``drop_below`` of its level (at a long
        tick, under 1 - drop_min_s / interval) with every lane up counts as a
        drop (a brief down inside the interval) only with the replays a
        retraining link makes (``retrain_replays``): it replays its whole
        in-flight window, tens of packets, where a CRC burst on a healthy
        link replays a few.  Errors are CRC errors and replays a second.
        """
        p = self.params
        figures = [p.baseline_learn_s, p.down_below, p.drop_below, p.drop_min_s, p.retrain_replays,
                   float(self.hardware.neuronlink_lanes), p.latency_band, p.bandwidth_band, p.idle_below, bw_scale,
                   lat_scale]
        for made in (self.band, self.bw, self.latency, self.errors):
            figures += [made.k, made.h, made.cap, made.h / made.samples, made.ceiling]
        return figures

    def _track(self, candidate: npt.NDArray[np.int8], reasons: npt.NDArray[np.int32], fresh: B, tick: int,
               held: F32) -> Transitions:
        """Fold the candidates into the tracker, a link within flap_clear_s of its last blip held; return the
        state changes, and the links found flapping in the state they are in (``_found_flapping``)."""
        p = self.params
        holding = (self.drops > p.recent_drop) & (self.last_down_s < p.flap_blip_s) & (self.up_s < p.flap_clear_s)
        unhealthy = self.tracker.unhealthy()
        was_flapping = (self.tracker.reason[unhealthy] & np.int32(Reason.FLAPPING)) != 0
        changes = self.tracker.update(candidate, reasons, fresh, tick, seconds=held, holding=holding,
                                      at_s=self.state.links.t_s)
        return self._found_flapping(changes, unhealthy[~was_flapping])

    def _found_flapping(self, changes: Transitions, candidates: I64) -> Transitions:
        """Return ``changes`` with the links of ``candidates`` (unhealthy before this update, not flapping)
        that are flapping now in the same state: their event names it (the raise, on the first drop, cannot)."""
        t = self.tracker
        state = t.state[candidates]
        found = candidates[(state > 0) & ((t.reason[candidates] & np.int32(Reason.FLAPPING)) != 0)
                           & ~np.isin(candidates, changes.ids)]
        if not found.size:
            return changes
        now = t.state[found].astype(np.int64)
        ids = np.concatenate([changes.ids, found])
        order = np.argsort(ids, kind="stable")
        return Transitions(ids[order], np.concatenate([changes.before, now])[order],
                           np.concatenate([changes.after, now])[order])

    def _learn(self, level: F32, latency: F32, bw_ok: B, lat_ok: B, dt: F32) -> None:
        """Fold the sample into the baselines of healthy links with little evidence against them (_baseline.py)."""
        p = self.params
        healthy = self.tracker.state == HEALTHY
        self.bw_base.update(level, bw_ok & healthy & (self.bw.s < 0.25 * p.z_h), dt)
        quiet = lat_ok & healthy & (self.latency.s < 0.25 * p.z_h)
        self.latency_base.update(latency, self.latency_warmup.update(self.latency_base, latency, quiet, dt), dt)

    def path_fraction(self) -> F32:
        """Return, per link, the bandwidth share its collectives get now (1 if healthy).

        From the latest sample, not the smoothed one: a flapping link held
        unhealthy between drops costs only while it is actually down.  A link
        down for its whole last interval costs half (its traffic reroutes over
        a neighbour); one down for part of it, that part of half (``_fraction``).
        """
        out = np.ones(self.state.topology.n_links, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        out[bad] = self._fraction(bad)
        return out

    def _fraction(self, ids: I64) -> F32:
        """Return the path fraction of links ``ids`` over their last interval.

        A link that dropped in it (lanes gone, or a retraining dip) carried
        its traffic for the share of the interval its bandwidth shows and
        rerouted it over a neighbour, at half the bandwidth, for the rest:
        0.5 + 0.5 x that share (0.5 for a whole interval down).  Priced as
        wholly down, a flap of 0.5-3 s cost its job 1.5-7.6 times its truth
        (the detection benchmark's job rows).  A flapping link up between its
        drops costs nothing; any other unhealthy link keeps the share of its
        level it carries.
        """
        p = self.params
        lanes = self.state.links.gauges["lanes_up"][ids]
        ratio = self.now_ratio[ids]
        dropped = self.was_dropped[ids] | (lanes == 0) | (ratio < p.down_below)
        carried = np.clip(ratio, 0.0, 1.0)
        rerouted = np.float32(0.5) + np.float32(0.5) * carried
        # Up again between the drops of a flapping episode, every lane up: held unhealthy by the flap hold, it
        # costs nothing until it drops again (priced by its noisy ratio, the slowest path of its job most seconds).
        between_drops = ~dropped & (self.drops[ids] > p.recent_drop) & (lanes == self.hardware.neuronlink_lanes)
        kept = np.where(between_drops, np.float32(1.0), np.clip(ratio, 0.05, 1.0))
        return np.where(dropped, rerouted, kept).astype(np.float32)

    def slow_paths(self) -> tuple[I64, F32]:
        """Return the unhealthy links and the path fraction each keeps (every other link's is 1), for
        reductions over other groupings than the UltraServer (a job's links: ``core/jobmodel.py``)."""
        bad = self.tracker.unhealthy()
        return bad, self._fraction(bad)

    def slowest_by_ultraserver(self) -> F32:
        """Return each UltraServer's lowest path fraction (1 where every link is healthy).

        Only unhealthy links can be below 1, so only they are visited.
        """
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        np.minimum.at(out, topo.node_ultraserver[topo.link_node[bad]], self._fraction(bad))
        return out
