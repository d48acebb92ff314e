"""MQTT over TLS with a username and password, against a real Mosquitto; the
password never reaches a log line."""

from __future__ import annotations

import time

from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import within
from tests.conftest import SecureBroker


def test_tls_and_password_authentication(secure_mosquitto: SecureBroker, start_rainierd: object) -> None:
    """simulate and monitor talk over mqtts:// with credentials; the password appears in no log."""
    broker = secure_mosquitto
    port = free_port()
    common = ["--mqtt-url", broker.url, "--mqtt-ca-file", str(broker.ca_file), "--mqtt-username", broker.username,
              "--tick", "0.3"]
    env = {"RAINIERD_MQTT_PASSWORD": broker.password}
    monitor = start_rainierd("monitor", *common, "--metrics-addr", f"127.0.0.1:{port}",  # type: ignore[operator]
                             "--log-level", "debug", env=env, name="monitor")
    sim = start_rainierd("simulate", *common, "--ticks", "6", "--log-level", "debug",  # type: ignore[operator]
                         env=env, name="simulate")
    assert sim.proc.wait(timeout=within(20)) == 0, sim.log()
    deadline = time.monotonic() + within(10)
    while current_values(port).get("rainier_monitor_last_tick") != 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert current_values(port)["rainier_monitor_last_tick"] == 5
    assert current_values(port)["rainier_ingest_frames_lost_total"] == 0
    assert monitor.interrupt()[0] == 0
    for daemon in (monitor, sim):
        assert broker.password not in daemon.log()
        assert "mqtt connected" in daemon.log()


def test_wrong_password_is_retried_not_fatal(secure_mosquitto: SecureBroker, start_rainierd: object) -> None:
    """With a wrong password the monitor keeps retrying, stays not ready, and logs no password."""
    broker = secure_mosquitto
    port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", broker.url, "--mqtt-ca-file", str(broker.ca_file),
        "--mqtt-username", broker.username, "--metrics-addr", f"127.0.0.1:{port}",
        env={"RAINIERD_MQTT_PASSWORD": "wrong-password-123"}, name="monitor",
    )
    deadline = time.monotonic() + within(10)
    while current_values(port).get("rainier_mqtt_connection_failures_total", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    values = current_values(port)
    assert values["rainier_mqtt_connection_failures_total"] >= 2
    assert values["rainier_mqtt_connected"] == 0
    assert monitor.proc.poll() is None
    assert monitor.interrupt()[0] == 0
    assert "wrong-password-123" not in monitor.log()
    assert "mqtt connection failed; retrying" in monitor.log()
