"""Driving ``rainierd top`` in tests and for its screenshots: wait for what the screen shows, read a table, and
the keys that walk from the fleet down to one entity.

Every wait is bounded by the harness's one timing slack (harness/timing.py)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from harness.timing import within
from rainierd.http.client import remote
from rainierd.top.app import TopApp
from rainierd.top.source import HttpSource

__all__ = ["rows", "settle", "text_of", "top_app"]


def top_app(url: str, *, ca_file: Any = None, user: str | None = None, password_file: Any = None,
            **kw: Any) -> TopApp:
    """Return a ``TopApp`` following the monitor at ``url`` as ``rainierd top --url`` would."""
    args = argparse.Namespace(url=url, ca_file=ca_file, basic_auth_user=user, basic_auth_password_file=password_file)
    return TopApp(HttpSource(remote(args), timeout_s=within(5.0)), **kw)


async def settle(pilot: Pilot[Any], condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Let the app run until ``condition`` holds; fail naming ``what`` after ``timeout_s`` (scaled by the slack)."""
    deadline = time.monotonic() + within(timeout_s)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def rows(app: TopApp, selector: str) -> list[list[str]]:
    """The rows of the data table ``selector`` on the current screen, as text."""
    table = app.screen.query_one(selector, DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def text_of(app: TopApp, selector: str) -> str:
    """The text of the ``Static`` ``selector`` on the current screen."""
    return str(app.screen.query_one(selector, Static).content)
