"""What checkpointing the learned state costs at a topology (``rainier`` by default): the file's size, the
copy taken while no analysis runs (on the analysis path, off the event loop), the write (a task analyses do not
wait for), and the restore at start; the stream checkpoint beside it for comparison.

    .venv/bin/python benchmarks/learned-checkpoint.py [--topology rainier] [--repeat 3]   # prints JSON

In process, no MQTT: a fresh monitor core learns from one simulated tick (so its arrays hold numbers, not
only NaN), then each step is timed ``--repeat`` times through the same functions the monitor uses
(``MonitorCore.learned``, ``checkpoint_file.save_checkpoint``, ``load_checkpoint``,
``MonitorCore.restore_learned``); medians are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.fleet.topology import build_topology
from rainierd.monitor.checkpoint_file import load_checkpoint, save_checkpoint
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches


def timed(step: object, repeat: int) -> float:
    """Return the median wall seconds of ``repeat`` calls of ``step``."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        step()  # type: ignore[operator]
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="rainier")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    topo = build_topology(args.topology)
    core = MonitorCore(topo)
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=0.0)
    for tick in range(2):
        frames = [f for _t, f in tick_batches(topo, model.step(tick), publisher="bench", nodes_per_batch=128)]
        core.step(frames, now_s=float(tick))
    began = time.perf_counter()
    core.topology_fingerprint()
    fingerprint_s = time.perf_counter() - began
    arrays = core.learned()
    with tempfile.TemporaryDirectory() as directory:
        learned_path, stream_path = Path(directory) / "streams.npz.learned", Path(directory) / "streams.npz"
        write_s = timed(lambda: save_checkpoint(learned_path, arrays, fleet="bench"), args.repeat)
        stream = core.ingest.checkpoint()
        stream_write_s = timed(lambda: save_checkpoint(stream_path, stream, fleet="bench"), args.repeat)
        load_s = timed(lambda: load_checkpoint(learned_path, fleet="bench"), args.repeat)
        loaded = load_checkpoint(learned_path, fleet="bench")
        assert loaded is not None
        restore_s = timed(lambda: core.restore_learned(loaded), args.repeat)
        report = {
            "topology": args.topology, "chips": topo.n_chips, "links": topo.n_links, "efa_ports": topo.n_efa,
            "learned_arrays": len(arrays), "learned_bytes": learned_path.stat().st_size,
            "stream_checkpoint_bytes": stream_path.stat().st_size,
            "copy_s": round(timed(core.learned, args.repeat), 4),  # on the analysis path, once a minute
            "write_s": round(write_s, 4),  # a task no analysis waits for
            "stream_write_s": round(stream_write_s, 4),  # every analysis, awaited (for comparison)
            "load_s": round(load_s, 4), "restore_s": round(restore_s, 4),  # at start
            "fingerprint_s": round(fingerprint_s, 4),  # once, at the first save or restore
            "repeat": args.repeat,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
