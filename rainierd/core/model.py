"""The effective-FP8 throughput model: lost FP8 FLOP/s by cause, per
UltraServer, site and fleet (docs/throughput-model.md has the derivation and a
worked example, which tests/test_model.py checks).

The step formula, its shares and the cause names are ``rainierd/pace.py``'s,
shared with the simulator: each synchronous group runs at the pace of its
slowest member and its collectives at the pace of its slowest path::

    step = (1 - c) / s + c_nl / f_nl + c_efa / f_efa        (healthy: 1)

The group delivers ``effective = healthy / step``, so what it loses is
``effective * (step - 1)``, split over the three terms in proportion to each
term's excess over its healthy value.  A group with a failed or lost member
stalls: it loses all it would deliver healthy, to ``failed_chip`` or
``stale_telemetry``: its own healthy share of peak, learned while it ran
(``HealthyShares``: effective plus what the other causes cost it, with a
minute's half-life), or the median of the running groups' for a group never
seen running.  Per group, so monitor shards value a stall exactly as one
monitor of the whole fleet does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, Floats
from rainierd.core.detect import FleetDetector
from rainierd.core.detect.chips import FAILED, STALE, STRAGGLER
from rainierd.core.throughput import Throughput
from rainierd.pace import CAUSES, SHARES, StepShares, step_excess

__all__ = ["CAUSES", "HealthyShares", "LostByCause", "ModelParams", "group_loss", "lost_by_cause"]

@dataclass(frozen=True, slots=True, kw_only=True)
class ModelParams:
    """The monitor's step shares (defaults: ``rainierd.pace.SHARES``, the simulator's too) and how it learns
    what a stall costs."""

    comm_nl_share: float = SHARES.comm_nl_share
    comm_efa_share: float = SHARES.comm_efa_share
    efa_latency_share: float = SHARES.efa_latency_share
    # How fast a group's learned healthy share of peak follows it (the diurnal swing moves it by a
    # few % over hours): what a stall of the group costs is that share of its peak.
    healthy_share_halflife_s: float = 60.0

    @property
    def shares(self) -> StepShares:
        """Return the step shares these parameters price the step with."""
        return StepShares(comm_nl_share=self.comm_nl_share, comm_efa_share=self.comm_efa_share,
                          efa_latency_share=self.efa_latency_share)


@dataclass(frozen=True, eq=False)
class LostByCause:
    """Lost FP8 FLOP/s per cause, per UltraServer (arrays) and summed per site and fleet."""

    ultraserver: dict[str, F64]
    site: dict[str, F64]

    def fleet(self) -> dict[str, float]:
        """Return the fleet's lost FLOP/s per cause."""
        return {cause: float(values.sum()) for cause, values in self.site.items()}


@dataclass(eq=False)
class HealthyShares:
    """Each UltraServer's healthy share of peak, learned while it runs (NaN: never seen running)."""

    halflife_s: float
    share: F64
    last_s: float = float("nan")

    @classmethod
    def empty(cls, n_ultraservers: int, *, halflife_s: float) -> HealthyShares:
        """Return shares of ``n_ultraservers`` groups that have not run yet."""
        return cls(halflife_s, np.full(n_ultraservers, np.nan))

    def update(self, healthy: F64, running: npt.NDArray[np.bool_], now_s: float) -> None:
        """Fold this analysis's healthy shares of the running groups in (a plain copy where there is none)."""
        dt = now_s - self.last_s if np.isfinite(self.last_s) else 0.0
        self.last_s = now_s
        weight = 1.0 - 0.5 ** (max(dt, 0.0) / self.halflife_s)
        blended = np.where(np.isnan(self.share), healthy, self.share + weight * (healthy - self.share))
        np.copyto(self.share, blended, where=running & np.isfinite(healthy))


