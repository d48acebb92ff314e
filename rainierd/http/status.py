"""The exporter's HTTP server as metrics: how many connections it holds and
in what standing, what it dropped and why, accept errors, refused request
heads and password checks.  The server counts on the event loop
(``ServerCounters``); the collector, which runs in the render thread, reads
only the frozen ``ServerStatus`` the counters hand out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.http.request import REJECTION_REASONS

CONNECTION_STATES: Final = ("silent", "handshake", "unauthenticated", "authenticated")
# Why the server closed a connection before its client did (each a series from the start).
DROP_REASONS: Final = ("evicted", "handshake_evicted", "refused", "handshake_failed", "unauthenticated_idle")
# What became of each Authorization header: remembered success, bcrypt's verdict, remembered refusal,
# refused unchecked because the wait queue was full, or no Basic credentials at all.
AUTH_RESULTS: Final = ("cached", "accepted", "refused", "refused_cached", "shed", "malformed")


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """A frozen copy of the counters, for a scrape."""

    max_connections: int
    connections: dict[str, int]
    dropped: dict[str, int]
    accept_errors: int
    bad_requests: dict[str, int]
    auth: dict[str, int] | None  # None without basic auth
    auth_waiting: int


@dataclass(eq=False)
class ServerCounters:
    """What the server counts, owned by the event loop."""

    max_connections: int = 0
    connections: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONNECTION_STATES, 0))
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    accept_errors: int = 0
    bad_requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECTION_REASONS, 0))
    auth: dict[str, int] | None = None
    auth_waiting: Callable[[], int] = lambda: 0

    def status(self) -> ServerStatus:
        """Return a frozen copy (safe to call from the render thread: it copies, never iterates live state)."""
        return ServerStatus(
            max_connections=self.max_connections, connections=dict(self.connections), dropped=dict(self.dropped),
            accept_errors=self.accept_errors, bad_requests=dict(self.bad_requests),
            auth=None if self.auth is None else dict(self.auth), auth_waiting=self.auth_waiting(),
        )


class ServerCollector(Collector):
    """The rainier_exporter_* families of the HTTP server (nothing if ``status`` returns None)."""

    def __init__(self, status: Callable[[], ServerStatus | None]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        """Yield the server's families."""
        status = self._status()
        if status is None:
            return
        yield GaugeMetricFamily("rainier_exporter_connections_max",
                                "Connections the exporter holds at most (after reserving descriptors).",
                                value=status.max_connections)
        open_ = GaugeMetricFamily("rainier_exporter_connections", "Open exporter connections, by standing.",
                                  labels=["state"])
        for state in CONNECTION_STATES:
            open_.add_metric([state], status.connections[state])
        yield open_
        dropped = CounterMetricFamily("rainier_exporter_connections_dropped",
                                      "Connections the exporter closed before their client did, by reason.",
                                      labels=["reason"])
        for reason in DROP_REASONS:
            dropped.add_metric([reason], status.dropped[reason])
        yield dropped
        yield CounterMetricFamily("rainier_exporter_accept_errors",
                                  "Failed accepts of exporter connections (e.g. out of descriptors).",
                                  value=status.accept_errors)
        bad = CounterMetricFamily("rainier_exporter_bad_requests", "Request heads refused (400/431), by reason.",
                                  labels=["reason"])
        for reason in REJECTION_REASONS:
            bad.add_metric([reason], status.bad_requests[reason])
        yield bad
        if status.auth is not None:
            auth = CounterMetricFamily("rainier_exporter_auth_checks", "Basic-auth credentials judged, by result.",
                                       labels=["result"])
            for result in AUTH_RESULTS:
                auth.add_metric([result], status.auth[result])
            yield auth
            yield GaugeMetricFamily("rainier_exporter_auth_checks_waiting",
                                    "Password checks waiting for a bcrypt worker.", value=status.auth_waiting)
