"""Stops that always stop: every role exits 0 within 2 s of SIGTERM or SIGINT,
whatever its broker is doing and however busy it is.

This is the one place that promise is asserted: other tests that stop a
process check its exit code.  The bound is the product's, so it is not
scaled by the harness's slack (harness/timing.py).

A container runtime gives a process a grace period between SIGTERM and
SIGKILL; a monitor that is still tearing down when SIGKILL lands leaves its
retained status ``online`` and its last state unsaved.  Each case brings a
real process (``python -m rainierd``) into one state, signals it, and times
the exit.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.procs import free_port
from harness.timing import within
from harness.waits import poll_until
from tests.conftest import Daemon, MosquittoProcess

GRACE_S = 2.0
Start = Callable[..., Daemon]


def role_args(role: str, url: str) -> list[str]:
    """Arguments that start ``role`` against the broker at ``url``, at a 0.2 s tick."""
    common = ["--mqtt-url", url, "--tick", "0.2"]
    if role == "bridge":
        return ["bridge", "neuron-monitor", "--node", "n0", "--mqtt-url", url, "--listen", f"127.0.0.1:{free_port()}"]
    if role in ("monitor", "run", "aggregate"):
        common += ["--metrics-addr", f"127.0.0.1:{free_port()}"]
    return [role, *common]


def wait_for_event(daemon: Daemon, event: str, timeout_s: float = 20.0) -> None:
    timeout_s = within(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if event in daemon.events():
            return
        assert daemon.proc.poll() is None, f"exited {daemon.proc.returncode} before {event!r}:\n{daemon.log()}"
        time.sleep(0.05)
    raise AssertionError(f"no {event!r} within {timeout_s} s:\n{daemon.log()}")


def importing_numpy(pid: int) -> bool:
    """Return whether process ``pid`` has numpy's compiled core mapped: its imports are under way."""
    try:
        return "numpy" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def assert_stops(daemon: Daemon, sig: signal.Signals) -> None:
    code, seconds = daemon.interrupt(timeout_s=10.0, sig=sig)
    assert code == 0, daemon.log()
    assert seconds < GRACE_S, f"{sig.name} took {seconds:.2f} s:\n{daemon.log()}"
    assert daemon.events()[-1] == "rainierd stopped"


@pytest.fixture
def hung_broker() -> Iterator[str]:
    """A port whose TCP handshakes complete but that never answers: a broker wedged mid-restart."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # the kernel accepts into the backlog; nothing ever reads
        yield f"mqtt://127.0.0.1:{listener.getsockname()[1]}"


def read_packet(conn: socket.socket) -> tuple[int, bytes]:
    """Read one MQTT packet; return its first byte and its body."""
    first, length, shift = conn.recv(1)[0], 0, 0
    while True:  # the remaining length: a variable byte integer
        byte = conn.recv(1)[0]
        length, shift = length | (byte & 0x7F) << shift, shift + 7
        if not byte & 0x80:
            break
    body = b""
    while len(body) < length:
        body += conn.recv(length - len(body))
    return first, body


@contextlib.contextmanager
def deaf_broker(*, acknowledge_online: bool) -> Iterator[str]:
    """Yield the URL of a broker that accepts each client (CONNACK), acknowledges its first publish (its retained
    ``online``) if ``acknowledge_online``, and then never reads from it again.  Its receive buffer is small, so a
    client that goes on publishing soon has no room left to write anything, its DISCONNECT included."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by every accepted socket
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # the listener is closed: the test is over
                return
            accepted.append(conn)
            with contextlib.suppress(OSError, IndexError):  # a client gone, or the test over, mid-packet
                _, connect = read_packet(conn)
                v5 = connect[6] == 5  # after the protocol name (0x00 0x04 "MQTT"): the protocol level
                conn.sendall(b"\x20\x03\x00\x00\x00" if v5 else b"\x20\x02\x00\x00")
                if acknowledge_online:
                    _, publish = read_packet(conn)
                    topic_end = 2 + int.from_bytes(publish[:2])
                    conn.sendall(b"\x40\x02" + publish[topic_end:topic_end + 2])  # PUBACK of its packet id

    thread = threading.Thread(target=serve, name="deaf-broker", daemon=True)
    thread.start()
    try:
        yield f"mqtt://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for conn in accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        thread.join(timeout=5)


ROLES = ["monitor", "simulate", "run", "aggregate", "bridge"]
SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.mark.mosquitto
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("role", ROLES)
def test_stops_while_serving(role: str, sig: signal.Signals, mosquitto_process: MosquittoProcess,
                             start_rainierd: Start) -> None:
    """Connected and working."""
    daemon = start_rainierd(*role_args(role, f"mqtt://127.0.0.1:{mosquitto_process.port}"),
                            name=role, stdin=subprocess.PIPE)
    wait_for_event(daemon, "mqtt connected")
    time.sleep(0.5)
    assert_stops(daemon, sig)


