"""Specification of how ``rainierd run --top`` follows its own child (rainierd/top/launch.py): the child's
one-line error when it ends by itself, and a monitor of another process refused rather than shown LIVE."""

from __future__ import annotations

import asyncio

import pytest

from rainierd.top.launch import OwnMonitor, last_error
from rainierd.top.model import Document
from rainierd.top.source import SourceError


class TestLastError:
    @pytest.mark.parametrize(("log", "line"), [
        ('{"event": "embedded broker listening"}\n{"error": "[Errno 98] Address already in use", '
         '"event": "rainierd failed to start", "level": "error"}\n',
         "rainierd failed to start: [Errno 98] Address already in use"),
        ("rainierd run: 127.0.0.1:9780 is in use (--metrics-addr)\n", "rainierd run: 127.0.0.1:9780 is in use "
                                                                       "(--metrics-addr)"),
        ("", "no output"),
    ])
    def test_the_childs_last_line_read_as_one_error(self, log: str, line: str) -> None:
        """A structured log line is read as ``event: error``; a plain line is kept as it is."""
        assert last_error(log) == line


class _Fixed:
    where = "http://127.0.0.1:9780"

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    async def get(self, target: str) -> Document:
        monitor = {} if self.pid is None else {"pid": self.pid}
        return {"generation": 1, "monitor": monitor}


class TestOwnMonitor:
    def test_its_own_monitor_is_followed(self) -> None:
        """The fleet document of the child's process passes through unchanged."""
        document = asyncio.run(OwnMonitor(_Fixed(4242), pid=4242).get("/api/v1/fleet"))
        assert document == {"generation": 1, "monitor": {"pid": 4242}}

    @pytest.mark.parametrize(("pid", "says"), [
        (777, "not this run's monitor: process 777 answers at http://127.0.0.1:9780, this run's is process 4242"),
        (None, "not this run's monitor: a monitor that does not say its process answers at"),
    ])
    def test_another_process_is_refused(self, pid: int | None, says: str) -> None:
        """Another monitor on the port (this run's failed to bind) is an error on the banner, never LIVE."""
        with pytest.raises(SourceError) as raised:
            asyncio.run(OwnMonitor(_Fixed(pid), pid=4242).get("/api/v1/fleet?x=1"))
        assert str(raised.value).startswith(says)


class TestStopWhen:
    async def test_the_ui_quits_when_its_child_is_gone(self) -> None:
        """Before each poll the application asks whether to go on: a line back ends it with exit code 1 and keeps
        the line for ``run --top`` to print, and the monitor is never asked."""
        from rainierd.top.app import TopApp  # noqa: PLC0415 - Textual: the top extra

        asked: list[str] = []

        class Never:
            where = "http://127.0.0.1:9"

            async def get(self, target: str) -> Document:
                asked.append(target)
                raise SourceError("connection refused")

        app = TopApp(Never(), interval_s=0.05, stop_when=lambda: "exited 1")
        async with app.run_test() as pilot:
            await pilot.pause(0.3)
        assert (app.return_code, app.stopped_because, asked) == (1, "exited 1", [])
