"""Slow EFA loss (3e-7) against the per-port long-horizon test, at several tick lengths, plus fault-free
controls: time to detect in seconds, and loss_rate raises where there is no fault.

    .venv/bin/python benchmarks/slow-loss-sweep.py            # prints JSON
    .venv/bin/python benchmarks/slow-loss-sweep.py --tripled  # issue 22: a port's trickle tripled

In process, no MQTT (as `python -m benchmarks detect`); one fault on one port of 4 UltraServers, 5 seeds per
tick length; controls are 4 runs of 16 UltraServers (1,024 ports) over 3,600 s.

``--tripled`` instead: on the realistic profile (three sites of one UltraServer: trickles of 0.2, 0.8 and
0.4/s, lognormal across ports), one port per seed retransmits three times its own trickle from
``--onset`` seconds after the monitor starts (600: a port with ten minutes of history, as after a restart
without a checkpoint); time to detect over ``--seeds`` seeds at 1 s and 5 s ticks, and every other port's
raises as a control.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.fleet.topology import build_fleet
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches
from rainierd.sim.profile import PROFILES


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


def tripled(seed: int, tick_s: float, onset_s: float, watch_s: float) -> tuple[float, float | None, int]:
    """Return (the port's trickle, seconds from onset to its first raise or None, raises of other ports)."""
    topo = build_fleet(3, 1)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=0.0, profile=PROFILES["realistic"])
    port = int(np.random.default_rng(seed).integers(topo.n_efa))
    rate = float(model.statics.efa_retrans_per_s[port])  # the port's true trickle, to triple
    core, rng = MonitorCore(topo), np.random.default_rng(seed + 1)
    first, others = None, 0
    for tick in range(int((onset_s + watch_s) / tick_s)):
        sample = model.step(tick)
        if tick * tick_s >= onset_s:  # kept in the model's records: a counter only grows
            sample.efa["retrans_pkts_total"][port] += np.uint64(rng.poisson(2.0 * rate * tick_s))
        frames = [f for _t, f in tick_batches(topo, sample, publisher="sweep", nodes_per_batch=128)]
        for e in core.step(frames, now_s=tick * tick_s).events:
            if e.entity == "efa" and e.raised:
                if e.id == port and first is None and tick * tick_s >= onset_s:
                    first = tick * tick_s - onset_s
                elif e.id != port:
                    others += 1
    return rate, first, others


def main_tripled(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    report: dict[str, object] = {"onset_s": args.onset, "watch_s": args.watch, "ttd_s": {}}
    for tick_s in (1.0, 5.0):
        runs = [tripled(seed, tick_s, args.onset, args.watch) for seed in range(args.seeds)]
        found = sorted(t for _r, t, _o in runs if t is not None)
        report["ttd_s"][str(tick_s)] = {  # type: ignore[index]
            "per_seed": [{"trickle_per_s": round(r, 3), "ttd_s": t} for r, t, _o in runs],
            "found": len(found), "median": statistics.median(found) if found else None,
            "p95": float(np.percentile(found, 95)) if found else None,
            "other_ports_raised": sum(o for _r, _t, o in runs),
            "other_port_hours": round(sum(191 * (args.onset + args.watch) / 3600 for _ in runs), 1)}
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tripled", action="store_true", help="a port's trickle tripled (issue 22)")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--onset", type=float, default=600.0, help="seconds after the monitor starts")
    parser.add_argument("--watch", type=float, default=900.0, help="seconds watched after the onset")
    args = parser.parse_args()
    if args.tripled:
        main_tripled(args)
        return
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
