"""Slow EFA loss (3e-7) against the per-port long-horizon test, at several tick lengths, plus fault-free
controls: time to detect in seconds, and loss_rate raises where there is no fault.

    .venv/bin/python benchmarks/slow-loss-sweep.py            # prints JSON

In process, no MQTT (as `python -m benchmarks detect`); one fault on one port of 4 UltraServers, 5 seeds per
tick length; controls are 4 runs of 16 UltraServers (1,024 ports) over 3,600 s.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches
from rainierd.topology import build_fleet


def raises(ultraservers: int, seconds: float, tick_s: float, seed: int, loss: float | None) -> list[float]:
    """Return the times (s after the fault's start, or after 60 s) at which an EFA port raised loss_rate."""
    topo = build_fleet(1, ultraservers)
    start, ticks = int(60 / tick_s), int(seconds / tick_s)
    faults = [Fault(FaultKind.EFA_LOSS, 5, loss, start, ticks)] if loss else []
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=0.0, faults=faults)
    core = MonitorCore(topo)
    found = []
    for tick in range(ticks):
        frames = [f for _t, f in tick_batches(topo, model.step(tick), publisher="sweep", nodes_per_batch=128)]
        found += [(e.tick - start) * tick_s for e in core.step(frames, now_s=tick * tick_s).events
                  if e.entity == "efa" and e.raised and "loss_rate" in e.reasons]
    return found


def main() -> None:
    started = time.perf_counter()
    report: dict[str, object] = {"loss": 3e-7, "ttd_s": {}}
    for tick_s in (0.5, 1.0, 5.0):
        firsts = [r[0] if (r := raises(4, 1_000, tick_s, seed, 3e-7)) else None for seed in range(5)]
        found = [t for t in firsts if t is not None]
        report["ttd_s"][str(tick_s)] = {  # type: ignore[index]
            "per_seed": firsts, "median": statistics.median(found) if found else None, "found": len(found)}
    control = [len(raises(16, 3_600, 1.0, 100 + seed, None)) for seed in range(4)]
    report["control"] = {"runs": 4, "ports": 1_024, "seconds": 3_600, "loss_rate_raises": control}
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
