"""``benchmarks receive``: what one MQTT message costs the monitor's client
to receive, handed to the monitor rainierd's way (``supervisor.deliver``) or
aiomqtt's (its message iterator).

A publisher writes ``--messages`` QoS 0 PUBLISH packets of ``--payload-bytes``
back to back on a raw socket to a real Mosquitto (so the publisher is never
the bound; the broker queues what the subscriber has not read yet), then one
end marker.  A subscriber process receives them on MQTT 5 and hands each to
a handler that counts it, one of two ways:

- ``deliver``: a session of ``supervise``, as the monitor's, taking its
  messages through ``deliver`` (aiomqtt's public ``queue_type=``, a queue
  that hands each message on from paho's callback instead of holding it);
- ``iterator``: aiomqtt's own ``async for message in client.messages`` over
  an unbounded queue.

Reported per way, the median over ``--repeat`` rounds (the ways alternating
within a round, on one broker): messages/s received (first message to the
end marker) and the subscriber's CPU microseconds a message.  Until 64ee3a2
a third way replaced paho's ``on_message`` instead of using ``queue_type=``
(``64ee3a2:benchmarks/receive.py``, benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import aiomqtt

from benchmarks._table import print_table
from harness.procs import mosquitto
from rainierd.mqtt.burst import publish_packet_header
from rainierd.mqtt.config import Broker, MqttConfig
from rainierd.mqtt.connection import ConnectionState
from rainierd.mqtt.supervisor import deliver, supervise
from rainierd.runtime.logs import configure_logging

__all__ = ["HELP", "WAYS", "add_arguments", "bench_receive", "run"]

HELP: Final = "a subscriber's cost a message: rainierd's deliver against aiomqtt's message iterator"

WAYS: Final = ("deliver", "iterator")
_TOPICS: Final = 1_000
_END: Final = "bench/receive-end"


def publish(port: int, messages: int, payload_bytes: int) -> None:
    """Write ``messages`` QoS 0 PUBLISH packets to the broker on ``port`` as fast as the socket takes them, then
    the end marker and a DISCONNECT."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        client_id = b"bench-receive-publisher"
        variable = (struct.pack("!H", 4) + b"MQTT" + bytes((4, 0x02)) + struct.pack("!H", 60)  # 3.1.1, clean
                    + struct.pack("!H", len(client_id)) + client_id)
        sock.sendall(bytes((0x10, len(variable))) + variable)
        if sock.recv(4) != b"\x20\x02\x00\x00":
            raise RuntimeError("the broker refused the publisher")
        payload = b"R" * payload_bytes
        chunk = b"".join(publish_packet_header(f"bench/receive/n{k}", payload_bytes, v5=False) + payload
                         for k in range(_TOPICS))
        for _ in range(messages // _TOPICS):
            sock.sendall(chunk)
        sock.sendall(publish_packet_header(_END, 0, v5=False) + b"\xe0\x00")


async def subscribe(port: int, way: str) -> dict[str, float]:
    """Receive until the end marker, handing each message on ``way``; return the count, wall and CPU seconds."""
    received = 0
    started: tuple[float, float] | None = None
    end = asyncio.Event()

    def handler(topic: str, _payload: bytes, _retained: bool) -> None:
        nonlocal received, started
        if started is None:
            started = (time.perf_counter(), time.process_time())
        if topic == _END:
            end.set()
        else:
            received += 1

    async def session(client: aiomqtt.Client) -> None:
        deliver(client, handler)
        await client.subscribe([("bench/receive/#", 0), (_END, 0)])
        print("ready", flush=True)
        await end.wait()

    if way == "deliver":
        config = MqttConfig(brokers=(Broker("127.0.0.1", port),), client_id="bench-receive-deliver")
        await supervise(config, session, state=ConnectionState())
    else:
        async with aiomqtt.Client("127.0.0.1", port, identifier="bench-receive-iterator",
                                  protocol=aiomqtt.ProtocolVersion.V5) as client:
            await client.subscribe([("bench/receive/#", 0), (_END, 0)])
            print("ready", flush=True)
            async for message in client.messages:
                handler(message.topic.value, message.payload, message.retain)
                if end.is_set():
                    break
    assert started is not None
    return {"received": received, "wall_s": time.perf_counter() - started[0],
            "cpu_s": time.process_time() - started[1]}


def run_once(port: int, way: str, *, messages: int, payload_bytes: int) -> dict[str, Any]:
    """Receive one burst ``way`` in a subscriber process of its own; return its figures."""
    sub = subprocess.Popen([sys.executable, "-m", "benchmarks.receive", str(port), way], stdout=subprocess.PIPE,
                           text=True)
    assert sub.stdout is not None
    if sub.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the {way} subscriber did not start")
    publish(port, messages, payload_bytes)
    out, _ = sub.communicate(timeout=600)
    got = json.loads(out.splitlines()[-1])
    return {"way": way, "received": got["received"], "messages_per_s": got["received"] / got["wall_s"],
            "cpu_us_per_message": got["cpu_s"] / max(got["received"], 1) * 1e6}


def bench_receive(ways: list[str], *, messages: int, payload_bytes: int, repeat: int) -> dict[str, Any]:
    """Return the report: every run, and each way's medians."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rainierd-bench-receive-") as tmp, mosquitto(Path(tmp)) as broker:
        for _ in range(repeat):
            for way in ways:
                runs.append(run_once(broker.port, way, messages=messages, payload_bytes=payload_bytes))
                print(json.dumps(runs[-1]), file=sys.stderr)
    medians = {way: {key: statistics.median(r[key] for r in runs if r["way"] == way)
                     for key in ("received", "messages_per_s", "cpu_us_per_message")} for way in ways}
    return {"benchmark": "receive", "messages": messages, "payload_bytes": payload_bytes, "repeat": repeat,
            "medians": medians, "runs": runs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--messages", type=int, default=200_000, help="a burst (a multiple of 1,000)")
    parser.add_argument("--payload-bytes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5, help="rounds, the ways alternating within each")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    report = bench_receive(list(args.ways), messages=args.messages, payload_bytes=args.payload_bytes,
                           repeat=args.repeat)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    base = report["medians"][args.ways[0]]
    print_table(
        ("way", "received", "msgs/s", "CPU µs/msg", f"CPU vs {args.ways[0]}"),
        ((way, f"{m['received']:,.0f}", f"{m['messages_per_s']:,.0f}", f"{m['cpu_us_per_message']:.1f}",
          f"{m['cpu_us_per_message'] / base['cpu_us_per_message']:.2f}") for way, m in report["medians"].items()),
    )
    return 0


if __name__ == "__main__":
    configure_logging(log_format="auto", level="warning")  # to stderr: stdout carries "ready" and the figures
    print(json.dumps(asyncio.run(subscribe(int(sys.argv[1]), sys.argv[2]))))
