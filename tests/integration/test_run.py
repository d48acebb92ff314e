"""``rainierd run``: the one-command experience, with no broker installed."""

from __future__ import annotations

import json
import socket
import time

from harness.procs import free_port
from harness.scrape import sample_values, scrape


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


def test_run_serves_fleet_metrics_and_stops_cleanly(start_rainierd: object) -> None:
    """Within 10 s /metrics shows the demo fleet's peak and a plausible effective FP8; SIGINT exits 0 (within 2 s:
    test_stops.py)."""
    port = free_port()
    daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}")  # type: ignore[operator]
    values = wait_for_metrics(port, 10.0)
    assert values["rainier_fleet_fp8_peak_flops"] == 128 * 1.299e15
    assert 0.4 < values["rainier_fleet_fp8_effective_flops"] / values["rainier_fleet_fp8_peak_flops"] < 0.9
    assert values["rainier_mqtt_connected"] == 1
    assert daemon.interrupt()[0] == 0, daemon.log()
    events = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    broker = next(e for e in events if e["event"] == "embedded broker listening")
    assert broker["host"] == "127.0.0.1"
    assert broker["port"] != 1883
    assert events[-1]["event"] == "rainierd stopped"


def test_sigterm_also_stops_cleanly(start_rainierd: object) -> None:
    """SIGTERM (what a container runtime sends) drains and exits 0 too."""
    port = free_port()
    daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}", "--tick", "0.2")  # type: ignore[operator]
    wait_for_metrics(port, 10.0)
    daemon.proc.terminate()
    assert daemon.proc.wait(timeout=5) == 0  # within 2 s: test_stops.py


def test_metrics_port_in_use_fails_clearly(start_rainierd: object) -> None:
    """If the metrics address is taken, rainierd exits 1 with a log line saying so, before any task exists (no
    coroutine left never awaited)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}")  # type: ignore[operator]
        assert daemon.proc.wait(timeout=10) == 1
    log = daemon.log().lower()
    assert ("address already in use" in log, "never awaited" in log) == (True, False)