@pytest.mark.parametrize("after_s", [0.0, 0.1, 0.3, 0.6])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("role", ["monitor", "run"])
def test_stops_while_starting(role: str, sig: signal.Signals, after_s: float, start_rainierd: Start) -> None:
    """Signalled ``after_s`` after its imports reached numpy (what the first second of a start does, before a
    rainier-sized monitor is built): it leaves at once with 0, not 143 or a traceback.

    The moment is read off the process (numpy's library in its memory map), not a sleep after the spawn: before
    the interpreter runs rainierd's first line (some 20 ms, more on a loaded machine) nothing of rainierd's can
    catch a signal, and a test that signalled then would test the interpreter.
    """
    daemon = start_rainierd(*role_args(role, f"mqtt://127.0.0.1:{free_port()}"), "--topology", "rainier",
                            name=role)
    deadline = time.monotonic() + within(10)
    while not importing_numpy(daemon.proc.pid):  # polled closely: an import lasts tens of milliseconds
        assert time.monotonic() < deadline, f"its imports never reached numpy:\n{daemon.log()}"
        time.sleep(0.002)
    time.sleep(after_s)
    code, seconds = daemon.interrupt(timeout_s=10.0, sig=sig)
    assert code == 0, daemon.log()
    assert seconds < GRACE_S, f"{sig.name} {after_s} s into the start took {seconds:.2f} s:\n{daemon.log()}"


# Where a stop can land around a connect: on the "mqtt connected" line itself (its CONNACK just handled, its
# ``online`` being published), then a few milliseconds on (the PUBACK, the subscription and the first publishes).
# The line is polled every 0.5 ms; each role is started once per offset.
CONNECT_OFFSETS_S = [0.0, 0.0, 0.003, 0.01]


@pytest.mark.mosquitto
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("role", ROLES)
def test_stops_as_it_connects(role: str, sig: signal.Signals, mosquitto_process: MosquittoProcess,
                              start_rainierd: Start) -> None:
    """Signalled the moment it logs "mqtt connected", and a few milliseconds on.

    On 2026-12-02 this was where a stop could be lost for good: aiomqtt waits for every acknowledgement with
    ``asyncio.wait_for``, which on Python 3.11 returns an acknowledgement that arrives with the cancel and drops
    the cancel (rainierd/mqtt/supervisor.py); the process ran on after "rainierd stopping" (1 in 3 to 8 stops at
    this point).
    """
    url = f"mqtt://127.0.0.1:{mosquitto_process.port}"
    for after_s in CONNECT_OFFSETS_S:
        daemon = start_rainierd(*role_args(role, url), name=role, stdin=subprocess.PIPE)
        deadline = time.monotonic() + within(30)
        while b"mqtt connected" not in daemon.log_path.read_bytes():
            assert daemon.proc.poll() is None, f"exited {daemon.proc.returncode} before connecting:\n{daemon.log()}"
            assert time.monotonic() < deadline, f"not connected within {within(30)} s:\n{daemon.log()}"
            time.sleep(0.0005)
        time.sleep(after_s)
        code, seconds = daemon.interrupt(timeout_s=15.0, sig=sig)
        assert code == 0, daemon.log()
        assert seconds < GRACE_S, f"{sig.name} {after_s} s after connecting took {seconds:.2f} s:\n{daemon.log()}"


@pytest.mark.parametrize("role", ROLES)
def test_stops_while_its_online_goes_unacknowledged(role: str, start_rainierd: Start) -> None:
    """Connected, and the broker never acknowledges its retained ``online``: signalled mid-publish, it gives its
    goodbye (``offline``, DISCONNECT) ``mqtt.GOODBYE_S`` and then closes the socket unannounced."""
    with deaf_broker(acknowledge_online=False) as url:
        daemon = start_rainierd(*role_args(role, url), name=role, stdin=subprocess.PIPE)
        wait_for_event(daemon, "mqtt connected")
        time.sleep(0.5)
        assert_stops(daemon, signal.SIGTERM)


@pytest.mark.parametrize("role", ROLES)
def test_stops_while_the_broker_stopped_reading(role: str, start_rainierd: Start) -> None:
    """Connected, its ``online`` acknowledged, and then the broker never reads again (no SUBACK, no PUBACK)."""
    with deaf_broker(acknowledge_online=True) as url:
        daemon = start_rainierd(*role_args(role, url), name=role, stdin=subprocess.PIPE)
        wait_for_event(daemon, "mqtt connected")
        time.sleep(0.5)
        assert_stops(daemon, signal.SIGTERM)


def test_simulator_stops_with_its_socket_full(start_rainierd: Start) -> None:
    """Per-node frames (``--batch-nodes 0``, 256 a tick) to a broker that stopped reading: the socket's buffers
    fill, a publish waits for room, the outbox overflows, and neither ``offline`` nor DISCONNECT can be written.

    Before 2026-12-02 this stop took over 10 s: aiomqtt waits that long for its DISCONNECT to go out."""
    with deaf_broker(acknowledge_online=True) as url:
        daemon = start_rainierd(*role_args("simulate", url), "--topology", "sites=1,ultraservers=64",
                                "--batch-nodes", "0", name="simulate")
        wait_for_event(daemon, "simulator outbox full; dropped the oldest frames", timeout_s=60)
        assert_stops(daemon, signal.SIGTERM)


