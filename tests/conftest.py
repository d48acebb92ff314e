"""Shared fixtures: a real Mosquitto started per test on a free loopback port,
and rainierd subprocesses and real Prometheus servers that are always stopped
after the test; and the tiers (pyproject.toml names the markers).

The folders mirror the house: tests/unit/<package>/ holds the tests of
rainierd/<package>/ (and tests/unit/benchmarks, harness, deploy, docs those of
what lives beside the package), tests/integration/ the tests that start real
processes, tests/e2e/ those that drive a whole deployment.  The tier is the
marker: every test under tests/integration/ is ``integration``, every test
under tests/e2e/ is ``e2e`` and ``integration``; a test that uses a
fixture starting a tool gets that tool's marker, and any test with a tool
marker is ``integration`` wherever it lives.  A test outside the integration
tier that starts a process fails: the unit tier (``pytest -m "not
integration"``) must run on a machine with none of the tools, and fast.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from harness import procs
from harness.procs import Broker, free_port, start_prometheus, wait_for_port
from harness.slurm import SlurmCluster
from harness.terminal import Terminal

HERE = Path(__file__).parent
INTEGRATION_DIR = HERE / "integration"
E2E_DIR = HERE / "e2e"
TOOLS = ("mosquitto", "prometheus", "alertmanager", "nats", "kubectl", "podman", "slurm", "systemd", "tmux")
# The fixtures that start a tool, and the tool (a test using one needs that binary).
FIXTURE_TOOLS = {"mosquitto_process": "mosquitto", "mosquitto": "mosquitto", "secure_mosquitto": "mosquitto",
                 "prometheus": "prometheus", "nats": "nats", "slurm": "slurm", "terminal": "tmux"}
# Fixtures that start some process, whatever else the test does.
PROCESS_FIXTURES = frozenset(FIXTURE_TOOLS) | {"start_rainierd"}


def _long_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("long")
    return float(marker.args[0]) if marker is not None and marker.args else 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the tools its fixtures start, and ``integration`` if it starts any process; put the
    ``long`` tests first, longest first (scripts/test hands the integration tier's tests out one at a time, so
    each starts on the first free worker: the longest first is the schedule that leaves the workers finishing
    together, where one started last ran alone at the tier's end)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture, tool in FIXTURE_TOOLS.items():
            if fixture in fixtures and item.get_closest_marker(tool) is None:
                item.add_marker(tool)
        if E2E_DIR in item.path.parents and item.get_closest_marker("e2e") is None:
            item.add_marker("e2e")
        if item.get_closest_marker("integration") is None and (
            INTEGRATION_DIR in item.path.parents
            or fixtures & PROCESS_FIXTURES
            or any(item.get_closest_marker(marker) for marker in (*TOOLS, "e2e"))
        ):
            item.add_marker("integration")
    items.sort(key=_long_seconds, reverse=True)  # stable: every other test keeps its place


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the integration tier, starting a process fails the test: the unit tier promises to start none."""
    if request.node.get_closest_marker("integration") is not None:
        return

    def refuse(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
        raise AssertionError(f"a unit test starts no process (it started {args!r}): mark it integration "
                             f"(a tool marker, pyproject.toml) or move it to tests/integration/ or tests/e2e/")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """Each test starts with structlog's defaults: one that configures logging (the CLI's ``main`` does, at the
    level it is given) would otherwise filter the next test's log capture (seen: an exporter test's info line
    missing in the full unit tier, present alone)."""
    yield
    structlog.reset_defaults()


class MosquittoProcess(procs.MosquittoProcess):
    """A real Mosquitto with tests/mosquitto.conf on a fixed free port that a test may kill and start again."""

    def __init__(self, tmp_path: Path) -> None:
        try:
            super().__init__(tmp_path, (HERE / "mosquitto.conf").read_text())
        except procs.MissingBinaryError as exc:
            pytest.fail(str(exc))


@pytest.fixture
def mosquitto_process(tmp_path: Path) -> Iterator[MosquittoProcess]:
    """Start a real Mosquitto on a free loopback port; the test may kill and restart it."""
    broker = MosquittoProcess(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def mosquitto(mosquitto_process: MosquittoProcess) -> Broker:
    """A real Mosquitto on a free loopback port for one test."""
    return Broker(mosquitto_process.port)


@dataclass
class Daemon:
    """A rainierd subprocess and where its output goes."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[str]:
        """Return the ``event`` of every JSON log line so far."""
        return [json.loads(line)["event"] for line in self.log().splitlines() if line.startswith("{")]

    def interrupt(self, timeout_s: float = 5.0, sig: int = signal.SIGINT) -> tuple[int, float]:
        """Send ``sig`` (SIGINT); return (exit code, seconds it took to exit)."""
        started = time.monotonic()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout_s)
        return code, time.monotonic() - started


@pytest.fixture
def start_rainierd(tmp_path: Path) -> Iterator[object]:
    """Return a function that starts ``python -m rainierd ARGS``; all are stopped after the test."""
    started: list[Daemon] = []

    def start(
        *args: str, name: str = "rainierd", env: dict[str, str] | None = None, stdin: int | None = None,
    ) -> Daemon:
        log_path = tmp_path / f"{name}-{len(started)}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        with log_path.open("w") as log:  # the child holds its own copy of the descriptor
            proc = subprocess.Popen(
                [sys.executable, "-m", "rainierd", *args, "--log-format", "json"],
                stdout=log, stderr=subprocess.STDOUT, env=env, stdin=stdin,
            )
        daemon = Daemon(proc, log_path)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
        if daemon.proc.stdin is not None:  # a test that fed the process (stdin=PIPE) leaves its end to us
            daemon.proc.stdin.close()


StartTerminal = Callable[..., Terminal]


@pytest.fixture
def terminal() -> Iterator[StartTerminal]:
    """Return a function that runs a command in a real terminal (a tmux pane: harness/terminal.py); every
    terminal is killed after the test."""
    opened: list[Terminal] = []

    def start(command: list[str], **kw: object) -> Terminal:
        term = Terminal(command, **kw)  # type: ignore[arg-type]
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    """A one-node Slurm cluster (munged, slurmctld, slurmd on loopback; harness/slurm.py) whose node is the
    two-site inventory's ``ip-10-0-17-8``, idle; every job still running is cancelled and every daemon stopped
    after the test."""
    try:
        cluster = SlurmCluster(node="ip-10-0-17-8", first_job_id=41871)
    except procs.MissingBinaryError as exc:
        pytest.fail(f"{exc}; scripts/test, run as root, installs slurmctld, slurmd, slurm-client and munge")
    except PermissionError as exc:
        pytest.fail(str(exc))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


StartPrometheus = Callable[[dict[str, object]], int]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[StartPrometheus]:
    """Return a function that starts a real Prometheus with a given config (harness.procs.start_prometheus)
    and returns its port; every one started is stopped after the test.  The first runs in ``tmp_path`` (its
    ``prometheus.log`` there), each further one in ``tmp_path/prometheus-<n>``: two TSDBs cannot share a
    directory."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(config: dict[str, object]) -> int:
        workdir = tmp_path / f"prometheus-{len(procs)}" if procs else tmp_path
        workdir.mkdir(exist_ok=True)
        proc, port = start_prometheus(workdir, config)
        procs.append(proc)
        return port

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass(frozen=True)
class SecureBroker:
    """A running Mosquitto that wants TLS and a username and password."""

    port: int
    ca_file: Path
    username: str
    password: str

    @property
    def url(self) -> str:
        return f"mqtts://127.0.0.1:{self.port}"


@pytest.fixture
def secure_mosquitto(tmp_path: Path) -> Iterator[SecureBroker]:
    """Start a real Mosquitto with TLS (a throwaway CA) and password authentication."""
    for tool in ("openssl", "mosquitto_passwd"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install openssl mosquitto (scripts/test does)")
    # Mosquitto started as root drops to its own user before reading the
    # password file, and pytest's tmp_path sits under a 0700 directory.
    d = Path(tempfile.mkdtemp(prefix="rainierd-tls-"))
    d.chmod(0o755)

    def run(*cmd: str) -> None:
        subprocess.run(cmd, check=True, cwd=d, capture_output=True)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=rainierd test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "1", "-extfile", "san.ext", "-out", "server.crt")
    password = "s3cret-" + os.urandom(6).hex()
    run("mosquitto_passwd", "-b", "-c", "passwd", "rainier", password)
    for f in d.iterdir():
        f.chmod(0o644)
    port = free_port()
    config = d / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\n"
        f"cafile {d / 'ca.crt'}\ncertfile {d / 'server.crt'}\nkeyfile {d / 'server.key'}\n"
        f"allow_anonymous false\npassword_file {d / 'passwd'}\npersistence false\n"
    )
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    log = (tmp_path / "mosquitto-tls.log").open("w")
    proc = subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        yield SecureBroker(port, d / "ca.crt", "rainier", password)
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        log.close()
        shutil.rmtree(d, ignore_errors=True)
