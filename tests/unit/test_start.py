"""Specification of a process's first instants (rainierd/_start.py): a stop that lands while the command line
is still being imported leaves with 0, even where a C extension turns it into an ImportError of its own."""

from __future__ import annotations

import asyncio
import signal
import sys
import types

import pytest

from rainierd import _start
from rainierd.runtime.lifecycle import stop_on_signals


@pytest.fixture
def broken_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rainierd.cli`` as a module whose import fails (``from rainierd.cli import entry`` raises ImportError),
    as numpy's does when a signal lands inside its multiarray's import of datetime; the handlers restored."""
    monkeypatch.setitem(sys.modules, "rainierd.cli", types.ModuleType("rainierd.cli"))
    monkeypatch.setattr(sys, "argv", ["rainierd", "monitor"])
    monkeypatch.setattr(signal, "signal", lambda *_args: None)  # the test process keeps its own handlers
    monkeypatch.setattr(_start, "_stop_requested", False)


class TestEntry:
    def test_an_import_failed_by_a_stop_is_that_stop(self, broken_cli: None, monkeypatch: pytest.MonkeyPatch) -> None:
        """After a signal, an ImportError from the command line's imports exits 0, as the stop it was."""
        monkeypatch.setattr(_start, "_stop_requested", True)
        with pytest.raises(SystemExit) as stopped:
            _start.entry()
        assert stopped.value.code == 0

    def test_an_import_error_without_a_stop_is_an_error(self, broken_cli: None) -> None:
        """Without a signal, an ImportError is what it says: it propagates."""
        with pytest.raises(ImportError):
            _start.entry()

    def test_the_handler_remembers_the_stop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The handler marks the stop before raising Stopped, whatever an import then makes of the exception."""
        monkeypatch.setattr(_start, "_stop_requested", False)
        with pytest.raises(_start.Stopped) as stopped:
            _start.stop_now(signal.SIGTERM, None)
        assert (_start._stop_requested, stopped.value.code, stopped.value.signal) == (True, 0, "SIGTERM")


class TestSwallowedStops:
    def test_a_stop_swallowed_while_starting_stops_the_role_at_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A signal whose Stopped an import swallowed still stops the role: its tasks see the stop at once."""
        monkeypatch.setattr(_start, "_stop_requested", True)

        async def go() -> bool:
            stop = asyncio.Event()
            with stop_on_signals(stop):
                return stop.is_set()

        assert asyncio.run(go())

    def test_after_the_imports_a_swallowed_stop_exits_0(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """If the command line's imports swallowed a stop, the process leaves with 0 before running anything."""
        cli = types.ModuleType("rainierd.cli")
        cli.entry = lambda: pytest.fail("the command line ran after a stop")  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "rainierd.cli", cli)
        monkeypatch.setattr(sys, "argv", ["rainierd", "monitor"])
        monkeypatch.setattr(signal, "signal", lambda *_args: None)
        monkeypatch.setattr(_start, "_stop_requested", True)
        with pytest.raises(SystemExit) as stopped:
            _start.entry()
        assert stopped.value.code == 0
