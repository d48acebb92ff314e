"""What the process benchmarks need from outside a process: its CPU time and
memory (Linux /proc), free loopback ports, a throwaway Mosquitto, and a
parsed scrape of a /metrics endpoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Broker",
    "cpu_s",
    "free_port",
    "histogram_quantile",
    "max_rss_bytes",
    "mosquitto",
    "rss_bytes",
    "scrape",
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
