"""``rainierd top`` and ``rainierd run --top``: start the terminal UI.

``top`` follows a monitor that runs elsewhere (``--url``, with its CA and
credentials like ``node-check``).  ``run --top`` starts ``rainierd run`` (the
demo: simulator, broker and monitor) as a child process with its log sent to
a file, follows it in the same terminal, and stops it when the UI quits: the
monitor keeps its own process, signals and event loop, so drawing the screen
can never delay a tick, and its log lines never tear the screen.

Neither imports Textual until it is needed; without the ``top`` extra they
say how to install it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from rainierd.http.client import add_connection_arguments, remote
from rainierd.top.model import Document
from rainierd.top.source import Source, SourceError

NO_TEXTUAL: Final = ("rainierd top needs Textual, which this installation lacks: pip install 'rainierd[top]' "
                     "(docs/top.md)")
_STOP_S: Final = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` top's options."""
    add_connection_arguments(parser)
    _add_view_arguments(parser)


def _add_view_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                        help="ask the monitor this often; about its tick (default 1)")
    parser.add_argument("--behind-after", type=float, default=10.0, metavar="SECONDS",
                        help="the monitor is behind when its newest sample is this old (default 10)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="give up on one request after this long (default 5)")


def _checked(args: argparse.Namespace) -> str | None:
    for name in ("interval", "behind_after", "timeout"):
        if not getattr(args, name) > 0:
            return f"--{name.replace('_', '-')} must be > 0"
    return None


def run_top(args: argparse.Namespace) -> int:
    """Run ``rainierd top`` with parsed ``args``; return the exit code."""
    if (problem := _checked(args)) is not None:
        print(f"rainierd top: {problem}", file=sys.stderr)
        return 2
    try:
        reach = remote(args)
    except ValueError as exc:
        print(f"rainierd top: {exc}", file=sys.stderr)
        return 2
    try:
        from rainierd.top.app import TopApp  # noqa: PLC0415 - Textual is an optional extra
        from rainierd.top.source import HttpSource  # noqa: PLC0415
    except ImportError:
        print(NO_TEXTUAL, file=sys.stderr)
        return 2
    app = TopApp(HttpSource(reach, timeout_s=args.timeout), interval_s=args.interval,
                 behind_after_s=args.behind_after)
    app.run()
    return 0


def run_with_top(argv: Sequence[str], metrics_addr: str, *, tls: bool) -> int:
    """``rainierd run --top``: run ``rainierd run`` with ``argv`` (``--top`` removed) as a child, and top over
    it at ``metrics_addr``; return the child's exit code (0 when the UI quit it).

    It follows its own child, never whoever holds the port: the UI quits as soon as the child has exited (a
    port already taken, a bad flag) and prints the child's last line, its one-line error, with the child's
    exit code; and every answer of ``/api/v1/fleet`` must come from the child's process (``monitor.pid``),
    else the banner says which process answers instead (``OwnMonitor``)."""
    if tls:
        print("rainierd run --top: the monitor serves TLS (a web config is set); run it and "
              "rainierd top --url https://... --ca-file ... separately", file=sys.stderr)
        return 2
    try:
        from rainierd.top.app import TopApp  # noqa: PLC0415 - Textual is an optional extra
        from rainierd.top.source import HttpSource  # noqa: PLC0415
    except ImportError:
        print(NO_TEXTUAL, file=sys.stderr)
        return 2
    host, _, port = metrics_addr.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    fd, log_name = tempfile.mkstemp(prefix="rainierd-run-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        child = subprocess.Popen([sys.executable, "-m", "rainierd", *argv], stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT)

    def child_gone() -> str | None:
        code = child.poll()
        return None if code is None else f"exited {code}"

    code = 0
    app = None
    try:
        view = argparse.Namespace(url=url, ca_file=None, basic_auth_user=None, basic_auth_password_file=None)
        app = TopApp(OwnMonitor(HttpSource(remote(view), timeout_s=5.0), pid=child.pid), interval_s=1.0,
                     stop_when=child_gone)
        app.run()
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=_STOP_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        code = child.returncode if child.returncode is not None else 1
        if code == -signal.SIGINT:
            code = 0
    with contextlib.suppress(OSError):
        text = Path(log_name).read_text(encoding="utf-8", errors="replace")
        if app is not None and app.stopped_because is not None:  # the child ended by itself: say why, first
            print(f"rainierd run --top: rainierd run {app.stopped_because}: {last_error(text)}", file=sys.stderr)
            print(f"its log: {log_name}", file=sys.stderr)
            return code or 1
        if code != 0:
            print("\n".join(text.splitlines()[-5:]), file=sys.stderr)
    print(f"rainierd run stopped ({code}); its log: {log_name}", file=sys.stderr)
    return code


def last_error(log: str) -> str:
    """Return the one line that says why a ``rainierd`` process ended, from its log: the last line, read as a
    structured log line (``event: error``) when it is one; ``no output`` when there is none."""
    lines = [line for line in log.splitlines() if line.strip()]
    if not lines:
        return "no output"
    last = lines[-1].strip()
    if last.startswith("{"):
        with contextlib.suppress(ValueError):
            record = json.loads(last)
            if isinstance(record, dict) and "event" in record:
                detail = record.get("error") or record.get("reason") or record.get("exception")
                return f"{record['event']}: {detail}" if detail else str(record["event"])
    return last[:500]


class OwnMonitor:
    """A source that answers only for the monitor of process ``pid``: a fleet document from any other process
    (another monitor on the port this run failed to bind) is refused with a line naming the process that
    answered, so the banner never calls another monitor's figures LIVE."""

    def __init__(self, inner: Source, *, pid: int) -> None:
        self.inner, self.pid = inner, pid

    @property
    def where(self) -> str:
        """Where the documents come from, for the header."""
        return self.inner.where

    async def get(self, target: str) -> Document:
        """Return ``inner``'s document at ``target``; a fleet document of another process raises SourceError."""
        document = await self.inner.get(target)
        if target.partition("?")[0] == "/api/v1/fleet":
            monitor = document.get("monitor") or {}
            pid = monitor.get("pid")
            if pid != self.pid:
                who = f"process {pid}" if pid is not None else "a monitor that does not say its process"
                raise SourceError(f"not this run's monitor: {who} answers at {self.where}, this run's is "
                                  f"process {self.pid}")
        return document
