"""Helpers shared by the tests: free loopback ports, scraping, parsing,
polling, a real Prometheus, and the deployment checkers (kubectl kustomize,
kubernetes-validate)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.timing import within
from rainierd.promrules import RULES_DIR, write_overridden


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:port (``timeout_s`` scaled by the harness's
    slack, harness/timing.py)."""
    timeout_s = within(timeout_s)
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
    """Poll a blocking ``condition`` (off the loop) until true; fail naming ``what`` after ``timeout_s`` (scaled
    by the harness's slack, harness/timing.py)."""
    timeout_s = within(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(condition):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def poll_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s until true; fail naming ``what`` after ``timeout_s`` (scaled by the harness's
    slack, harness/timing.py; for blocking tests)."""
    timeout_s = within(timeout_s)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def start_prometheus(workdir: Path, config: dict[str, object]) -> tuple[subprocess.Popen[bytes], int]:
    """Start a real Prometheus with ``config`` on a free loopback port; return it once ready.

    The config is written as JSON (which is YAML); its TSDB and log live in
    ``workdir``.  Ready means ``/-/ready`` answers 200: the port opens before
    the TSDB and the rules are loaded, and the API answers 503 until then.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus binary is missing: apt-get install prometheus (scripts/test does)")
    path = workdir / "prometheus.yml"
    path.write_text(json.dumps(config))
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(workdir / "prometheus.log").open("w"), stderr=subprocess.STDOUT,
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


def rules_for_tests(target: Path, duration: str = "2s") -> list[Path]:
    """Write the shipped rules with every ``for:`` set to ``duration``, but RainierdTargetMissing's (1m).

    Until Prometheus's first scrape there is no ``up`` series, and a test-sized
    ``for:`` would fire the absent-target alert while Prometheus starts on a busy
    machine: right for the rule, noise for a test of another alert.
    """
    paths = write_overridden(RULES_DIR, target, duration)
    for path in paths:
        text = path.read_text()
        path.write_text(re.sub(r"(- alert: RainierdTargetMissing\n(?:[^\n]*\n)*?\s*for:\s*)\S+", r"\g<1>1m", text))
    return paths


def rainierd_prometheus_config(metrics_port: int, rules_dir: Path, *more_jobs: dict[str, Any],
                               scrape_s: float = 1.0) -> dict[str, object]:
    """Return a Prometheus config that scrapes a rainierd on ``metrics_port`` (job ``rainierd``) and ``more_jobs``
    every ``scrape_s`` and evaluates the shipped rules every second, written test-sized to ``rules_dir``
    (rules_for_tests)."""
    return {
        "global": {"scrape_interval": f"{scrape_s:g}s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rules_for_tests(rules_dir)],
        "scrape_configs": [{"job_name": "rainierd", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]},
                           *more_jobs],
    }


def tool(name: str) -> str:
    """Return the path of ``name`` in the venv or on PATH; fail naming how to install it."""
    here = Path(sys.executable).parent / name
    path = str(here) if here.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: pip install -e .[test] (check-jsonschema, kubernetes-validate), "
                    "apt-get install prometheus-alertmanager (amtool)")
    return path


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """Return the documents ``kubectl kustomize directory`` renders; fail if kubectl is missing or refuses."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is missing: apt-get install kubernetes-client (scripts/test does)")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return [m for m in yaml.safe_load_all(result.stdout) if m]


def assert_valid_strictly(manifests: list[dict[str, Any]], workdir: Path) -> None:
    """Assert that kubernetes-validate --strict accepts each of ``manifests`` (built-in kinds; unknown fields
    rejected), written to ``workdir``/rendered.yaml."""
    path = workdir / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    result = subprocess.run([tool("kubernetes-validate"), "--strict", str(path)],
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" passed for resource ") == len(manifests), result.stdout
