"""``benchmarks aggregate``: what the aggregation tier costs per node frame,
in one process and no broker: decoding a real node frame (the ``rainier``
node: 16 chips, 48 links, 16 EFA ports, cooling) by each candidate JSON
decoder and by the binary decoder, and the aggregator's whole tick
(``Batcher.tick``: judge, decode, group, batch, encode) at a share of
``rainier``, in wall time; then the role's own work in CPU time, a tick of
frames heard (``Aggregator.hear``: admission, held for the tick) and
batched (``Aggregator.tick``), ``role_cpu_us_per_frame`` being both: all
of a frame's cost but MQTT's.

JSON decoders compared, each to the same ``NodeFrame`` (records as numpy
arrays) except where said:

- ``json+pydantic``: today's path (``rainierd.wire.jsonform.decode_json``):
  ``json.loads`` with a duplicate-key hook, then the pydantic models;
- ``orjson+pydantic``: orjson parses, the same models validate (orjson keeps
  the last of a key given twice: the duplicate check is lost);
- ``pydantic validate_json``: pydantic-core parses and validates in Rust;
- ``msgspec Struct``: parse and validate into msgspec Structs mirroring the
  models (a second definition of the schema), then the same record arrays;
- ``parse only`` rows: the parser alone, for scale.

Figures are medians over ``--repeat`` runs of ``--frames`` frames each.

With ``--rates R ...`` it measures the whole aggregator process instead:
a real Mosquitto, one ``rainierd aggregate --shard 0/N`` of ``--topology``
with N chosen so that its share is about R nodes, and a raw-paho publisher
process offering that share's real node frames, each node once a second
(its ``seq`` moving), for ``--seconds``: what the aggregator received,
batched and published, and the CPU it took per node frame, MQTT included.
A share, not the first R nodes, so that its batches are as large as a real
deployment's (a share spans every site and its buckets).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

from benchmarks._table import print_table
from harness.procs import cpu_s, free_port, mosquitto
from harness.scrape import current_values
from harness.waits import poll_until
from rainierd.aggregate import Aggregator, Batcher
from rainierd.fleet import Topology
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import NodeFrame, decode_binary, encode_binary, encode_json
from rainierd.wire.jsonform import FRAME_ADAPTER, decode_json
from rainierd.wire.topics import Shard

__all__ = ["HELP", "add_arguments", "run"]

HELP: Final = "the aggregation tier's cost per node frame: JSON decoders, the binary decoder, a whole tick"


def _node_frames(topology: str, count: int) -> list[tuple[str, NodeFrame]]:
    topo = build_topology(topology)
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=time.time())
    sample = model.step(0)
    out = []
    for topic, frame in tick_frames(topo, sample, publisher="rainierd-sim-ffe68dde", nodes=range(count)):
        if isinstance(frame, NodeFrame):
            out.append((topic, frame))
    return out


def _per_frame_us(decode: Callable[[bytes], object], payloads: list[bytes], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        for payload in payloads:
            decode(payload)
        runs.append((time.perf_counter() - started) / len(payloads) * 1e6)
    return statistics.median(runs)


def _msgspec_decoder() -> Callable[[bytes], object] | None:
    """A msgspec decoder of the node frame, or None if msgspec is not installed."""
    try:
        import msgspec  # noqa: PLC0415 - optional: only this benchmark uses it
    except ImportError:
        return None
    from benchmarks._msgspec_frames import Node  # noqa: PLC0415
    from rainierd.wire.records import CHIP_DTYPE, COOLING_DTYPE, EFA_DTYPE, LINK_DTYPE  # noqa: PLC0415

    decoder = msgspec.json.Decoder(Node)

    def _records(items: list[Any], dtype: np.dtype[np.void]) -> tuple[Any, Any]:
        # As rainierd.wire.jsonform._records does for complete records: one conversion of the rows.
        rows = [msgspec.structs.astuple(item) for item in items]
        if any(None in row for row in rows):
            raise ValueError("the benchmark's frames carry every field")
        # The Structs mirror wire v1's fields; the fields added since stay unknown, as in a binary node frame.
        names = (dtype.names or ())[:len(rows[0]) if rows else 0]
        assert dtype.fields is not None
        known = np.array(rows, dtype=[(name, dtype.fields[name][0]) for name in names])
        records = np.zeros(len(rows), dtype)
        for name in names:
            records[name] = known[name]
        return records, np.full(len(items), (1 << len(names)) - 1, np.uint16)

    def decode(payload: bytes) -> NodeFrame:
        m = decoder.decode(payload)
        chips, links = _records(m.chips, CHIP_DTYPE), _records(m.links, LINK_DTYPE)
        efa, air = _records(m.efa, EFA_DTYPE), _records([m.cooling] if m.cooling else [], COOLING_DTYPE)
        return NodeFrame(m.publisher, m.seq, m.tick, m.t_s, m.node, chips[0], links[0], efa[0], air[0],
                         known={"chips": chips[1], "links": links[1], "efa": efa[1], "cooling": air[1]})

    decode.parse_only = decoder.decode  # type: ignore[attr-defined]
    return decode


def bench_decoders(frames: list[tuple[str, NodeFrame]], repeat: int) -> list[dict[str, Any]]:
    """Return µs per frame of each decoder on these frames' JSON and binary forms."""
    as_json = [encode_json(f) for _, f in frames]
    as_binary = [encode_binary(f) for _, f in frames]
    rows: list[dict[str, Any]] = []

    def row(name: str, payloads: list[bytes], decode: Callable[[bytes], object], note: str = "") -> None:
        rows.append({"decoder": name, "bytes": int(np.mean([len(p) for p in payloads])),
                     "us_per_frame": round(_per_frame_us(decode, payloads, repeat), 2), "note": note})

    row("json+pydantic (today)", as_json, decode_json, "NodeFrame")
    row("json.loads, parse only", as_json, json.loads)
    try:
        import orjson  # noqa: PLC0415 - optional: only this benchmark uses it
    except ImportError:
        pass
    else:
        row("orjson, parse only", as_json, orjson.loads)
        row("orjson+pydantic validate", as_json, lambda p: FRAME_ADAPTER.validate_python(orjson.loads(p)),
            "models only, no arrays; no duplicate-key check")
    row("json.loads+pydantic validate", as_json, lambda p: FRAME_ADAPTER.validate_python(json.loads(p)),
        "models only, no arrays")
    row("pydantic validate_json", as_json, FRAME_ADAPTER.validate_json, "models only, no arrays")
    msgspec_decode = _msgspec_decoder()
    if msgspec_decode is not None:
        row("msgspec Struct, parse+validate", as_json, msgspec_decode.parse_only,  # type: ignore[attr-defined]
            "structs only, no arrays; no range checks")
        row("msgspec Struct -> NodeFrame", as_json, msgspec_decode, "NodeFrame")
    row("binary (decode_binary)", as_binary, lambda p: decode_binary(p, check_finite=False), "NodeFrame")
    row("binary, finite checked", as_binary, decode_binary, "NodeFrame")
    return rows


