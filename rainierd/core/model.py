"""The effective-FP8 throughput model's pricing of one synchronous group:
what it loses by term of its step, and what a stall of it costs
(docs/throughput-model.md has the derivation and a worked example, which
tests/unit/core/test_model.py checks).  Groups are jobs, or an UltraServer's capacity
in no job (``core/jobmodel.py`` prices them, ``core/fleetloss.py`` adds the
prices up at every level).

The step formula, its shares and the cause names are ``rainierd/fleet/pace.py``'s,
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
from rainierd.fleet import SHARES, StepShares, step_excess


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelParams:
    """The monitor's step shares (defaults: ``rainierd.fleet.pace.SHARES``, the simulator's too) and how it learns
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


@dataclass(eq=False)
class HealthyShares:
    """Each group's healthy share of peak, learned while it runs (NaN: never seen running).

    Given which groups are ``steady`` (stepping, not in a quiet phase such
    as a checkpoint: ``core/jobphase.py``'s quiet), it learns only a steady
    analysis whose neighbours, the one before and the one after, were steady
    too: each analysis is held back one analysis and learned, or dropped,
    then.  A sample that straddles the start or the end of a checkpoint
    (partly stepping, partly quiet) is not steady work either, and only the
    next analysis can tell the first of them.  Learned through a checkpoint,
    a job's share sank with a minute's half-life, and a chip failing soon
    after was priced at 0.73 of its truth (issue 38).
    """

    halflife_s: float
    share: F64
    last_s: float = float("nan")
    # The held-back analysis (``steady`` given): its figures, the weight it would have had, and whether it
    # may be learned once the next analysis is steady too.  ``was_steady``: the last analysis's steady groups.
    held: F64 | None = None
    held_weight: float = 0.0
    held_learns: npt.NDArray[np.bool_] | None = None
    was_steady: npt.NDArray[np.bool_] | None = None

    @classmethod
    def empty(cls, n_ultraservers: int, *, halflife_s: float) -> HealthyShares:
        """Return shares of ``n_ultraservers`` groups that have not run yet."""
        return cls(halflife_s, np.full(n_ultraservers, np.nan))

    def update(
        self, healthy: F64, running: npt.NDArray[np.bool_], now_s: float, *,
        steady: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """Fold this analysis's healthy shares of the running groups in (a plain copy where there is none);
        with ``steady``, fold the analysis before's in where both are steady, and hold this one back."""
        dt = now_s - self.last_s if np.isfinite(self.last_s) else 0.0
        self.last_s = now_s
        weight = 1.0 - 0.5 ** (max(dt, 0.0) / self.halflife_s)
        if steady is None:
            self._fold(healthy, running & np.isfinite(healthy), weight)
            return
        if self.held is not None and self.held_learns is not None:
            self._fold(self.held, self.held_learns & steady, self.held_weight)
        # A monitor's first analysis has no neighbour before it: taken as steady.
        before = self.was_steady if self.was_steady is not None else np.ones(steady.shape, bool)
        self.held, self.held_weight = healthy.copy(), weight
        self.held_learns = running & np.isfinite(healthy) & steady & before
        self.was_steady = steady.copy()

    def _fold(self, healthy: F64, learns: npt.NDArray[np.bool_], weight: float) -> None:
        """Blend ``healthy`` into the shares where ``learns`` (a plain copy where none is learned yet)."""
        blended = np.where(np.isnan(self.share), healthy, self.share + weight * (healthy - self.share))
        np.copyto(self.share, blended, where=learns)


def group_loss(
    effective: F64, *, s_min: Floats, f_nl: Floats, f_efa: Floats, params: ModelParams,
) -> dict[str, F64]:
    """Return lost FLOP/s per term (compute, neuronlink, efa) of groups that still run (the speeds and
    fractions in the chips' float32 or in float64: the terms are priced in that precision)."""
    compute, nl, efa = step_excess(s_min, f_nl, f_efa, shares=params.shares)
    # lost = effective * (step - 1), and step - 1 = compute + nl + efa: each
    # term's share of the loss is effective times that term.
    return {"compute": effective * compute, "neuronlink": effective * nl, "efa": effective * efa}