def test_simulator_stops_mid_tick_at_rainier(start_rainierd: Start) -> None:
    """Per-node frames for the whole of rainier (31,200 a tick): signalled as a tick's production begins in its
    worker thread (just after the warning that ticks are late), it leaves that tick behind.

    Before 2026-12-02 the exit waited for the tick (asyncio.run joins its default executor): 1.2 to 2.8 s."""
    daemon = start_rainierd(*role_args("simulate", f"mqtt://127.0.0.1:{free_port()}"), "--topology", "rainier",
                            "--batch-nodes", "0", name="simulate")
    wait_for_event(daemon, "simulator cannot keep pace; ticks are late", timeout_s=60)
    assert_stops(daemon, signal.SIGTERM)


@pytest.mark.parametrize("role", ROLES)
def test_stops_while_the_broker_is_down(role: str, start_rainierd: Start) -> None:
    """Nothing listens on the broker's port: the role is between reconnect attempts."""
    daemon = start_rainierd(*role_args(role, f"mqtt://127.0.0.1:{free_port()}"), name=role, stdin=subprocess.PIPE)
    wait_for_event(daemon, "mqtt connection failed; retrying")
    assert_stops(daemon, signal.SIGTERM)


@pytest.mark.parametrize("role", ROLES)
def test_stops_while_the_broker_hangs(role: str, hung_broker: str, start_rainierd: Start) -> None:
    """The broker took the TCP connection and never answers CONNECT: the role is waiting for CONNACK."""
    daemon = start_rainierd(*role_args(role, hung_broker), name=role, stdin=subprocess.PIPE)
    wait_for_event(daemon, "rainierd started")
    time.sleep(1.0)
    assert "mqtt connected" not in daemon.events()
    assert_stops(daemon, signal.SIGTERM)


@pytest.mark.mosquitto
@pytest.mark.parametrize("role", ROLES)
def test_stops_while_the_broker_restarts(role: str, mosquitto_process: MosquittoProcess,
                                         start_rainierd: Start) -> None:
    """Broker SIGKILLed, the role notices, the broker comes back, and the signal lands mid-reconnect."""
    daemon = start_rainierd(*role_args(role, f"mqtt://127.0.0.1:{mosquitto_process.port}"),
                            name=role, stdin=subprocess.PIPE)
    wait_for_event(daemon, "mqtt connected")
    mosquitto_process.kill()
    wait_for_event(daemon, "mqtt connection failed; retrying")
    mosquitto_process.start()
    assert_stops(daemon, signal.SIGINT)


@pytest.mark.parametrize("role", ["simulate", "run"])
def test_stops_while_finishing_its_ticks(role: str, start_rainierd: Start) -> None:
    """``--ticks`` done, frames still queued for a broker that is down: the drain gives way to the signal."""
    daemon = start_rainierd(*role_args(role, f"mqtt://127.0.0.1:{free_port()}"), "--ticks", "3", name=role)
    wait_for_event(daemon, "mqtt connection failed; retrying")
    time.sleep(1.0)  # 3 ticks of 0.2 s are produced; the drain waits up to 5 s
    assert "simulation finished" not in daemon.events()
    assert_stops(daemon, signal.SIGTERM)


@pytest.mark.mosquitto
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_monitor_stops_while_overloaded(sig: signal.Signals, mosquitto_process: MosquittoProcess,
                                        start_rainierd: Start) -> None:
    """32,768 chips every 0.1 s into a 4 MB backlog: the monitor is dropping, analysing and behind when signalled."""
    url = f"mqtt://127.0.0.1:{mosquitto_process.port}"
    topology = ["--topology", "sites=1,ultraservers=512"]
    monitor = start_rainierd("monitor", "--mqtt-url", url, "--metrics-addr", f"127.0.0.1:{free_port()}",
                             "--tick", "0.1", "--max-backlog-bytes", str(4 << 20), *topology, name="monitor")
    wait_for_event(monitor, "mqtt connected")
    start_rainierd("simulate", "--mqtt-url", url, "--tick", "0.1", *topology, name="simulate")
    wait_for_event(monitor, "monitor falling behind; silence is judged by what still arrives", timeout_s=60)
    assert_stops(monitor, sig)


@pytest.mark.mosquitto
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_monitor_stops_while_keeping_a_checkpoint(sig: signal.Signals, mosquitto_process: MosquittoProcess,
                                                  start_rainierd: Start, tmp_path: Path) -> None:
    """Frames flowing into a monitor with a --state-file: its stop (last analysis, last save) fits the grace too,
    and leaves the checkpoint behind (the other tests that stop a monitor check only its exit code)."""
    url = f"mqtt://127.0.0.1:{mosquitto_process.port}"
    state = tmp_path / "streams.npz"
    monitor = start_rainierd(*role_args("monitor", url), "--state-file", str(state), name="monitor")
    wait_for_event(monitor, "mqtt connected")
    start_rainierd(*role_args("simulate", url), name="simulate")
    poll_until(state.exists, 20, "the first checkpoint")
    assert_stops(monitor, sig)
    assert state.exists()
