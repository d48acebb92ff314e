"""Helpers shared by the tests: free loopback ports, scraping, parsing."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


@dataclass(frozen=True)
class Broker:
    """A running Mosquitto."""

    port: int

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"


def scrape(port: int, path: str = "/metrics") -> str:
    """Return the body of GET http://127.0.0.1:port/path."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return str(response.read().decode())


def sample_values(text: str) -> dict[str, float]:
    """Return {series: value} of a Prometheus text exposition."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            values[series] = float(value)
    return values


def current_values(port: int) -> dict[str, float]:
    """Return the samples of a scrape of 127.0.0.1:port, or {} while nothing answers."""
    try:
        return sample_values(scrape(port))
    except OSError:
        return {}


async def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll a blocking ``condition`` (off the loop) until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(condition):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
