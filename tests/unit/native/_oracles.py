"""What the detectors' numpy oracles (bd1c9ba's code, kept only here) share: the latency deviation the compiled
passes replaced, and the tick-by-tick comparison of a detector run by the monitor with its oracle run beside it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, B
from rainierd.core.analysis import MonitorCore
from rainierd.core.detect._stats import PeerSample, robust_center_scale
from rainierd.core.detect._tracker import Transitions
from rainierd.fleet.topology import build_fleet
from rainierd.sim.faults import Fault
from rainierd.sim.fleet import FleetModel, FleetParams
from rainierd.sim.frames import tick_frames

State = Callable[[object], dict[str, npt.NDArray[np.generic]]]


def deviation(values: F32, reference: F32, ok: B, *, floor: float, sample: PeerSample) -> F32:
    """Return (values / reference - 1) in robust sigmas of that ratio over the fleet (0 where not ``ok``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        dev: F32 = np.divide(values, reference, dtype=np.float32)
    _, scale = robust_center_scale(dev, ok, floor=floor, sample=sample)
    dev -= np.float32(1.0)
    dev /= np.float32(scale)
    np.copyto(dev, np.float32(0.0), where=~ok)
    return dev


def compare_ticks(faults: list[Fault], *, seed: int, ticks: int, detector: Callable[[MonitorCore], object],
                  oracle: Callable[[MonitorCore], object], state: State) -> int:
    """Run a 4-UltraServer fleet with ``faults`` through a monitor and, beside it on the same state, the oracle
    made by ``oracle``; assert ``state`` of the monitor's ``detector`` and of the oracle byte for byte after
    every tick; return how many entities the oracle raised."""
    topo = build_fleet(1, 4)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=0.0,
                       params=FleetParams(time_scale=86_400 / ticks), faults=faults)
    core = MonitorCore(topo)
    numpy_detector = oracle(core)
    raised = 0
    for tick in range(ticks):
        core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="t")])
        changes: Transitions = numpy_detector.update(tick)  # type: ignore[attr-defined]
        ours, theirs = state(detector(core)), state(numpy_detector)
        for name, value in ours.items():
            assert value.tobytes() == theirs[name].tobytes(), f"{name} at tick {tick}"
        raised += int(np.count_nonzero(changes.after))
    return raised
