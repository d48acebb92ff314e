"""How every role process starts and stops: SIGINT/SIGTERM set one stop event,
and one TaskGroup of named tasks runs until it is set, then is cancelled.

Shared by the daemon roles and the bridge so that each logs the same
``rainierd started`` / ``stopping`` / ``stopped`` lines and honours a signal
in every state.  Before the tasks run, while the role is still building its
parts (loading an inventory, sizing the core, binding sockets: seconds at
``rainier``, all of it blocking the loop), a signal stops the process at once
(``rainierd/_start.py``); the stop event takes over only with the tasks, so a
signal is never left waiting behind the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any

import structlog

from rainierd._start import SIGNALS, stop_requested

log = structlog.get_logger("rainierd")


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT or SIGTERM while the block runs."""
    loop = asyncio.get_running_loop()
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    if stop_requested():  # one came while starting and something swallowed it (_start.stop_requested)
        stop.set()
    try:
        yield
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
            # Not Python's defaults (they would end a process signalled in its last instants with 143):
            # whatever stood before, in a daemon rainierd/_start.py's immediate stop.
            signal.signal(sig, before[sig])


async def run_until_stopped(
    role: str, stop: asyncio.Event, coroutines: Mapping[str, Coroutine[Any, Any, None]], *,
    drain: Callable[[], Awaitable[None]] | None = None, **fields: object,
) -> None:
    """Run each coroutine as a task named by its key until ``stop`` is set (by a signal, or by the caller),
    then await ``drain`` (which bounds its own time) while they still run, then cancel them all.

    A task that fails fails the group (an ExceptionGroup); one that returns
    early is simply done.
    """
    with stop_on_signals(stop):
        log.info("rainierd started", role=role, **fields)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(coro, name=name) for name, coro in coroutines.items()]
            await stop.wait()
            log.info("rainierd stopping", role=role)
            if drain is not None:
                await drain()
            for task in tasks:
                task.cancel()
        log.info("rainierd stopped", role=role)
