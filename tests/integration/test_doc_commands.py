"""The shell and console examples of README.md and docs/ run as written
(issue 22 item 7; tests/unit/docs/test_examples.py checks every other kind).

Two substitutions, documented in README.md: a free port for 9780 (given to
the daemon as ``RAINIERD_METRICS_ADDR``, and put in the commands' URLs), and
a temporary directory for ``OUTPUT_DIR``; commands that write into the
checkout (``deploy/…``) run in a temporary copy of it.  A daemon is started,
checked against the log lines the example shows (the fields that do not
depend on the run: ports, ids and times do), then stopped with SIGINT,
exiting 0 within the 2 s README.md promises.  Output lines shown after a
``$`` command must each appear in what it prints (values may differ).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.procs import free_port
from harness.timing import within
from harness.waits import poll_until
from tests.unit.docs.test_examples import SHELL, Block, runnable

ROOT = Path(__file__).parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
GRACE_S = 2.0  # README.md: "it exits 0 within 2 s"
VOLATILE = frozenset({"host", "port", "url", "broker", "client_id", "publisher", "onset_tick", "tick"})

BLOCKS = {b.name: b for b in runnable(SHELL)}
COMMANDS = sorted(name for name, b in BLOCKS.items() if b.lang == "sh")


def _console(first_command: str) -> Block:
    """Return the console block whose first ``$`` command starts with ``first_command``."""
    found = [b for b in BLOCKS.values() if b.lang == "console" and b.text.startswith(f"$ {first_command}")]
    assert len(found) == 1, (first_command, [b.name for b in found])
    return found[0]


QUICK_START, FLEET, SCENARIO = "scripts/run", "curl -s 127.0.0.1:9780/metrics | grep '^rainier_fleet'", (
    ".venv/bin/rainierd run --scenario")


def test_every_shell_example_is_run_here() -> None:
    """A new shell example is a plain command (run by test_command) or one of the console sessions below."""
    consoles = {b.name for b in BLOCKS.values() if b.lang == "console"}
    assert consoles == {_console(c).name for c in (QUICK_START, FLEET, SCENARIO)}
    assert {b.lang for b in BLOCKS.values()} == {"sh", "console"}


def _env(port: int | None = None) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
    if port is not None:
        env["RAINIERD_METRICS_ADDR"] = f"127.0.0.1:{port}"
    return env


@pytest.mark.parametrize("name", COMMANDS)
def test_command(name: str, tmp_path: Path) -> None:
    """Each line of the block runs and exits 0 (in a copy of the checkout's deploy/ where it writes there)."""
    block = BLOCKS[name]
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    text = block.text.replace("OUTPUT_DIR", str(tmp_path / "out"))
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=tmp_path, env=_env(), capture_output=True,
                            text=True, timeout=within(120), check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "every rules command prints the files it wrote"


# -- daemons ------------------------------------------------------------------------------------------------------

_LINE = re.compile(r"^(?:\S+Z|…) \[(\w+)\s*\] (.+?)\s{2,}(.*)$")


def _expected_events(block: Block) -> list[tuple[str, dict[str, str]]]:
    """Return the (event, stable fields) of each log line the block shows."""
    events = []
    for line in block.text.splitlines():
        if match := _LINE.match(line):
            fields = dict(re.findall(r"(\w+)=(\[[^\]]*\]|\S+)", match.group(3)))
            events.append((match.group(2).strip(), {k: v for k, v in fields.items() if k not in VOLATILE}))
    assert events, f"{block.name} shows no log line to check"
    return events


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    """Return each ``$`` command of a console block and the output lines shown after it."""
    out: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out and not _LINE.match(line):
            out[-1][1].append(line)
    return out


def _as_shown(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return str(value)


class _Daemon:
    """A documented daemon command, started with its JSON log in a file."""

    def __init__(self, command: str, port: int, tmp_path: Path) -> None:
        self.log_path = tmp_path / "daemon.log"
        with self.log_path.open("w") as output:  # the child keeps its own copy open
            self.proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=ROOT, env=_env(port),
                                         stdout=output, stderr=subprocess.STDOUT)

    def events(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.startswith("{")]

    def shows(self, event: str, fields: dict[str, str]) -> bool:
        return any(e.get("event") == event and all(_as_shown(e.get(k)) == v for k, v in fields.items())
                   for e in self.events())

    def printed(self) -> list[str]:
        """Return the output lines that are not JSON log lines (what the scripts and ``rainierd run`` print)."""
        return [line for line in self.log_path.read_text().splitlines() if not line.startswith("{")]

    def wait_for(self, event: str, fields: dict[str, str], timeout_s: float) -> None:
        """Wait until the log shows ``event`` with ``fields``; fail if the daemon exits first."""
        poll_until(lambda: self.shows(event, fields) or self.proc.poll() is not None, within(timeout_s),
                   f"{event} {fields}")
        assert self.proc.poll() is None, self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            started = time.monotonic()
            self.proc.send_signal(signal.SIGINT)
            code = self.proc.wait(timeout=10)
            assert (code, time.monotonic() - started < GRACE_S) == (0, True), self.log_path.read_text()
            assert self.events()[-1]["event"] == "rainierd stopped"


def _run_shown(command: str, shown: list[str], port: int) -> None:
    """Run ``command`` (9780 replaced by ``port``); each shown line's series (or text) is in its output."""
    result = subprocess.run(["bash", "-c", command.replace("9780", str(port))], cwd=ROOT, env=_env(),
                            capture_output=True, text=True, timeout=within(30), check=False)
    printed = result.stdout.splitlines()
    for line in shown:
        series = line.rsplit(" ", 1)[0] if line.startswith("rainier_") else line
        assert any(p == line or p.startswith(series + " ") for p in printed), (command, line, result.stdout)


def _ports_masked(line: str) -> str:
    """Return ``line`` with every port (``:`` and digits) masked: a run's ports are its own."""
    return re.sub(r":\d+", ":PORT", line)


def test_the_quick_start(tmp_path: Path) -> None:
    """scripts/run logs what README.md shows and prints the lines it shows (the broker's and the monitor's URLs,
    ports aside), /metrics has the fleet series it shows, /readyz says ready, and SIGINT stops it with exit 0
    within 2 s."""
    port = free_port()
    start, shown = _commands(_console(QUICK_START))[0]
    daemon = _Daemon(start, port, tmp_path)
    try:
        for event, fields in _expected_events(_console(QUICK_START)):
            daemon.wait_for(event, fields, 60)
        assert shown, "README.md shows what scripts/run prints"
        printed = {_ports_masked(line) for line in daemon.printed()}
        assert [line for line in shown if _ports_masked(line) not in printed] == [], daemon.printed()
        poll_until(lambda: "rainier_fleet_chips_reporting 128.0" in _curl(port), within(30), "the fleet reporting")
        for command, output in _commands(_console(FLEET)):
            _run_shown(command, output, port)
    finally:
        daemon.stop()


def _curl(port: int) -> str:
    result = subprocess.run(["curl", "-s", f"127.0.0.1:{port}/metrics"], capture_output=True, text=True,
                            timeout=10, check=False)
    return result.stdout


@pytest.mark.long(38)
def test_the_fault_scenario(tmp_path: Path) -> None:
    """The degraded-paths scenario logs the faults and health changes README.md shows, and /metrics then has
    the lost FP8 and unhealthy link series it shows."""
    port = free_port()
    (start, _), *then = _commands(_console(SCENARIO))
    daemon = _Daemon(start, port, tmp_path)
    try:
        for event, fields in _expected_events(_console(SCENARIO)):
            daemon.wait_for(event, fields, 90)
        for command, output in then:
            _run_shown(command, output, port)
    finally:
        daemon.stop()
