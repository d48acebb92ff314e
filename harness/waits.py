"""Waiting for a condition that another process makes true, from a blocking
caller (``poll_until``) or from a coroutine without blocking its loop
(``wait_until``); either fails with AssertionError naming what it waited for.
Every timeout is scaled by the harness's one slack factor (``harness.timing``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from harness.timing import within

__all__ = ["poll_until", "wait_until"]


async def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll a blocking ``condition`` (off the loop) until true; fail naming ``what`` after ``timeout_s``
    (scaled by the slack)."""
    timeout_s = within(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(condition):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def poll_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s until true; fail naming ``what`` after ``timeout_s`` (scaled by the slack;
    blocking callers)."""
    timeout_s = within(timeout_s)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
