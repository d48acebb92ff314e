"""A real terminal for tests and benchmarks: a command run in a detached
tmux session of a given size on a private tmux server, its screen read back
as text (``capture-pane``) and keys typed into it (``send-keys``).

Each ``Terminal`` has its own server socket (``tmux -L``), so it never
touches a user's tmux sessions or another test's, and ``close`` kills that
server with whatever still runs in it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from types import TracebackType

from harness.timing import within

__all__ = ["Terminal"]


class Terminal:
    """``command`` running in a ``width`` x ``height`` tmux pane."""

    def __init__(self, command: Sequence[str], *, width: int = 160, height: int = 48,
                 env: dict[str, str] | None = None) -> None:
        if shutil.which("tmux") is None:
            raise FileNotFoundError("tmux is not installed (scripts/test installs it: apt-get install tmux)")
        self.socket = f"rainierd-test-{uuid.uuid4().hex[:12]}"
        # The pane keeps its last screen when the command ends, so a test can read what it printed last.
        line = shlex.join(command) + "; echo '[exited '$?']'; sleep 3600"
        environment = {**os.environ, **(env or {}), "TERM": "xterm-256color"}
        self._tmux("new-session", "-d", "-x", str(width), "-y", str(height), "-s", "t", line, env=environment)

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True,
                              env=env, timeout=within(10))
        return done.stdout

    def screen(self) -> str:
        """The pane's text as a person sees it now."""
        return self._tmux("capture-pane", "-p", "-t", "t")

    def pid(self) -> int:
        """The process id of the pane's shell."""
        return int(self._tmux("list-panes", "-t", "t", "-F", "#{pane_pid}").split()[0])

    def resize(self, width: int, height: int) -> None:
        """Make the pane ``width`` x ``height``, as a person resizing the terminal does (the program gets SIGWINCH)."""
        self._tmux("resize-window", "-t", "t", "-x", str(width), "-y", str(height))

    def lines(self) -> list[str]:
        """The pane's lines as a person sees them now (trailing blanks dropped)."""
        return [line.rstrip() for line in self.screen().splitlines()]

    def press(self, *keys: str) -> None:
        """Type ``keys`` (tmux key names: ``Enter``, ``Escape``, ``Right``, or text)."""
        for key in keys:
            self._tmux("send-keys", "-t", "t", key)

    def wait_for(self, *texts: str, timeout_s: float = 30.0) -> str:
        """Return the screen once it shows every one of ``texts``; fail with the last screen after ``timeout_s``
        (scaled by the slack)."""
        deadline = time.monotonic() + within(timeout_s)
        while True:
            screen = self.screen()
            if all(text in screen for text in texts):
                return screen
            if time.monotonic() > deadline:
                missing = [text for text in texts if text not in screen]
                raise AssertionError(f"the terminal never showed {missing!r}; its last screen:\n{screen}")
            time.sleep(0.2)

    def close(self) -> None:
        """Kill the tmux server and everything in it."""
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False,
                       timeout=within(10))

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
