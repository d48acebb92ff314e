"""``rainierd run``: the one-command experience, with no broker installed."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.procs import free_port
from harness.scrape import sample_values, scrape
from harness.timing import within
from harness.waits import poll_until


def wait_for_metrics(port: int, timeout_s: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            values = sample_values(scrape(port))
        except OSError:
            values = {}
        # Every UltraServer effective, not only the fleet: a tick's batches (one per topic bucket) may land in
        # different analysis windows, and the first window with rates can hold one UltraServer's.
        groups = [v for k, v in values.items() if k.startswith("rainier_ultraserver_fp8_effective_flops{")]
        if len(groups) == 2 and all(v > 0 for v in groups):
            return values
        time.sleep(0.2)
    raise AssertionError(f"no effective FP8 on /metrics within {timeout_s} s")


def test_run_serves_fleet_metrics_says_where_and_stops_cleanly(start_rainierd: object, tmp_path: Path) -> None:
    """Within 10 s /metrics shows the demo fleet's peak and a plausible effective FP8; `rainierd run` has printed its
    broker's and monitor's URLs, and `rainierd jobs static` (an MQTT 5 client, as every rainierd client by default)
    given that broker URL publishes its job within seconds, which the monitor lists; SIGINT exits 0 (within 2 s:
    test_stops.py).  Before issue 37 the embedded broker spoke 3.1.1 only: the adapter retried for 60 s, then
    printed a traceback."""
    port = free_port()
    daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}")  # type: ignore[operator]
    values = wait_for_metrics(port, 10.0)
    assert values["rainier_fleet_fp8_peak_flops"] == 128 * 1.299e15
    assert 0.4 < values["rainier_fleet_fp8_effective_flops"] / values["rainier_fleet_fp8_peak_flops"] < 0.9
    assert values["rainier_mqtt_connected"] == 1
    broker = re.search(r"^rainierd run: broker (mqtt://127\.0\.0\.1:\d+) ", daemon.log(), re.MULTILINE)
    assert broker is not None, daemon.log()
    assert f"rainierd run: monitor http://127.0.0.1:{port} " in daemon.log()
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[job]]\nid = "lab/pretrain"\nowner = "lab"\nnodes = ["n0", "n1"]\nstart = 2026-12-01T00:00:00Z\n')
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rainierd", "jobs", "static", str(jobs), "--mqtt-url",
                           broker.group(1), "--log-format", "json"], capture_output=True, text=True,
                          timeout=within(30), check=False)
    assert (done.returncode, time.monotonic() - started < within(10)) == (0, True), done.stderr
    poll_until(lambda: '"lab/pretrain"' in _get(port, "/api/v1/jobs"), within(10), "the job on /api/v1/jobs")
    assert daemon.interrupt()[0] == 0, daemon.log()
    events = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    listening = next(e for e in events if e["event"] == "embedded broker listening")
    assert (listening["host"], listening["url"]) == ("127.0.0.1", broker.group(1))
    assert listening["port"] != 1883
    assert events[-1]["event"] == "rainierd stopped"


def _get(port: int, path: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return b"".join(iter(lambda: conn.recv(65536), b"")).decode(errors="replace")


def test_sigterm_also_stops_cleanly(start_rainierd: object) -> None:
    """SIGTERM (what a container runtime sends) drains and exits 0 too."""
    port = free_port()
    daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}", "--tick", "0.2")  # type: ignore[operator]
    wait_for_metrics(port, 10.0)
    daemon.proc.terminate()
    assert daemon.proc.wait(timeout=5) == 0  # within 2 s: test_stops.py


def test_metrics_port_in_use_fails_clearly(start_rainierd: object) -> None:
    """If the metrics address is taken, rainierd exits 2 with one line naming the address and --metrics-addr,
    before anything starts: no embedded broker, no log line."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}")  # type: ignore[operator]
        assert daemon.proc.wait(timeout=10) == 2
    assert daemon.log() == (f"rainierd: 127.0.0.1:{port} is already in use (another rainierd?): give this one "
                            "another address with --metrics-addr HOST:PORT (or RAINIERD_METRICS_ADDR)\n")
