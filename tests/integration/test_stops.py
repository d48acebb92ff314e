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

import signal
import socket
import subprocess
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
        return ["bridge", "neuron-monitor", "--node", "n0", "--mqtt-url", url]
    if role in ("monitor", "run"):
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


ROLES = ["monitor", "simulate", "run", "bridge"]
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
    wait_for_event(monitor, "monitor falling behind; silence is not judged until it catches up", timeout_s=60)
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
