"""Shared fixtures: a real Mosquitto started per test on a free loopback port,
and rainierd subprocesses that are always stopped after the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import Broker, free_port, wait_for_port

HERE = Path(__file__).parent


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """Start a real Mosquitto on a free loopback port for one test."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(binary).exists():
        pytest.fail("the mosquitto binary is missing: apt-get install mosquitto (.ci/run does)")
    port = free_port()
    config = tmp_path / "mosquitto.conf"
    config.write_text((HERE / "mosquitto.conf").read_text().replace("@PORT@", str(port)))
    log = (tmp_path / "mosquitto.log").open("w")
    proc = subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        yield Broker(port)
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        log.close()


@dataclass
class Daemon:
    """A rainierd subprocess and where its output goes."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def interrupt(self, timeout_s: float = 5.0) -> tuple[int, float]:
        """Send SIGINT; return (exit code, seconds it took to exit)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=timeout_s)
        return code, time.monotonic() - started


@pytest.fixture
def start_rainierd(tmp_path: Path) -> Iterator[object]:
    """Return a function that starts ``python -m rainierd ARGS``; all are stopped after the test."""
    started: list[Daemon] = []

    def start(*args: str, name: str = "rainierd") -> Daemon:
        log_path = tmp_path / f"{name}-{len(started)}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "rainierd", *args, "--log-format", "json"],
            stdout=log_path.open("w"), stderr=subprocess.STDOUT, env=env,
        )
        daemon = Daemon(proc, log_path)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
