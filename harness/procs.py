"""What the process benchmarks need from outside a process: its CPU time and
memory (Linux /proc), free loopback ports, a throwaway Mosquitto, a fleet of
``rainierd monitor`` and ``rainierd simulate`` around it, and a parsed scrape
of a /metrics endpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Broker",
    "Fleet",
    "cpu_s",
    "fleet",
    "free_port",
    "histogram_buckets",
    "histogram_delta",
    "histogram_quantile",
    "last_log",
    "max_rss_bytes",
    "mosquitto",
    "rss_bytes",
    "runqueue_wait_s",
    "scrape",
    "wait_until",
]

_MOSQUITTO_CONF = """\
# A throwaway Mosquitto for one benchmark: loopback only, nothing kept on disk.
listener {port} 127.0.0.1
allow_anonymous true
persistence false
log_dest stdout
log_type error
log_type warning
# QoS 0 messages for a subscriber that is behind queue here instead of being
# dropped at once, so a slow monitor shows as lag (and, past this, as loss).
max_queued_messages 1000000
max_queued_bytes 0
"""


def cpu_s(pid: int) -> float:
    """Return the user + system CPU seconds process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def rss_bytes(pid: int) -> int:
    """Return the resident memory of ``pid`` now."""
    return _status_kib(pid, "VmRSS:") * 1024


def runqueue_wait_s(pid: int, tid: int | None = None) -> float:
    """Return the seconds thread ``tid`` of ``pid`` (default its main thread) has waited for a CPU while runnable."""
    fields = Path(f"/proc/{pid}/task/{tid or pid}/schedstat").read_text().split()
    return int(fields[1]) / 1e9


def max_rss_bytes(pid: int) -> int:
    """Return the peak resident memory of ``pid`` so far."""
    return _status_kib(pid, "VmHWM:") * 1024


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Broker:
    """A running Mosquitto."""

    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        """Return its URL."""
        return f"mqtt://127.0.0.1:{self.port}"


@contextlib.contextmanager
def mosquitto(workdir: Path) -> Iterator[Broker]:
    """Run a Mosquitto on a free loopback port for the duration of the block."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(binary).exists():
        raise RuntimeError("the mosquitto binary is missing: apt-get install mosquitto")
    port = free_port()
    config = workdir / f"mosquitto-{port}.conf"
    config.write_text(_MOSQUITTO_CONF.format(port=port))
    with (workdir / f"mosquitto-{port}.log").open("w") as log:
        proc = subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            yield Broker(proc, port)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@dataclass(frozen=True)
class Fleet:
    """A Mosquitto with ``rainierd monitor`` and ``rainierd simulate`` attached, each a process."""

    broker: Broker
    monitor: subprocess.Popen[bytes]
    simulate: subprocess.Popen[bytes]
    metrics_port: int
    monitor_log: Path
    simulate_log: Path


@contextlib.contextmanager
def fleet(topology: str, *, tick_s: float, ticks: int, batch_nodes: int, workdir: Path) -> Iterator[Fleet]:
    """Run Mosquitto, then the monitor, then (once it is connected) the simulator for ``ticks`` ticks.

    On leaving, the simulator (if still running) and the monitor are stopped
    with SIGINT, killed if they take more than 30 s.  Raises RuntimeError if
    the monitor does not connect within two minutes.
    """
    port = free_port()
    rainierd = [sys.executable, "-m", "rainierd"]
    common = ["--topology", topology, "--tick", str(tick_s), "--log-format", "json"]
    monitor_log, sim_log = workdir / f"monitor-{port}.log", workdir / f"simulate-{port}.log"
    with mosquitto(workdir) as broker, contextlib.ExitStack() as running:
        with monitor_log.open("w") as out:
            monitor = subprocess.Popen([*rainierd, "monitor", *common, "--mqtt-url", broker.url,
                                        "--metrics-addr", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
        running.callback(_stop, monitor)
        wait_until("the monitor to connect", lambda: scrape(port).get("rainier_mqtt_connected") == 1, 120)
        with sim_log.open("w") as out:
            sim = subprocess.Popen([*rainierd, "simulate", *common, "--mqtt-url", broker.url, "--ticks", str(ticks),
                                    "--batch-nodes", str(batch_nodes)], stdout=out, stderr=subprocess.STDOUT)
        running.callback(_stop, sim)
        yield Fleet(broker, monitor, sim, port, monitor_log, sim_log)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float) -> None:
    """Return once ``condition()`` is true; raise RuntimeError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def last_log(path: Path, event: str) -> dict[str, Any]:
    """Return the last JSON log line of ``path`` whose event is ``event`` ({} if none)."""
    found: dict[str, Any] = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            found = json.loads(line)
    return found


def scrape(port: int, timeout_s: float = 30.0) -> dict[str, float]:
    """Return {series: value} of a scrape of 127.0.0.1:port/metrics ({} while nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
            text = response.read().decode()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            values[series] = float(value)
    return values


def histogram_buckets(values: dict[str, float], name: str) -> list[tuple[float, float]]:
    """Return the cumulative (upper bound, count) buckets of histogram ``name`` (unlabelled) in a scrape."""
    buckets = []
    prefix = f"{name}_bucket{{"
    for series, count in values.items():
        if series.startswith(prefix):
            bound = series.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if bound == "+Inf" else float(bound), count))
    return sorted(buckets)


def histogram_delta(after: dict[str, float], before: dict[str, float], name: str) -> list[tuple[float, float]]:
    """Return the buckets of histogram ``name`` counted between two scrapes."""
    return [(bound, a - b) for (bound, a), (_, b)
            in zip(histogram_buckets(after, name), histogram_buckets(before, name), strict=True)]


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Return the ``q`` quantile of cumulative (upper bound, count) buckets, as Prometheus interpolates it."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1.0)
        lower_bound, lower_count = bound, count
    return None
