"""The first code a rainierd process runs: SIGINT and SIGTERM are honoured
from here on, before the imports (numpy, pydantic, the fleet's topology) that
take the first second of a start.

Until a role's tasks run, a signal raises ``Stopped`` wherever the main
thread is (an import, parsing an inventory, binding a socket): nothing has
started that needs flushing, so the process leaves at once with 0, as for
any clean stop.  Once the tasks run, ``lifecycle.run_until_stopped`` takes the
signals over and a stop flushes its streams first; when it hands them back,
this handler stands again for the last instants of the exit.  Python's
defaults would instead end a process signalled that early with 143 (SIGTERM)
or a KeyboardInterrupt traceback (SIGINT).

This module imports nothing of rainierd's (or anything slow) at its top.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Final, NoReturn

SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class Stopped(SystemExit):
    """A signal came before the role's tasks ran: leave with 0."""

    def __init__(self, signum: int) -> None:
        super().__init__(0)
        self.signal = signal.Signals(signum).name


_stop_requested = False  # set by stop_now: a signal has come (whatever became of the exception it raised)


def stop_now(signum: int, _frame: FrameType | None) -> NoReturn:
    """The handler while nothing needs flushing: raise ``Stopped`` in the main thread."""
    global _stop_requested  # noqa: PLW0603 - one flag the handler and entry() share, by design
    _stop_requested = True
    raise Stopped(signum)


def stop_requested() -> bool:
    """Return whether a stop signal has come, whatever became of the ``Stopped`` it raised.

    An import that guards an optional dependency (``try: import x except ImportError``) swallows it when the
    signal lands inside that import and a C extension turns it into an ImportError: the process would go on
    starting as if never signalled.
    """
    return _stop_requested


def honour_signals() -> None:
    """Make SIGINT and SIGTERM stop the process at once (``stop_now``)."""
    for sig in SIGNALS:
        signal.signal(sig, stop_now)


def entry() -> NoReturn:
    """The console script and ``python -m rainierd``: signals first, then the command line (``cli.entry``).

    ``rainierd node-check`` (a node-problem-detector plugin with a second to answer) goes straight to its
    module, which loads only the standard library: the full command line takes about a second to import.
    So does ``rainierd --version``, which a packager or a bug report runs.
    """
    honour_signals()
    if sys.argv[1:] in (["--version"], ["-V"]):
        from rainierd._version import describe  # noqa: PLC0415 - only this command loads it

        print(describe())
        sys.exit(0)
    if sys.argv[1:2] == ["node-check"]:
        from rainierd.sinks.nodecheck import main as node_check  # noqa: PLC0415 - only this command loads it

        sys.exit(node_check(sys.argv[2:]))
    try:
        from rainierd.cli import entry as cli_entry  # noqa: PLC0415 - after the handlers, on purpose
    except ImportError:
        # A C extension that imports Python modules while it initialises (numpy's multiarray imports datetime)
        # turns the Stopped raised inside that import into an ImportError of its own: the stop it was.
        if _stop_requested:
            sys.exit(0)
        raise
    if _stop_requested:  # swallowed inside an import (stop_requested): the stop it was
        sys.exit(0)
    cli_entry()
