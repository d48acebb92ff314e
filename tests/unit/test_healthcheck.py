"""Specification of ``rainierd healthcheck`` against real exporter servers,
of the simulator's probes, and of the Dockerfile's use of both."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import bcrypt
import pytest

from harness.procs import free_port
from harness.waits import poll_until
from rainierd import __version__
from rainierd.cli import main
from rainierd.daemon import _SimulatorProbes
from rainierd.healthcheck import HealthcheckConfig
from rainierd.http.webconfig import load_web_config
from rainierd.mqtt.connection import ConnectionState
from rainierd.runtime.probes import Verdict
from rainierd.settings import load_settings
from tests.certs import Pki, make_pki
from tests.serving import role_server

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse"
OK, READY = Verdict(True, "ok"), Verdict(True, "ready")
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a server certificate for 127.0.0.1."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@asynccontextmanager
async def serving(
    *, healthy: Verdict = OK, ready: Verdict = READY, host: str = "127.0.0.1",
    web_config: Path | None = None,
) -> AsyncIterator[int]:
    """Serve a real role's server whose probes answer ``healthy`` and ``ready``; yield its port."""
    server = role_server(generation=lambda: 0, healthy=lambda: healthy, ready=lambda: ready, host=host,
                         web=None if web_config is None else load_web_config(web_config))
    async with server:
        yield server.port


async def healthcheck(capsys: pytest.CaptureFixture[str], *argv: str) -> int:
    """Run ``rainierd healthcheck ARGV`` off the event loop the server runs on; return its exit code.

    What the server has logged so far is dropped, so only the command's output remains to be read.
    """
    capsys.readouterr()
    return await asyncio.to_thread(main, ["healthcheck", *argv])


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """Return the command's output, asserting it is exactly one line on stdout and nothing on stderr."""
    out, err = capsys.readouterr()
    assert (out.count("\n"), err) == (1, "")
    return out.strip()


