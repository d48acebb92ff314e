"""``benchmarks transport``: what moving one Rainier tick a second through a
real Mosquitto costs, as a function of message size: the measurement that
chose batch frames (docs/performance.md).

For each size, a publisher process (raw paho in a background thread, paced in
0.1 s slices) offers ``--mb-per-s`` of payloads of that size, and a
subscriber process receives them with aiomqtt, as the monitor does, doing
nothing else.  Reported per size: messages/s and MB/s received, the share of
what was offered, and the CPU share of one core of the subscriber, the
publisher and Mosquitto.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from benchmarks._table import print_table
from harness.procs import cpu_s, mosquitto

__all__ = ["HELP", "SIZES", "add_arguments", "bench_transport", "run"]

HELP: Final = "cost of moving a Rainier tick a second through Mosquitto, by message size"

SIZES: Final = (4_000, 16_000, 64_000, 256_000, 1_000_000)


def publish(port: int, size: int, mb_per_s: float, seconds: float) -> None:
    """Offer ``mb_per_s`` of ``size``-byte messages for ``seconds``; print what was sent."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="bench-transport-publisher")
    client.connect("127.0.0.1", port)
    client.loop_start()
    payload = b"R" * size
    per_slice = mb_per_s * 1e6 / size / 10
    started = time.monotonic()
    sent = 0
    k = 0
    while time.monotonic() - started < seconds:
        k += 1
        while sent < int(per_slice * k):
            client.publish("bench/transport", payload, qos=0)
            sent += 1
        time.sleep(max(0.0, started + k * 0.1 - time.monotonic()))
    client.publish("bench/transport-end", b"", qos=1).wait_for_publish(30)
    client.loop_stop()
    client.disconnect()
    print(json.dumps({"sent": sent, "seconds": time.monotonic() - started}))


async def subscribe(port: int, seconds: float) -> None:
    """Receive until the end marker (or ``seconds`` pass); print what arrived and the CPU it took."""
    received = size = 0
    first = last = 0.0
    cpu0 = time.process_time()
    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-transport-subscriber",
                              max_queued_incoming_messages=1_000_000) as client:
        await client.subscribe("bench/#", qos=1)
        print("ready", flush=True)
        try:
            async with asyncio.timeout(seconds):
                async for message in client.messages:
                    if message.topic.value == "bench/transport-end":
                        break
                    now = time.monotonic()
                    first = first or now
                    last = now
                    received += 1
                    size += len(message.payload)
        except TimeoutError:
            pass
    print(json.dumps({"received": received, "bytes": size, "seconds": last - first,
                      "cpu_s": time.process_time() - cpu0}))


def run_size(size: int, *, mb_per_s: float, seconds: float, workdir: Path) -> dict[str, Any]:
    """Measure one message size."""
    me = [sys.executable, "-m", "benchmarks.transport"]
    with mosquitto(workdir) as broker:
        sub = subprocess.Popen([*me, "subscribe", str(broker.port), str(seconds + 60)], stdout=subprocess.PIPE,
                               text=True)
        assert sub.stdout is not None
        sub.stdout.readline()  # ready
        broker_cpu0 = cpu_s(broker.pid)
        pub = subprocess.run([*me, "publish", str(broker.port), str(size), str(mb_per_s), str(seconds)],
                             capture_output=True, text=True, check=True)
        broker_cpu = cpu_s(broker.pid) - broker_cpu0
        out, _ = sub.communicate(timeout=seconds + 120)
    sent, got = json.loads(pub.stdout), json.loads(out.splitlines()[-1])
    span = max(got["seconds"], 1e-9)
    return {
        "message_bytes": size, "offered_mb_per_s": mb_per_s,
        "messages_per_s": got["received"] / span, "mb_per_s": got["bytes"] / span / 1e6,
        "received_share": got["received"] / sent["sent"] if sent["sent"] else None,
        "subscriber_cpu_share": got["cpu_s"] / span, "mosquitto_cpu_share": broker_cpu / sent["seconds"],
    }


def bench_transport(sizes: list[int], *, mb_per_s: float, seconds: float) -> dict[str, Any]:
    """Return the report over every message size."""
    with tempfile.TemporaryDirectory(prefix="rainierd-bench-transport-") as tmp:
        results = [run_size(size, mb_per_s=mb_per_s, seconds=seconds, workdir=Path(tmp)) for size in sizes]
    return {"benchmark": "transport", "results": results}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="message bytes")
    parser.add_argument("--mb-per-s", type=float, default=116.0, help="offered (116: one rainier tick a second)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    report = bench_transport(list(args.sizes), mb_per_s=args.mb_per_s, seconds=args.seconds)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print_table(
        ("message", "offered", "received msgs/s", "MB/s", "share received", "subscriber CPU", "Mosquitto CPU"),
        ((f"{r['message_bytes']:,} B", f"{r['offered_mb_per_s']:.0f} MB/s", f"{r['messages_per_s']:,.0f}",
          f"{r['mb_per_s']:.0f}", f"{r['received_share']:.3f}", f"{r['subscriber_cpu_share']:.2f}",
          f"{r['mosquitto_cpu_share']:.2f}") for r in report["results"]),
    )
    return 0


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    if role == "publish":
        publish(int(rest[0]), int(rest[1]), float(rest[2]), float(rest[3]))
    else:
        asyncio.run(subscribe(int(rest[0]), float(rest[1])))