def bench_tick(topology: str, share: int, encoding: str, repeat: int) -> dict[str, Any]:
    """Return the aggregator's work at ``topology`` for shard 0 of ``share``, per node frame: ``Batcher.tick`` alone
    (wall time, as before), and the role's own, in CPU time: each message through ``Aggregator.hear`` (admission,
    held for the tick) and the tick that batches them (``Aggregator.tick``: judge, group, batch, encode)."""
    topo = build_topology(topology)
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=time.time())
    encode = encode_json if encoding == "json" else encode_binary
    shard = Shard(0, share)
    ticks = []
    for k in range(repeat + 1):  # a tick of frames each run, their samples a second apart, as a share's agents send
        sample = model.step(k)
        ticks.append([(topic, encode(frame)) for topic, frame in tick_frames(topo, sample, publisher="sim")
                      if isinstance(frame, NodeFrame)
                      and shard.owns_ultraserver(frame.node // topo.nodes_per_ultraserver)])
    messages = ticks[-1]
    batcher = Batcher(topo, shard=shard, name="agg-0")
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = batcher.tick(messages, now_s=time.time())
        runs.append(time.perf_counter() - started)
    seconds = statistics.median(runs)
    hear_s, role_tick_s = asyncio.run(_role_cpu(topo, shard, ticks))
    return {"topology": topology, "share": f"0/{share}", "encoding": encoding, "frames": len(messages),
            "batches": len(result.batches), "tick_s": round(seconds, 4),
            "us_per_frame": round(seconds / len(messages) * 1e6, 2),
            "hear_cpu_us_per_frame": round(hear_s / len(messages) * 1e6, 2),
            "tick_cpu_us_per_frame": round(role_tick_s / len(messages) * 1e6, 2),
            "role_cpu_us_per_frame": round((hear_s + role_tick_s) / len(messages) * 1e6, 2)}


async def _role_cpu(topo: Topology, shard: Shard, ticks: list[list[tuple[str, bytes]]]) -> tuple[float, float]:
    """Return the median CPU seconds of hearing one tick's messages and of batching them (the first tick a
    warm-up), with the process's heap frozen as the daemon freezes it."""
    clock = [0.0]
    agg = Aggregator(topo, shard=shard, name="agg-0", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=0,
                     monotonic_s=lambda: clock[0])
    gc.collect()
    gc.freeze()
    hears, batching = [], []
    for messages in ticks:
        started = time.process_time()
        for topic, payload in messages:
            agg.hear(topic, payload, False)
        heard = time.process_time()
        await agg.tick()  # its batching in a worker thread: process time counts it
        hears.append(heard - started)
        batching.append(time.process_time() - heard)
        clock[0] += 1.0
    gc.unfreeze()
    if agg.batched != sum(len(m) for m in ticks):
        raise RuntimeError(f"the aggregator dropped frames: {dict(agg.dropped)}")
    return statistics.median(hears[1:]), statistics.median(batching[1:])


def _share_of(topology: str, rate: int) -> Shard:
    """Return the shard 0/N whose share is about ``rate`` nodes."""
    topo = build_topology(topology)
    return Shard(0, max(1, min(256, round(int(topo.node_present.sum()) / rate))))


def publish(port: int, topology: str, rate: int, seconds: float) -> None:
    """Offer the node frames of the share ``_share_of(topology, rate)`` (binary, each node once a second, seq
    counting up) for ``seconds``; print what was sent."""
    import paho.mqtt.client as paho  # noqa: PLC0415 - the publisher process only
    from paho.mqtt.enums import CallbackAPIVersion  # noqa: PLC0415

    topo, shard = build_topology(topology), _share_of(topology, rate)
    model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=time.time())
    sample = model.step(0)
    nodes = [n for n in range(topo.n_nodes) if shard.owns_ultraserver(n // topo.nodes_per_ultraserver)]
    frames = [(t, f) for n in nodes for t, f in tick_frames(topo, sample, publisher="agent", nodes=range(n, n + 1),
                                                             sites=range(0)) if isinstance(f, NodeFrame)]
    payloads = [(topic, bytearray(encode_binary(frame))) for topic, frame in frames]
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="bench-aggregate-publisher")
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    seq = struct.Struct("<Q")
    started = time.monotonic()
    sent = 0
    tick = 0
    while time.monotonic() - started < seconds:
        for slice_ in range(10):  # the tick's frames in ten slices of 0.1 s
            for topic, payload in payloads[slice_::10]:
                seq.pack_into(payload, 8, tick)
                client.publish(topic, bytes(payload), qos=0)
                sent += 1
            time.sleep(max(0.0, started + tick + (slice_ + 1) / 10 - time.monotonic()))
        tick += 1
    client.loop_stop()
    client.disconnect()
    print(json.dumps({"sent": sent, "seconds": time.monotonic() - started}))


def bench_process(topology: str, rate: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """Return what one aggregator process did with ``rate`` node frames a second through a real Mosquitto."""
    port = free_port()
    with mosquitto(workdir) as broker, (workdir / f"aggregate-{port}.log").open("w") as log:
        agg = subprocess.Popen([sys.executable, "-m", "rainierd", "aggregate", "--topology", topology,
                                "--shard", str(_share_of(topology, rate)),
                                "--mqtt-url", broker.url, "--metrics-addr", f"127.0.0.1:{port}",
                                "--log-format", "json"], stdout=log, stderr=subprocess.STDOUT)
        try:
            poll_until(lambda: current_values(port).get("rainier_aggregator_mqtt_connected") == 1, 120,
                       "the aggregator to connect")
            time.sleep(2)  # its subscriptions (one per UltraServer) in place
            before, agg0, broker0 = current_values(port), cpu_s(agg.pid), cpu_s(broker.pid)
            pub = subprocess.run([sys.executable, "-m", "benchmarks.aggregate", "publish", str(broker.port), topology,
                                  str(rate), str(seconds)], capture_output=True, text=True, check=True)
            agg_cpu, broker_cpu = cpu_s(agg.pid) - agg0, cpu_s(broker.pid) - broker0
            time.sleep(3)  # its last tick
            after = current_values(port)
        finally:
            agg.terminate()
            agg.wait(30)
    sent = json.loads(pub.stdout.splitlines()[-1])

    def delta(name: str) -> float:
        return sum(v for k, v in after.items() if k.startswith(name)) - sum(
            v for k, v in before.items() if k.startswith(name))

    received = delta("rainier_aggregator_messages_received_total")
    return {
        "topology": topology, "share": str(_share_of(topology, rate)), "offered_per_s": round(sent["sent"] / sent[
            "seconds"]), "sent": sent["sent"], "received": int(received),
        "published_frames": int(delta("rainier_aggregator_frames_published_total")),
        "batches": int(delta("rainier_aggregator_batches_published_total")),
        "dropped": int(delta("rainier_aggregator_frames_dropped_total")),
        "aggregator_cpu_share": round(agg_cpu / sent["seconds"], 3),
        "mosquitto_cpu_share": round(broker_cpu / sent["seconds"], 3),
        "aggregator_cpu_us_per_frame": round(agg_cpu / received * 1e6, 1) if received else None,
        "kept_up": received == sent["sent"] and delta("rainier_aggregator_frames_dropped_total") == 0,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this benchmark's options."""
    parser.add_argument("--topology", default="rainier", help="fleet whose node frames are measured")
    parser.add_argument("--frames", type=int, default=500, help="node frames a decoder run decodes")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the median is reported")
    parser.add_argument("--share", type=int, default=16,
                        help="the tick is measured for shard 0 of this many aggregators (1: the whole fleet)")
    parser.add_argument("--rates", type=int, nargs="*", default=[],
                        help="measure the aggregator process through a real Mosquitto at these node frames a second")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds each rate is offered")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    """Measure and print the decoders and the tick, or the process at ``--rates``."""
    if args.rates:
        with tempfile.TemporaryDirectory(prefix="rainierd-bench-aggregate-") as tmp:
            rows = [bench_process(args.topology, rate, args.seconds, Path(tmp)) for rate in args.rates]
        if args.json:
            print(json.dumps({"benchmark": "aggregate", "topology": args.topology, "process": rows}, indent=2))
        else:
            print_table(list(rows[0]), [[str(v) for v in r.values()] for r in rows])
        return 0
    frames = _node_frames(args.topology, args.frames)
    decoders = bench_decoders(frames, args.repeat)
    ticks = [bench_tick(args.topology, args.share, encoding, max(1, args.repeat // 2))
             for encoding in ("binary", "json")]
    if args.json:
        print(json.dumps({"benchmark": "aggregate", "topology": args.topology, "decoders": decoders, "ticks": ticks},
                         indent=2))
        return 0
    columns = ["decoder", "bytes", "us_per_frame", "note"]
    print_table(columns, [[str(r[k]) for k in columns] for r in decoders])
    print()
    print_table(list(ticks[0]), [[str(v) for v in t.values()] for t in ticks])
    return 0


if __name__ == "__main__":  # the publisher process of bench_process
    if sys.argv[1] == "publish":
        publish(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
