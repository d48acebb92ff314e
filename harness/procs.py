"""Processes the tests and benchmarks start and watch from outside: free
loopback ports, a throwaway Mosquitto and a real Prometheus started from the
machine's binaries (never installed from here: a missing one is named with
how to install it), and a process's CPU time and memory from Linux /proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from harness.timing import within
from harness.waits import poll_until

__all__ = [
    "BENCH_MOSQUITTO_CONF",
    "Broker",
    "MissingBinaryError",
    "MosquittoProcess",
    "cpu_s",
    "free_port",
    "max_rss_bytes",
    "mosquitto",
    "require_binary",
    "rss_bytes",
    "runqueue_wait_s",
    "start_prometheus",
    "wait_for_port",
]

# What a benchmark's Mosquitto runs with; ``@PORT@`` becomes a free port.
BENCH_MOSQUITTO_CONF = """\
# A throwaway Mosquitto for one benchmark: loopback only, nothing kept on disk.
listener @PORT@ 127.0.0.1
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


class MissingBinaryError(RuntimeError):
    """A program the harness starts is not on this machine; the message says how to install it."""


def require_binary(name: str, *, package: str, also: Sequence[str] = ()) -> str:
    """Return the path of program ``name`` (on PATH, else the first of ``also`` that exists).

    Raises MissingBinaryError naming the Debian ``package`` that carries it and
    scripts/install-tools, which installs it.
    """
    found = shutil.which(name) or next((path for path in also if Path(path).exists()), None)
    if found is None:
        message = f"{name} is missing: sudo apt-get install {package} (or sudo scripts/install-tools {package})"
        raise MissingBinaryError(message)
    return found


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:port; raise TimeoutError after ``timeout_s``
    (scaled by the harness's slack)."""
    timeout_s = within(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


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


def runqueue_wait_s(pid: int, tid: int | None = None) -> float:
    """Return the seconds thread ``tid`` of ``pid`` (default its main thread) has waited for a CPU while runnable."""
    fields = Path(f"/proc/{pid}/task/{tid or pid}/schedstat").read_text().split()
    return int(fields[1]) / 1e9


@dataclass(frozen=True)
class Broker:
    """A running MQTT broker on a loopback port."""

    port: int

    @property
    def url(self) -> str:
        """Return its URL."""
        return f"mqtt://127.0.0.1:{self.port}"


class MosquittoProcess:
    """A real Mosquitto on a fixed free port, configured from ``config`` (``@PORT@`` replaced), that its
    user may kill and start again; its config and log live in ``workdir``.

    Raises MissingBinaryError when the mosquitto binary is missing.
    """

    def __init__(self, workdir: Path, config: str) -> None:
        self.binary = require_binary("mosquitto", package="mosquitto", also=["/usr/sbin/mosquitto"])
        self.port = free_port()
        self.config = workdir / f"mosquitto-{self.port}.conf"
        self.config.write_text(config.replace("@PORT@", str(self.port)))
        self._log: IO[bytes] = (workdir / f"mosquitto-{self.port}.log").open("ab")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return its URL."""
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """Return the running broker's process id; raises RuntimeError when it is not running."""
        if self.proc is None:
            raise RuntimeError(f"the Mosquitto on port {self.port} is not running")
        return self.proc.pid

    def start(self) -> None:
        """Start the broker; return once it accepts connections (TimeoutError after 10 s)."""
        self.proc = subprocess.Popen([self.binary, "-c", str(self.config)], stdout=self._log,
                                     stderr=subprocess.STDOUT)
        wait_for_port(self.port)

    def kill(self) -> None:
        """SIGKILL the broker: no clean disconnect, as when a broker host dies."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=5)
            self.proc = None

    def stop(self) -> None:
        """SIGTERM the broker, wait for it, and close its log."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
        self._log.close()


@contextlib.contextmanager
def mosquitto(workdir: Path, config: str = BENCH_MOSQUITTO_CONF) -> Iterator[MosquittoProcess]:
    """Run a Mosquitto on a free loopback port for the duration of the block.

    Raises MissingBinaryError when the mosquitto binary is missing.
    """
    broker = MosquittoProcess(workdir, config)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


def start_prometheus(workdir: Path, config: dict[str, object]) -> tuple[subprocess.Popen[bytes], int]:
    """Start a real Prometheus with ``config`` on a free loopback port; return it and its port once ready.

    The config is written as JSON (which is YAML); its TSDB and log live in
    ``workdir``.  Ready means ``/-/ready`` answers 200: the port opens before
    the TSDB and the rules are loaded, and the API answers 503 until then.
    Raises MissingBinaryError, or AssertionError when it is not ready within 30 s.
    """
    binary = require_binary("prometheus", package="prometheus")
    path = workdir / "prometheus.yml"
    path.write_text(json.dumps(config))
    port = free_port()
    with (workdir / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                return True
        except OSError:  # refused, or 503 while starting
            return False

    try:
        poll_until(ready, 30, "prometheus to become ready")
    except AssertionError:
        proc.kill()
        raise
    return proc, port
