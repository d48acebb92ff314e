"""The exporter behind TLS and basic auth, end to end: a real ``rainierd
monitor`` with an exporter-toolkit web config, scraped by a real Prometheus
over https with a CA file and a password, and probed by hand; a bad web
config stops the process at start with exit code 2."""

from __future__ import annotations

import http.client
import os
import ssl
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable
from pathlib import Path

import bcrypt
import pytest

from harness.procs import Broker, free_port, wait_for_port
from harness.timing import TICK_S
from harness.waits import poll_until
from tests.certs import Pki, make_pki
from tests.conftest import Daemon, StartPrometheus
from tests.e2e.test_alerts import query

pytestmark = pytest.mark.prometheus

USER = "prometheus"
JOB = "rainierd-tls"
Start = Callable[..., Daemon]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A throwaway CA and a server certificate for 127.0.0.1."""
    directory = tmp_path / "pki"
    directory.mkdir()
    return make_pki(directory)


def get(url: str, *, context: ssl.SSLContext | None, authorization: str | None = None) -> tuple[int, dict[str, str]]:
    """Return (status, headers) of GET ``url``; an HTTP error status is a result, not an exception."""
    request = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            response.read()
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def basic(user: str, password: str) -> str:
    return "Basic " + b64encode(f"{user}:{password}".encode()).decode()


def first_value(port: int, expr: str) -> float | None:
    result = query(port, expr)["data"]["result"]  # type: ignore[index]
    return float(result[0]["value"][1]) if result else None


@pytest.mark.mosquitto
def test_prometheus_scrapes_over_tls_with_basic_auth(
    mosquitto: Broker, start_rainierd: Start, prometheus: StartPrometheus, pki: Pki, tmp_path: Path,
) -> None:
    """Prometheus with scheme https, the CA and the password scrapes the monitor (up == 1, its metrics arrive);
    plain HTTP, no credentials and a wrong password are refused; the password is in no log line."""
    password = "scrape-" + os.urandom(8).hex()
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    web = pki.directory / "web.yml"  # relative paths: from the config file's directory
    web.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    port = free_port()
    monitor = start_rainierd("monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}",
                             "--web-config-file", str(web), "--tick", str(TICK_S), "--log-level", "debug",
                             name="monitor")
    wait_for_port(port)
    url = f"https://127.0.0.1:{port}"
    trusted = ssl.create_default_context(cafile=pki.ca_cert)  # verifies the certificate and 127.0.0.1

    with pytest.raises((OSError, http.client.HTTPException)):  # the TLS port speaks no plain HTTP
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # the server shows our CA's cert
        urllib.request.urlopen(f"{url}/metrics", timeout=5, context=ssl.create_default_context())
    status, headers = get(f"{url}/metrics", context=trusted)
    assert (status, headers.get("WWW-Authenticate")) == (401, 'Basic realm="rainierd"')
    assert get(f"{url}/healthz", context=trusted)[0] == 401
    assert get(f"{url}/metrics", context=trusted, authorization=basic(USER, "wrong-password"))[0] == 401
    assert get(f"{url}/metrics", context=trusted, authorization=basic("mallory", password))[0] == 401
    assert get(f"{url}/metrics", context=trusted, authorization=basic(USER, password))[0] == 200
    assert monitor.proc.poll() is None

    prom_port = prometheus({"global": {"scrape_interval": "1s"}, "scrape_configs": [{
        "job_name": JOB, "scheme": "https",
        "tls_config": {"ca_file": str(pki.ca_cert)},
        "basic_auth": {"username": USER, "password": password},
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }]})
    poll_until(lambda: first_value(prom_port, f'up{{job="{JOB}"}}') == 1, 20, "Prometheus to scrape the monitor")
    poll_until(lambda: first_value(prom_port, f'rainier_mqtt_connected{{job="{JOB}"}}') == 1, 20,
               "the monitor's metrics in Prometheus")
    assert first_value(prom_port, f'rainier_build_info{{job="{JOB}"}}') == 1

    assert monitor.interrupt()[0] == 0
    log = monitor.log()
    assert "metrics endpoint listening" in log
    assert f"https://127.0.0.1:{port}/metrics" in log
    assert password not in log
    assert basic(USER, password).split()[1] not in log
    assert "Traceback" not in log  # the refused handshakes were not logged one by one
    assert password not in (tmp_path / "prometheus.log").read_text()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (f"basic_auth_users:\n  {USER}: plain-text-password\n", f"basic_auth_users.{USER} is not a bcrypt hash"),
        ("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
         "tls_server_config.cert_file {dir}/missing.crt: No such file or directory"),
    ],
    ids=["plain-password", "missing-certificate"],
)
def test_bad_web_config_stops_the_monitor_with_exit_2(
    start_rainierd: Start, pki: Pki, config: str, message: str,
) -> None:
    """A bad web config stops `rainierd monitor` at start: exit code 2 and one line saying what is wrong."""
    web = pki.directory / "web.yml"
    web.write_text(config)
    monitor = start_rainierd("monitor", "--metrics-addr", f"127.0.0.1:{free_port()}", "--web-config-file", str(web),
                             name="monitor")
    assert monitor.proc.wait(timeout=20) == 2
    lines = [line for line in monitor.log().splitlines() if line.startswith("rainierd: ")]
    assert len(lines) == 1
    assert lines[0].startswith(f"rainierd: web config file {web}: " + message.format(dir=pki.directory))
    assert "plain-text-password" not in monitor.log()
    assert "Traceback" not in monitor.log()


@pytest.mark.mosquitto
def test_the_bridge_serves_its_metrics_over_tls_with_basic_auth(
    mosquitto: Broker, start_rainierd: Start, pki: Pki, tmp_path: Path,
) -> None:
    """`rainierd bridge neuron-monitor --web-config-file` serves /metrics and its probes as the monitor does:
    TLS with the configured certificate, 401 without the password, 200 with it."""
    password = "scrape-" + os.urandom(8).hex()
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    web = pki.directory / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    port = free_port()
    inventory = Path(__file__).parents[1] / "data" / "inventory-two-sites.toml"
    fifo = tmp_path / "neuron-monitor.fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # neuron-monitor's end: held open, so the bridge's input never ends
    reader = os.open(fifo, os.O_RDONLY)
    try:
        bridge = start_rainierd("bridge", "neuron-monitor", "--node", "ip-10-0-17-8", "--topology", str(inventory),
                                "--mqtt-url", mosquitto.url, "--listen", f"127.0.0.1:{port}",
                                "--web-config-file", str(web), name="bridge", stdin=reader)
        wait_for_port(port)
        url = f"https://127.0.0.1:{port}"
        trusted = ssl.create_default_context(cafile=pki.ca_cert)
        assert get(f"{url}/metrics", context=trusted)[0] == 401
        assert get(f"{url}/healthz", context=trusted)[0] == 401
        assert get(f"{url}/metrics", context=trusted, authorization=basic(USER, password))[0] == 200
        assert bridge.interrupt()[0] == 0
        assert password not in bridge.log()
    finally:
        os.close(reader)
        os.close(writer)
