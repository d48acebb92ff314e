"""``benchmarks cluster``: the measurements that chose the clustered broker
(docs/scaling.md), for each engine's three-node cluster on this machine and a
single Mosquitto beside them as the baseline.

- **throughput**: rainierd batch frames (``--size``, a Rainier frame of 128
  nodes is ~463 KB) offered at ``--mb-per-s`` by a publisher on node 1 and
  received by an aiomqtt subscriber on node 2 (``bench transport``'s two
  processes): MB/s received, share of what was sent, and each node's CPU.
- **failover**: rainierd's own supervisor, given nodes 2 and 3, connected to
  node 2; node 2 SIGKILLed: seconds until it is connected to node 3, and
  whether node 2 rejoins when started again.
- **retained and wills**: a client with rainierd's will connects to node 1,
  says ``online`` retained, and is SIGKILLed: does a subscriber on node 2 see
  the will's ``offline``, does a new subscriber on node 3 read the retained
  status, and does it still after node 1 (where it was written) is killed?
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import aiomqtt

from benchmarks._progress import Progress
from benchmarks._table import print_table
from harness.cluster import ENGINES, Cluster, cluster, server_binary
from harness.procs import cpu_s, mosquitto, require_binary
from rainierd.mqtt.config import MqttConfig, parse_brokers
from rainierd.mqtt.connection import ConnectionState
from rainierd.mqtt.supervisor import supervise
from rainierd.wire.topics import status_topic

__all__ = ["HELP", "add_arguments", "bench_cluster", "run"]

HELP: Final = ("a three-node NATS and RabbitMQ cluster against one Mosquitto: throughput of rainierd frames, "
        "failover, retained messages, wills")

_ME = [sys.executable, "-m", "benchmarks.cluster"]
_TRANSPORT = [sys.executable, "-m", "benchmarks.transport"]


def throughput(pub_port: int, sub_port: int, pids: list[int], *, size: int, mb_per_s: float,
               seconds: float) -> dict[str, Any]:
    """Offer ``mb_per_s`` of ``size``-byte messages on ``pub_port``, receive them on ``sub_port``."""
    sub = subprocess.Popen([*_TRANSPORT, "subscribe", str(sub_port), str(seconds + 60)], stdout=subprocess.PIPE,
                           text=True)
    assert sub.stdout is not None
    sub.stdout.readline()  # ready
    time.sleep(1.0)  # a cluster propagates the subscription to the other nodes
    cpu0 = [cpu_s(pid) for pid in pids]
    pub = subprocess.run([*_TRANSPORT, "publish", str(pub_port), str(size), str(mb_per_s), str(seconds)],
                         capture_output=True, text=True, check=True)
    cpu = [cpu_s(pid) - c for pid, c in zip(pids, cpu0, strict=True)]
    out, _ = sub.communicate(timeout=seconds + 120)
    sent, got = json.loads(pub.stdout), json.loads(out.splitlines()[-1])
    span = max(got["seconds"], 1e-9)
    return {
        "message_bytes": size, "offered_mb_per_s": mb_per_s, "mb_per_s": got["bytes"] / span / 1e6,
        "received_share": got["received"] / sent["sent"] if sent["sent"] else None,
        "node_cpu_share": [c / sent["seconds"] for c in cpu],
    }


def _node_pids(running: Cluster) -> list[int]:
    """Return each node's server process: the Erlang VM under RabbitMQ's shell wrapper."""
    pids = []
    for node in running.nodes:
        assert node.proc is not None
        children = subprocess.run(["pgrep", "-s", str(node.proc.pid), "beam.smp"], check=False, capture_output=True,
                                  text=True).stdout.split()
        pids.append(int(children[0]) if children else node.proc.pid)
    return pids


async def _retained(port: int, topic: str, wait_s: float = 3.0, connect_within_s: float = 60.0) -> dict[str, Any]:
    """Return the retained payload a fresh subscriber on ``port`` reads on ``topic`` (None: none in ``wait_s``),
    and how long connecting took: a node that just lost a peer may refuse or stall connections a while."""
    started = time.monotonic()
    while True:
        try:
            async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-cluster-reader-{port}",
                                      timeout=5.0) as client:
                connect_s = time.monotonic() - started
                await client.subscribe(topic, qos=1)
                try:
                    async with asyncio.timeout(wait_s):
                        async for message in client.messages:
                            return {"value": bytes(message.payload).decode(),
                                    "connect_s": connect_s}
                except TimeoutError:
                    pass
                return {"value": None, "connect_s": connect_s}
        except aiomqtt.MqttError:
            if time.monotonic() - started > connect_within_s:
                return {"value": None, "connect_s": None}
            await asyncio.sleep(0.5)


async def _until(condition: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``condition`` every 10 ms; raise TimeoutError after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.01)


async def _failover(running: Cluster) -> dict[str, Any]:
    state = ConnectionState()
    config = MqttConfig(brokers=parse_brokers(running.urls(1, 2)), client_id="bench-cluster-failover",
                        protocol="3.1.1")

    async def idle(client: aiomqtt.Client) -> None:
        await client.subscribe("rainier/v1/#", qos=0)
        await asyncio.Event().wait()

    task = asyncio.create_task(supervise(config, idle, state=state))
    await _until(lambda: state.connected, 30)
    first = state.broker
    killed = time.monotonic()
    running.nodes[1].kill()
    await _until(lambda: state.connects >= 2 and state.connected, 60)
    failover_s = time.monotonic() - killed
    second = state.broker
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    started = time.monotonic()
    await asyncio.to_thread(running.restart, 1)
    return {"connected_first": first, "connected_after_kill": second, "failover_s": failover_s,
            "node_restart_to_ready_s": time.monotonic() - started}


async def _wills(running: Cluster) -> dict[str, Any]:
    client_id = "bench-cluster-will"
    topic = status_topic(client_id)
    watcher = asyncio.Queue[str]()

    async def watch() -> None:
        async with aiomqtt.Client("127.0.0.1", running.nodes[1].mqtt_port, identifier="bench-cluster-watch") as c:
            await c.subscribe(topic, qos=1)
            async for message in c.messages:
                await watcher.put(bytes(message.payload).decode())

    watching = asyncio.create_task(watch())
    await asyncio.sleep(1.0)
    holder = await asyncio.to_thread(subprocess.Popen, [*_ME, "will", str(running.nodes[0].mqtt_port), client_id],
                                     stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    await asyncio.to_thread(holder.stdout.readline)  # online said
    online_elsewhere = await _retained(running.nodes[2].mqtt_port, topic)
    holder.kill()
    holder.wait()
    killed = time.monotonic()
    seen: list[str] = []
    will_s = None
    try:
        async with asyncio.timeout(30):
            while "offline" not in seen:
                seen.append(await watcher.get())
        will_s = time.monotonic() - killed
    except TimeoutError:
        pass
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    after_will = await _retained(running.nodes[2].mqtt_port, topic)
    running.nodes[0].kill()
    after_node_loss = await _retained(running.nodes[2].mqtt_port, topic)
    await asyncio.to_thread(running.restart, 0)
    on_restarted = await _retained(running.nodes[0].mqtt_port, topic)
    return {
        "retained_online_read_on_node3": online_elsewhere, "will_seen_on_node2": "offline" in seen,
        "will_delivery_s": will_s, "retained_after_will_on_node3": after_will,
        "retained_on_node3_after_node1_killed": after_node_loss, "retained_on_node1_after_restart": on_restarted,
    }


def bench_engine(engine: str, *, size: int, mb_per_s: list[float], seconds: float, workdir: Path,
                 progress: Progress) -> dict[str, Any]:
    """Measure one engine's cluster (or ``mosquitto``, one node), each phase a step of ``progress``
    (one for Mosquitto, four for a cluster)."""
    if engine == "mosquitto":
        with mosquitto(workdir) as broker:
            runs = [throughput(broker.port, broker.port, [broker.pid], size=size, mb_per_s=rate,
                               seconds=seconds) for rate in mb_per_s]
        progress.step(f"{engine}: throughput {[round(r['mb_per_s'], 1) for r in runs]} MB/s")
        return {"engine": engine, "nodes": 1, "throughput": runs}
    formed = time.monotonic()
    with cluster(engine, workdir / engine) as running:  # type: ignore[arg-type]
        formed_s = time.monotonic() - formed
        progress.step(f"{engine}: cluster formed in {formed_s:.1f} s")
        pids = _node_pids(running)
        ports = [n.mqtt_port for n in running.nodes]
        runs = [throughput(ports[0], ports[1], pids, size=size, mb_per_s=rate, seconds=seconds)
                for rate in mb_per_s]
        progress.step(f"{engine}: throughput {[round(r['mb_per_s'], 1) for r in runs]} MB/s")
        wills = asyncio.run(_wills(running))
        progress.step(f"{engine}: retained messages and wills")
        failover = asyncio.run(_failover(running))
        progress.step(f"{engine}: failover")
    return {"engine": engine, "nodes": 3, "cluster_formed_s": formed_s, "throughput": runs,
            "failover": failover, "retained_and_wills": wills}


def bench_cluster(engines: list[str], *, size: int, mb_per_s: list[float], seconds: float) -> dict[str, Any]:
    """Return the report over every engine.

    Raises MissingBinaryError, before anything runs, when an engine is not installed.
    """
    require_binary("mosquitto", package="mosquitto", also=["/usr/sbin/mosquitto"])
    for engine in engines:
        if engine != "mosquitto":
            server_binary(engine)  # type: ignore[arg-type]
    progress = Progress(sum(1 if e == "mosquitto" else 4 for e in engines), prefix="bench cluster: ")
    with tempfile.TemporaryDirectory(prefix="rainierd-bench-cluster-") as tmp:
        results = [bench_engine(e, size=size, mb_per_s=mb_per_s, seconds=seconds, workdir=Path(tmp),
                                progress=progress) for e in engines]
    progress.close()
    return {"benchmark": "cluster", "results": results}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--engines", nargs="+", default=["mosquitto", *ENGINES], choices=["mosquitto", *ENGINES])
    parser.add_argument("--size", type=int, default=463_000, help="message bytes (a rainier batch frame: ~463 KB)")
    parser.add_argument("--mb-per-s", type=float, nargs="+", default=[116.0, 232.0],
                        help="offered rates (116: one rainier tick a second)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    report = bench_cluster(list(args.engines), size=args.size, mb_per_s=list(args.mb_per_s), seconds=args.seconds)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print_table(
        ("engine", "offered MB/s", "received MB/s", "share", "CPU per node"),
        ((result["engine"], f"{r['offered_mb_per_s']:.0f}", f"{r['mb_per_s']:.1f}", f"{r['received_share']:.3f}",
          " / ".join(f"{c:.2f}" for c in r["node_cpu_share"]))
         for result in report["results"] for r in result["throughput"]),
    )
    for result in report["results"]:
        for key in ("failover", "retained_and_wills"):
            if key in result:
                print(f"{result['engine']} {key}: {json.dumps(result[key])}")
    return 0


def _hold_will(port: int, client_id: str) -> None:
    """Connect with rainierd's will, say online (retained), then wait to be killed."""
    import paho.mqtt.client as paho  # noqa: PLC0415 - only this helper process needs paho's sync client
    from paho.mqtt.enums import CallbackAPIVersion  # noqa: PLC0415

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
    client.will_set(status_topic(client_id), b"offline", qos=1, retain=True)
    client.connect("127.0.0.1", port, keepalive=5)
    client.loop_start()
    client.publish(status_topic(client_id), b"online", qos=1, retain=True).wait_for_publish(30)
    print("online", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    _hold_will(int(sys.argv[2]), sys.argv[3])
