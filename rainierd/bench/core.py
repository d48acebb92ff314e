"""``rainierd bench core``: what one tick costs at a given fleet size, stage by
stage, measured in process with no MQTT.

Stages: building the topology; the simulator's model step; encoding every
node's frame; decoding and admitting them (the monitor's per-message work);
the monitor core proper, the batched scatter plus the throughput model; and
detection, every detector plus the lost-by-cause model.
Medians over ``--repeat`` ticks, after one warm-up tick.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rainierd.core import FleetState, Ingest, IngestStats, compute_throughput
from rainierd.core.detect import FleetDetector
from rainierd.core.model import lost_by_cause
from rainierd.hardware import TRN2
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.topology import build_topology
from rainierd.wire import decode_frame, encode_binary

__all__ = ["bench_core", "main"]


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def bench_core(preset: str, *, repeat: int, seed: int) -> dict[str, Any]:
    """Return the per-stage medians (seconds) and sizes for ``preset``."""
    build_s = [_timed(lambda: build_topology(preset))[0] for _ in range(3)]
    topo = build_topology(preset)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=1.7e9)
    state = FleetState(topo)
    ingest = Ingest(state, IngestStats())
    detector = FleetDetector(state, peak_flops=TRN2.fp8_dense_flops)
    stages: dict[str, list[float]] = {k: [] for k in ("sim_step", "encode", "decode_accept", "core", "detect")}
    frame_bytes = 0
    for tick in range(repeat + 1):
        step_s, sample = _timed(lambda tick=tick: model.step(tick))  # type: ignore[misc]
        encode_s, payloads = _timed(
            lambda sample=sample: [  # type: ignore[misc]
                encode_binary(f) for _t, f in tick_frames(topo, sample, publisher="bench")
            ]
        )

        def admit(payloads: list[bytes] = payloads) -> None:
            for payload in payloads:
                ingest.accept(decode_frame(payload, max_bytes=1 << 20, check_finite=False)[0])

        decode_s, _ = _timed(admit)

        def core() -> Any:
            ingest.flush()
            return compute_throughput(state, peak_flops_per_chip=TRN2.fp8_dense_flops, stale_after_ticks=3)

        core_s, throughput = _timed(core)

        def detect(throughput: Any = throughput, tick: int = tick) -> None:
            detector.update(tick)
            lost_by_cause(throughput, detector)

        detect_s, _ = _timed(detect)
        frame_bytes = sum(len(p) for p in payloads)
        if tick == 0:
            continue  # warm-up: first-touch page faults, caches
        for name, value in zip(stages, (step_s, encode_s, decode_s, core_s, detect_s), strict=True):
            stages[name].append(value)
    return {
        "benchmark": "core",
        "topology": preset,
        "chips": topo.n_chips,
        "nodes": topo.n_nodes,
        "links": topo.n_links,
        "efa_ports": topo.n_efa,
        "repeat": repeat,
        "topology_build_s_median": statistics.median(build_s),
        "per_tick_s_median": {name: statistics.median(v) for name, v in stages.items()},
        "frames_per_tick": topo.n_nodes + topo.n_sites,
        "bytes_per_tick": frame_bytes,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    result = bench_core(args.topology, repeat=max(1, args.repeat), seed=args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"core benchmark, topology {result['topology']}: {result['chips']:,} chips, "
          f"{result['frames_per_tick']:,} frames ({result['bytes_per_tick'] / 1e6:.1f} MB) a tick")
    print(f"  topology build        {result['topology_build_s_median'] * 1e3:9.1f} ms")
    for name, seconds in result["per_tick_s_median"].items():
        print(f"  {name:<20}  {seconds * 1e3:9.1f} ms  (median of {result['repeat']})")
    print(f"  max RSS               {result['max_rss_bytes'] / 2**20:9.0f} MiB")
    return 0
