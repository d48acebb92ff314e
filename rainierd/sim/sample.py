"""What one simulated tick yields: every record the fleet's agents would send,
and the ground truth only the simulator knows; the values that cross from the
fleet model to the framing (``sim/frames.py``) and the truth topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, U64, B
from rainierd.sim.faults import Fault


@dataclass(frozen=True, eq=False)
class JobTruth:
    """What the simulator knows to be true of one job for one tick (only when the fleet runs jobs)."""

    id: str
    ultraservers: tuple[int, ...]
    start_s: float
    phase: str  # running, checkpoint, eval or restarting (sim/workload.py)
    chips: int  # present chips the job holds
    peak_flops: float
    effective_flops: float
    lost_flops: dict[str, float]  # by fault cause; a checkpoint or a restart is a phase, charged to none
    stall_s: float  # seconds since it started spent in checkpoints and restarts, this tick included

    @property
    def goodput(self) -> float:
        """Return the job's effective over its chips' peak FP8 FLOP/s."""
        return self.effective_flops / self.peak_flops if self.peak_flops else 0.0


@dataclass(frozen=True, eq=False)
class TickTruth:
    """What the simulator knows to be true for one tick."""

    tick: int
    t_s: float
    chips: int
    peak_flops: float
    delivered_flops: float
    effective_flops: float
    lost_flops: dict[str, float] = field(default_factory=dict)  # by cause, fleet-wide
    active_faults: tuple[Fault, ...] = ()
    fault_lost_flops: tuple[float, ...] = ()  # per active fault: its synchronous group's loss
    jobs: tuple[JobTruth, ...] = ()  # per active job, when the fleet runs jobs
    unallocated: tuple[int, ...] | None = None  # UltraServers no job holds (idle, not lost); None: no jobs
    unallocated_chips: int = 0  # their present chips
    unallocated_peak_flops: float = 0.0  # and those chips' peak: capacity unallocated, not lost


@dataclass(frozen=True, eq=False)
class TickSample:
    """Every record of one tick; a node's frame is a slice of these arrays."""

    tick: int
    t_s: float
    chips: npt.NDArray[np.void]
    links: npt.NDArray[np.void]
    efa: npt.NDArray[np.void]
    cooling: npt.NDArray[np.void]
    facility: npt.NDArray[np.void]
    truth: TickTruth
    chip_silent: B
    node_silent: B
    node_t_s: F64  # when each node says it sampled (Unix seconds, its own clock); t_s is the tick's nominal time
    node_reset: B  # nodes whose agent restarted this tick: their counters began again from zero
    node_seq: U64  # each node's frame sequence number: ticks since its agent (re)started, as a real agent counts
    # When each node truly sampled (Unix seconds): node_t_s less its agent's clock offset (the same without skew).
    node_sampled_t_s: F64 | None = None