class TestVerdicts:
    async def test_healthy_exits_0_with_the_reason(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A role answering /healthz 200 makes exit 0 and one line naming the URL and its answer."""
        async with serving() as port:
            assert await healthcheck(capsys, "--metrics-addr", f"127.0.0.1:{port}") == 0
        assert one_line(capsys) == f"healthy: http://127.0.0.1:{port}/healthz: ok"

    async def test_unhealthy_exits_1_with_the_roles_reason(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A role answering 503 makes exit 1 and one line carrying the role's own reason."""
        async with serving(healthy=Verdict(False, "analysis stalled")) as port:
            assert await healthcheck(capsys, "--metrics-addr", f"127.0.0.1:{port}") == 1
        assert one_line(capsys) == f"unhealthy: http://127.0.0.1:{port}/healthz: 503 analysis stalled"

    async def test_ready_asks_readyz(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--ready probes /readyz, which may fail while /healthz passes."""
        async with serving(ready=Verdict(False, "mqtt not connected")) as port:
            assert await healthcheck(capsys, "--metrics-addr", f"127.0.0.1:{port}") == 0
            assert await healthcheck(capsys, "--metrics-addr", f"127.0.0.1:{port}", "--ready") == 1
        assert one_line(capsys) == f"unhealthy: http://127.0.0.1:{port}/readyz: 503 mqtt not connected"

    def test_nothing_listening_exits_1(self, capsys: pytest.CaptureFixture[str]) -> None:
        """With nothing at the address, exit 1 saying so."""
        port = free_port()
        assert main(["healthcheck", "--metrics-addr", f"127.0.0.1:{port}"]) == 1
        assert one_line(capsys).startswith(f"unhealthy: http://127.0.0.1:{port}/healthz: nothing listening")

    def test_an_invalid_address_exits_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad metrics_addr is a configuration error, exit 2, as for the roles."""
        assert main(["healthcheck", "--metrics-addr", "nowhere"]) == 2
        assert "metrics_addr" in capsys.readouterr().err


class TestSameSettingsAsTheRole:
    async def test_reads_the_environment(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """RAINIERD_METRICS_ADDR moves the probe as it moves the role: no port is hard-coded."""
        async with serving() as port:
            monkeypatch.setenv("RAINIERD_METRICS_ADDR", f"127.0.0.1:{port}")
            assert await healthcheck(capsys) == 0
        assert one_line(capsys).startswith(f"healthy: http://127.0.0.1:{port}/")

    async def test_reads_the_config_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """metrics_addr in the RAINIERD_CONFIG file is found as the role finds it."""
        async with serving() as port:
            config = tmp_path / "rainierd.toml"
            config.write_text(f'metrics_addr = "127.0.0.1:{port}"\n')
            monkeypatch.setenv("RAINIERD_CONFIG", str(config))
            assert await healthcheck(capsys) == 0
        assert one_line(capsys).startswith(f"healthy: http://127.0.0.1:{port}/")

    async def test_any_address_is_probed_on_loopback(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A role listening on 0.0.0.0 (as in the image) is probed at 127.0.0.1."""
        async with serving(host="0.0.0.0") as port:
            assert await healthcheck(capsys, "--metrics-addr", f"0.0.0.0:{port}") == 0
        assert one_line(capsys).startswith(f"healthy: http://127.0.0.1:{port}/healthz")


class TestConfig:
    def test_the_settings_reach_the_probe_as_its_own_config(self) -> None:
        """Settings.healthcheck_config: the role's address and web config, and the probe's user and password file."""
        settings = load_settings({"metrics_addr": "[::]:9790", "web_config_file": "web.yml",
                                  "healthcheck_user": "grafana", "healthcheck_password_file": "password"})
        assert settings.healthcheck_config() == HealthcheckConfig(
            host="::", port=9790, web_config_file=Path("web.yml"), user="grafana", password_file=Path("password"))
        assert load_settings({}).healthcheck_config() == HealthcheckConfig(host="127.0.0.1", port=9780)


class TestWebConfig:
    async def test_tls_and_basic_auth(
        self, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Over TLS with basic auth the probe speaks HTTPS and sends the password of its password file, never
        printed."""
        web = tmp_path / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
                       f"basic_auth_users:\n  prometheus: '{HASH}'\n")
        password = tmp_path / "password"
        monkeypatch.setenv("RAINIERD_WEB_CONFIG_FILE", str(web))
        async with serving(web_config=web) as port:
            addr = f"127.0.0.1:{port}"
            assert await healthcheck(capsys, "--metrics-addr", addr) == 1
            assert one_line(capsys) == ("unhealthy: the web config asks for basic auth: "
                                        "set --basic-auth-password-file or RAINIERD_HEALTHCHECK_PASSWORD_FILE")
            monkeypatch.setenv("RAINIERD_HEALTHCHECK_PASSWORD_FILE", str(password))
            password.write_text("wrong\n")
            assert await healthcheck(capsys, "--metrics-addr", addr) == 1
            assert one_line(capsys) == (f"unhealthy: https://{addr}/healthz: 401, the server refused the "
                                        "healthcheck's credentials")
            password.write_text(f"{PASSWORD}\n")
            assert await healthcheck(capsys, "--metrics-addr", addr) == 0
            line = one_line(capsys)
        assert line == f"healthy: https://{addr}/healthz: ok"
        assert PASSWORD not in line

    async def test_several_users_need_a_named_one(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """With more than one user the probe needs its user named as well, by flag as top and node-check take it."""
        web = tmp_path / "web.yml"
        web.write_text(f"basic_auth_users:\n  prometheus: '{HASH}'\n  grafana: '{HASH}'\n")
        password = tmp_path / "password"
        password.write_text(PASSWORD)
        async with serving(web_config=web) as port:
            argv = ("--metrics-addr", f"127.0.0.1:{port}", "--web-config-file", str(web),
                    "--basic-auth-password-file", str(password))
            assert await healthcheck(capsys, *argv) == 1
            assert one_line(capsys) == ("unhealthy: the web config asks for basic auth: "
                                        "set --basic-auth-user or RAINIERD_HEALTHCHECK_USER")
            assert await healthcheck(capsys, *argv, "--basic-auth-user", "grafana") == 0
        assert one_line(capsys).startswith("healthy:")

    async def test_credentials_come_from_the_config_file_too(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """healthcheck_user and healthcheck_password_file are settings: the role's config file may give them."""
        web = tmp_path / "web.yml"
        web.write_text(f"basic_auth_users:\n  prometheus: '{HASH}'\n  grafana: '{HASH}'\n")
        password = tmp_path / "password"
        password.write_text(PASSWORD)
        async with serving(web_config=web) as port:
            config = tmp_path / "rainierd.toml"
            config.write_text(f'metrics_addr = "127.0.0.1:{port}"\nweb_config_file = "{web}"\n'
                              f'healthcheck_user = "grafana"\nhealthcheck_password_file = "{password}"\n')
            monkeypatch.setenv("RAINIERD_CONFIG", str(config))
            assert await healthcheck(capsys) == 0
        assert one_line(capsys).startswith(f"healthy: http://127.0.0.1:{port}/healthz")

    def test_an_unreadable_password_file_is_unhealthy_naming_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A password file that cannot be read is an unhealthy verdict naming the file, exit 1."""
        web = tmp_path / "web.yml"
        web.write_text(f"basic_auth_users:\n  prometheus: '{HASH}'\n")
        missing = tmp_path / "nope"
        assert main(["healthcheck", "--web-config-file", str(web), "--basic-auth-password-file", str(missing)]) == 1
        assert one_line(capsys) == f"unhealthy: cannot read the password file {missing}: No such file or directory"

    def test_required_client_certificates_are_reported(
        self, pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A web config that requires client certificates is unhealthy with that reason, not a TLS error."""
        web = tmp_path / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
                       f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca_cert}\n")
        assert main(["healthcheck", "--web-config-file", str(web)]) == 1
        assert "requires client certificates" in one_line(capsys)


class FakeSimulator:
    """What the probes read of a Simulator: its tick length and how many ticks it has produced."""

    tick_s = 1.0

    def __init__(self) -> None:
        self.ticks_produced = 0


class TestSimulatorProbes:
    def test_healthy_while_ticks_advance_and_not_after_a_stall(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """/healthz stays healthy while ticks advance and fails once they stop for ten ticks and 5 s."""
        now = [100.0]
        monkeypatch.setattr("rainierd.daemon.time.monotonic", lambda: now[0])
        sim = FakeSimulator()
        probes = _SimulatorProbes(sim, ConnectionState())  # type: ignore[arg-type]
        verdicts = []
        for step_s, ticks in ((0, 0), (10, 10), (10, 20), (14, 20), (2, 20), (1, 21)):
            now[0] += step_s
            sim.ticks_produced = ticks
            verdicts.append(probes.healthy())
        assert verdicts == [Verdict(True, "ok")] * 4 + [Verdict(False, "simulator stalled after 20 ticks"),
                                                      Verdict(True, "ok")]

    def test_ready_while_connected(self) -> None:
        """/readyz follows the publishing session's connection."""
        connection = ConnectionState()
        probes = _SimulatorProbes(FakeSimulator(), connection)  # type: ignore[arg-type]
        before = probes.ready()
        connection.connected = True
        assert (before, probes.ready()) == (Verdict(False, "mqtt not connected"), Verdict(True, "ready"))


def probe(port: int, *flags: str) -> tuple[int, str]:
    """Return the exit code and output line of ``rainierd healthcheck`` at ``port``, run as its own process."""
    argv = [sys.executable, "-m", "rainierd", "healthcheck", "--metrics-addr", f"127.0.0.1:{port}", *flags]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    return done.returncode, done.stdout.strip()


class TestSimulateServesProbes:
    @pytest.mark.mosquitto
    def test_a_simulator_with_metrics_addr_is_healthy_and_ready(
        self, start_rainierd: Callable[..., object], mosquitto: object,
    ) -> None:
        """`rainierd simulate --metrics-addr A` answers the healthcheck at A: healthy, and ready once connected."""
        port = free_port()
        start_rainierd("simulate", "--mqtt-url", mosquitto.url,  # type: ignore[attr-defined]
                       "--metrics-addr", f"127.0.0.1:{port}", name="simulate")
        poll_until(lambda: probe(port, "--ready")[0] == 0, 15.0, "simulator ready")
        assert probe(port) == (0, f"healthy: http://127.0.0.1:{port}/healthz: ok")

    def test_without_a_broker_it_is_alive_but_not_ready(self, start_rainierd: Callable[..., object]) -> None:
        """With its broker unreachable a simulator still ticks (healthy) but is not ready."""
        port = free_port()
        start_rainierd("simulate", "--mqtt-url", f"mqtt://127.0.0.1:{free_port()}",
                       "--metrics-addr", f"127.0.0.1:{port}", name="simulate")
        poll_until(lambda: probe(port)[0] == 0, 15.0, "simulator probes answering")
        assert probe(port, "--ready") == (1, f"unhealthy: http://127.0.0.1:{port}/readyz: 503 mqtt not connected")

    def test_without_metrics_addr_it_binds_nothing(self) -> None:
        """Unless metrics_addr is set, a simulator serves no probes, so it never contends for a monitor's port."""
        assert "metrics_addr" not in load_settings({}).model_fields_set
        assert "metrics_addr" in load_settings({"metrics_addr": "127.0.0.1:1"}).model_fields_set


class TestDockerfile:
    text = (ROOT / "Dockerfile").read_text()

    def test_healthcheck_is_the_command(self) -> None:
        """The image's HEALTHCHECK runs `rainierd healthcheck`, with no address of its own."""
        assert re.search(r'^\s*CMD \["rainierd", "healthcheck"\]$', self.text, re.MULTILINE)
        assert "9780/healthz" not in self.text

    def test_oci_labels_and_the_packages_version(self) -> None:
        """The image is labelled with the OCI keys, its version defaulting to the package's."""
        labels = set(re.findall(r"org\.opencontainers\.image\.([a-z]+)=", self.text))
        assert labels == {"title", "description", "source", "licenses", "version", "revision", "created"}
        assert f"ARG VERSION={__version__}\n" in self.text