def group_loss(
    effective: F64, *, s_min: Floats, f_nl: Floats, f_efa: Floats, params: ModelParams,
) -> dict[str, F64]:
    """Return lost FLOP/s per term (compute, neuronlink, efa) of groups that still run (the speeds and
    fractions in the chips' float32 or in float64: the terms are priced in that precision)."""
    compute, nl, efa = step_excess(s_min, f_nl, f_efa, shares=params.shares)
    # lost = effective * (step - 1), and step - 1 = compute + nl + efa: each
    # term's share of the loss is effective times that term.
    return {"compute": effective * compute, "neuronlink": effective * nl, "efa": effective * efa}


def lost_by_cause(
    throughput: Throughput, detector: FleetDetector, *, params: ModelParams | None = None,
    shares: HealthyShares | None = None,
) -> LostByCause:
    """Return lost FP8 FLOP/s by cause from the throughput and the detectors' verdicts.

    With ``shares`` (kept by the caller across analyses) a stalled group is
    valued at its own healthy share, learned here while it runs; without, or
    for a group never seen running, at the running groups' median.
    """
    params = params or ModelParams()
    topo = detector.state.topology
    n_us = topo.n_ultraservers
    per_us = topo.chips_per_node * topo.nodes_per_ultraserver
    chip_state = detector.chips.tracker.state
    lost_node_chips = detector.cooling.lost_nodes()[topo.chip_node]

    speed = detector.chips.speed().reshape(n_us, per_us)
    slowest = speed.argmin(axis=1)
    # The float32 speed widened exactly, priced in float64 as core/jobmodel.py and the job recording rules price it.
    s_min = np.clip(speed[np.arange(n_us), slowest], 0.05, 1.0).astype(np.float64)
    slowest_is_straggler = (chip_state.reshape(n_us, per_us)[np.arange(n_us), slowest] == STRAGGLER)
    # A node whose every port or link is slow (detect/nodepaths.py) is a path as slow as the share it carries.
    slowest_nl = np.minimum(detector.links.slowest_by_ultraserver(),
                            detector.node_paths.slowest_by_ultraserver("neuronlink"))
    f_nl = np.clip(slowest_nl, 0.05, 1.0).astype(np.float64)
    slowest_efa = np.minimum(detector.efa.slowest_by_ultraserver(latency_share=params.efa_latency_share),
                             detector.node_paths.slowest_by_ultraserver("efa"))
    f_efa = np.clip(slowest_efa, 0.05, 1.0).astype(np.float64)

    failed = (chip_state == FAILED).reshape(n_us, per_us).any(axis=1)
    silent = ((chip_state == STALE) | lost_node_chips).reshape(n_us, per_us).any(axis=1)
    stalled = failed | silent
    effective = throughput.ultraserver_effective
    peak = throughput.ultraserver_peak
    running = ~stalled & (effective > 0)
    share = effective[running] / peak[running] if running.any() else np.array([0.0])
    healthy_share = float(np.median(share)) if share.size else 0.0

    terms = group_loss(effective, s_min=s_min, f_nl=f_nl, f_efa=f_efa, params=params)
    own_share = np.full(n_us, healthy_share)
    if shares is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            healthy = (effective + terms["compute"] + terms["neuronlink"] + terms["efa"]) / peak
        shares.update(healthy, running, detector.state.now_s)
        own_share = np.where(np.isnan(shares.share), healthy_share, shares.share)
    stall_loss = np.maximum(own_share * peak - effective, 0.0)
    zero = np.zeros(n_us)
    per_us_lost = {
        "failed_chip": np.where(failed, stall_loss, zero),
        "stale_telemetry": np.where(silent & ~failed, stall_loss, zero),
        "straggler": np.where(stalled | ~slowest_is_straggler, zero, terms["compute"]),
        "thermal_throttle": np.where(stalled | slowest_is_straggler, zero, terms["compute"]),
        "degraded_neuronlink": np.where(stalled, zero, terms["neuronlink"]),
        "degraded_efa": np.where(stalled, zero, terms["efa"]),
    }
    site = {
        cause: np.bincount(topo.ultraserver_site, weights=v, minlength=topo.n_sites).astype(np.float64)
        for cause, v in per_us_lost.items()
    }
    return LostByCause({c: per_us_lost[c] for c in CAUSES}, {c: site[c] for c in CAUSES})
