"""A simulated fleet's telemetry as a byte stream, for benchmarks that must
measure a monitor without the simulator in the same process.

``python -m benchmarks.feed TOPOLOGY TICKS BATCH_NODES SEED`` writes, for
each tick, its messages as ``u32 topic length | topic | u32 payload length |
payload``, then a ``u32 0`` that ends the tick; ``read_tick`` reads one tick
back.  A batch size of 0 feeds one frame per node.  It makes each tick only
when a byte arrives on its stdin (``request_tick``), so it never competes with
the process it feeds while that one is being measured.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from typing import IO, Final

import numpy as np

from rainierd.fleet.topology import build_topology
from rainierd.runtime.malloc import keep_freed_memory
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.packed import BatchPacker
from rainierd.wire import encode_binary

__all__ = ["START_S", "read_tick", "request_tick", "write_ticks"]

_LEN: Final = struct.Struct("<I")
START_S: Final = 1.8e9  # the fed fleet's tick 0, Unix seconds


def write_ticks(
    out: IO[bytes], topology: str, *, ticks: int, batch_nodes: int, seed: int, requests: IO[bytes] | None = None,
) -> None:
    """Write ``ticks`` ticks of a healthy simulated fleet to ``out`` (each on a byte from ``requests``)."""
    topo = build_topology(topology)
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=START_S)
    timings: dict[str, list[float]] = {"sim_step_s": [], "encode_s": []}
    packer = BatchPacker(topo, publisher="bench", nodes_per_batch=batch_nodes) if batch_nodes else None
    for tick in range(ticks):
        if requests is not None and not requests.read(1):
            break
        started = time.perf_counter()
        sample = model.step(tick)
        stepped = time.perf_counter()
        if packer is not None:  # as the simulator encodes its batches
            encoded = [(topic.encode(), payload) for topic, payload, _ in packer.pack(sample)]
        else:
            encoded = [(topic.encode(), encode_binary(frame))
                       for topic, frame in tick_frames(topo, sample, publisher="bench")]
        timings["sim_step_s"].append(stepped - started)
        timings["encode_s"].append(time.perf_counter() - stepped)
        for topic, payload in encoded:
            out.write(_LEN.pack(len(topic)) + topic + _LEN.pack(len(payload)))
            out.write(payload)
        out.write(_LEN.pack(0))
        out.flush()
    # What the simulator's side cost, for the benchmark's report (never mixed into the stream).
    print(json.dumps(timings), file=sys.stderr, flush=True)


def request_tick(requests: IO[bytes]) -> None:
    """Ask the feeder for its next tick."""
    requests.write(b"t")
    requests.flush()


def read_tick(stream: IO[bytes]) -> list[tuple[str, bytes]] | None:
    """Return the next tick's (topic, payload) messages, or None at the end of the stream."""
    messages: list[tuple[str, bytes]] = []
    while True:
        head = stream.read(4)
        if len(head) < 4:
            return None
        (size,) = _LEN.unpack(head)
        if size == 0:
            return messages
        topic = stream.read(size).decode()
        (size,) = _LEN.unpack(stream.read(4))
        messages.append((topic, stream.read(size)))


if __name__ == "__main__":
    keep_freed_memory()  # as the simulator daemon does
    name, count, batch, seed_arg = sys.argv[1:5]
    write_ticks(sys.stdout.buffer, name, ticks=int(count), batch_nodes=int(batch), seed=int(seed_arg),
                requests=sys.stdin.buffer)
