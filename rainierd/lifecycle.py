"""How every role process starts and stops: SIGINT/SIGTERM set one stop event,
and one TaskGroup of named tasks runs until it is set, then is cancelled.

Shared by the daemon roles and the bridge so that each logs the same
``rainierd started`` / ``stopping`` / ``stopped`` lines and honours a signal
in every state, including while it is still starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, Final

import structlog

__all__ = ["run_until_stopped", "stop_on_signals"]

log = structlog.get_logger("rainierd")

_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT or SIGTERM while the block runs."""
    loop = asyncio.get_running_loop()
    for sig in _SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)


async def run_until_stopped(
    role: str, stop: asyncio.Event, coroutines: Mapping[str, Coroutine[Any, Any, None]], **fields: object,
) -> None:
    """Run each coroutine as a task named by its key until ``stop`` is set, then cancel them all.

    A task that fails fails the group (an ExceptionGroup); one that returns
    early is simply done.
    """
    log.info("rainierd started", role=role, **fields)
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(coro, name=name) for name, coro in coroutines.items()]
        await stop.wait()
        log.info("rainierd stopping", role=role)
        for task in tasks:
            task.cancel()
    log.info("rainierd stopped", role=role)
