"""rainierd's HTTP server as the tests build it: a role's routes (``/metrics``
and the probes) on a free loopback port, as ``HttpConfig`` allows.  A test
serves it as a role does, as an async context manager (or ``start`` and
``close``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rainierd.exporter import route_metrics_and_probes
from rainierd.http.config import HttpConfig
from rainierd.http.server import HttpServer
from rainierd.http.webconfig import WebConfig
from rainierd.runtime.probes import Verdict

__all__ = ["OK", "READY", "role_server"]

OK, READY = Verdict(True, "ok"), Verdict(True, "ready")


def role_server(
    render: Callable[[], bytes] = bytes, *, generation: Callable[[], int] = lambda: 1,
    healthy: Callable[[], Verdict] = lambda: OK, ready: Callable[[], Verdict] = lambda: READY,
    web: WebConfig | None = None, host: str = "127.0.0.1", **limits: Any,
) -> HttpServer:
    """Return a server (not started) on a free port of ``host`` serving ``/metrics`` (``render``), ``/healthz``
    and ``/readyz`` as a role does, with ``web`` and the connection ``limits`` of ``HttpConfig``."""
    server = HttpServer(HttpConfig(host=host, port=0, web=web, **limits))
    route_metrics_and_probes(server, render, generation=generation, healthy=healthy, ready=ready)
    return server

