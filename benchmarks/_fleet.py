"""The process benchmarks' fleet: a throwaway Mosquitto with ``rainierd
monitor`` and ``rainierd simulate`` attached, each a process of its own, the
monitor's counters read from its scrape, and the simulator's last log line.

With ``aggregators`` N > 0 the simulator publishes one frame per node, as a
real fleet's agents do, N ``rainierd aggregate`` processes (shards ``i/N``)
batch them, and the monitor hears batches only (docs/aggregation.md).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.procs import MosquittoProcess, free_port, mosquitto
from harness.scrape import current_values
from harness.waits import poll_until

__all__ = ["MONITOR_FAMILIES", "Fleet", "fleet", "last_log", "monitor_values", "simulator"]

# The monitor's families the benchmarks read: parsing only these keeps a `rainier` scrape (150,000
# series) from costing the machine being measured seconds of CPU per read.
MONITOR_FAMILIES: Final = (
    "rainier_ingest_", "rainier_monitor_", "rainier_health_events_total", "rainier_mqtt_connected",
    "rainier_event_loop_",
)


def monitor_values(port: int) -> dict[str, float]:
    """Return the ``MONITOR_FAMILIES`` samples of the monitor's scrape on ``port`` ({} while nothing answers)."""
    return current_values(port, timeout_s=30.0, only=MONITOR_FAMILIES)


@dataclass(frozen=True)
class Fleet:
    """A Mosquitto with ``rainierd monitor`` and ``rainierd simulate`` attached, each a process."""

    broker: MosquittoProcess
    monitor: subprocess.Popen[bytes]
    simulate: subprocess.Popen[bytes]
    metrics_port: int
    monitor_log: Path
    simulate_log: Path
    aggregators: tuple[subprocess.Popen[bytes], ...] = ()
    aggregator_ports: tuple[int, ...] = ()


@contextlib.contextmanager
def fleet(
    topology: str, *, tick_s: float, ticks: int, batch_nodes: int, workdir: Path, aggregators: int = 0,
) -> Iterator[Fleet]:
    """Run Mosquitto, then the monitor (and ``aggregators`` aggregators), then (once each is connected) the
    simulator for ``ticks`` ticks.

    On leaving, the simulator (if still running), the aggregators and the
    monitor are stopped with SIGINT, killed if they take more than 30 s.
    Raises AssertionError if the monitor does not connect within two
    minutes, MissingBinaryError without Mosquitto.
    """
    port = free_port()
    rainierd = [sys.executable, "-m", "rainierd"]
    common = ["--topology", topology, "--tick", str(tick_s), "--log-format", "json"]
    monitor_log, sim_log = workdir / f"monitor-{port}.log", workdir / f"simulate-{port}.log"
    batches_only = ["--telemetry-input", "batches"] if aggregators else []
    with mosquitto(workdir) as broker, contextlib.ExitStack() as running:
        with monitor_log.open("w") as out:
            monitor = subprocess.Popen([*rainierd, "monitor", *common, "--mqtt-url", broker.url, *batches_only,
                                        "--metrics-addr", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
        running.callback(_stop, monitor)
        poll_until(lambda: monitor_values(port).get("rainier_mqtt_connected") == 1, 120, "the monitor to connect")
        agg_procs, agg_ports = [], []
        for i in range(aggregators):
            agg_port = free_port()
            with (workdir / f"aggregate-{i}-{port}.log").open("w") as out:
                agg = subprocess.Popen([*rainierd, "aggregate", *common, "--mqtt-url", broker.url,
                                        "--shard", f"{i}/{aggregators}", "--mqtt-client-id", f"rainierd-aggregate-{i}",
                                        "--batch-nodes", str(batch_nodes or 128),
                                        "--metrics-addr", f"127.0.0.1:{agg_port}"],
                                       stdout=out, stderr=subprocess.STDOUT)
            running.callback(_stop, agg)
            agg_procs.append(agg)
            agg_ports.append(agg_port)
        for agg_port in agg_ports:
            poll_until(lambda p=agg_port: current_values(p, only=("rainier_aggregator_mqtt",)).get(  # type: ignore[misc]
                "rainier_aggregator_mqtt_connected") == 1, 120, "an aggregator to connect")
        sim = simulator(running, topology, mqtt_url=broker.url, tick_s=tick_s, ticks=ticks,
                        batch_nodes=0 if aggregators else batch_nodes, log=sim_log)
        yield Fleet(broker, monitor, sim, port, monitor_log, sim_log, tuple(agg_procs), tuple(agg_ports))


def simulator(
    running: contextlib.ExitStack, topology: str, *, mqtt_url: str, tick_s: float, ticks: int, batch_nodes: int,
    log: Path, extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``rainierd simulate`` (``extra``: more of its flags) logging JSON to ``log``; ``running`` stops it
    (SIGINT, then a kill after 30 s)."""
    with log.open("w") as out:
        sim = subprocess.Popen([sys.executable, "-m", "rainierd", "simulate", "--topology", topology,
                                "--tick", str(tick_s), "--log-format", "json", "--mqtt-url", mqtt_url,
                                "--ticks", str(ticks), "--batch-nodes", str(batch_nodes), *extra],
                               stdout=out, stderr=subprocess.STDOUT)
    running.callback(_stop, sim)
    return sim


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def last_log(path: Path, event: str) -> dict[str, Any]:
    """Return the last JSON log line of ``path`` whose event is ``event`` ({} if none)."""
    found: dict[str, Any] = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            found = json.loads(line)
    return found
