"""The training step both sides price: its shares, its formula, and the causes
a slower step is charged to; vocabulary shared by the simulator (the world,
which computes the truth with it) and the monitor's throughput model (the
observer, which estimates it), so that neither imports the other and the two
cannot drift apart (docs/throughput-model.md has the derivation).

Each synchronous group runs at the pace of its slowest member and its
collectives at the pace of its slowest path.  With ``c_nl`` and ``c_efa`` the
shares of a healthy step spent in NeuronLink and EFA collectives that compute
does not hide, ``c = c_nl + c_efa``, ``s`` the slowest member's speed and
``f_nl``, ``f_efa`` the bandwidth shares its slowest paths keep::

    step = (1 - c) / s + c_nl / f_nl + c_efa / f_efa        (healthy: 1)

and ``step - 1`` is the sum of the three terms' excesses over their healthy
values (``step_excess``), which is how a loss is split over its causes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from rainierd._types import F64, Floats

# Every cause of lost FP8 FLOP/s, in the order the exporter and the benchmarks list them.
CAUSES: Final = (
    "failed_chip", "thermal_throttle", "straggler", "degraded_neuronlink", "degraded_efa", "stale_telemetry",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepShares:
    """Shares of a healthy step in collectives that compute does not hide (assumed; configurable)."""

    comm_nl_share: float = 0.15
    comm_efa_share: float = 0.10
    # Assumption (no public figure): the share of an EFA collective's time that is latency-bound (small
    # messages, synchronisation) rather than bandwidth-bound: a port L times slower to answer stretches it
    # by 1 + share x (L - 1).
    efa_latency_share: float = 0.3

    @property
    def comm_share(self) -> float:
        """Return the share of a healthy step spent in collectives."""
        return self.comm_nl_share + self.comm_efa_share


# The defaults of the simulator's FleetParams and the monitor's ModelParams: one source for both.
SHARES: Final = StepShares()


def step_time(s_min: F64, f_nl: F64, f_efa: F64, *, shares: StepShares) -> F64:
    """Return each group's step time relative to a healthy one (1 when healthy)."""
    compute = (1.0 - shares.comm_share) / s_min
    return np.asarray(compute + shares.comm_nl_share / f_nl + shares.comm_efa_share / f_efa, dtype=np.float64)


def step_excess(s_min: Floats, f_nl: Floats, f_efa: Floats, *, shares: StepShares) -> tuple[F64, F64, F64]:
    """Return each term's excess over its healthy value (compute, NeuronLink, EFA); they sum to step - 1."""
    compute = (1.0 - shares.comm_share) * (1.0 / s_min - 1.0)
    nl = shares.comm_nl_share * (1.0 / f_nl - 1.0)
    efa = shares.comm_efa_share * (1.0 / f_efa - 1.0)
    return np.asarray(compute, dtype=np.float64), np.asarray(nl, dtype=np.float64), np.asarray(efa, dtype=np.float64)


def path_stretch(latency_ratio: F64, retrans_share: F64, *, latency_share: float) -> F64:
    """Return how much a path stretches its group's EFA collective: 1 + latency_share x (L - 1) + r.

    ``latency_ratio`` is L, the path's latency over its healthy level beyond
    what its lost throughput explains (at least 1); ``retrans_share`` is r,
    the bytes it retransmits beyond its usual rate over the bytes it sends.
    """
    return np.asarray(1.0 + latency_share * (latency_ratio - 1.0) + retrans_share, dtype=np.float64)
