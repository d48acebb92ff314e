"""The HTTP edge's one frozen configuration: where it listens, its TLS and
basic auth, and the limits that keep a hostile client from exhausting it
(docs/exporter-security.md).  Built from the settings in one place
(``Settings.http_config``), so the edge never reads the settings itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rainierd.http.webconfig import WebConfig

DEFAULT_MAX_CONNECTIONS: Final = 256  # a TLS connection holds ~280 KiB: ~70 MiB at the cap
DEFAULT_MAX_HANDSHAKES: Final = 64
DEFAULT_UNAUTHENTICATED_IDLE_S: Final = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpConfig:
    """How one HTTP server listens and what it allows.

    ``port`` 0 picks a free port.  With ``web`` it speaks TLS if
    ``web.tls`` is set and asks for basic auth if ``web`` has users.  It
    holds at most ``max_connections`` (lowered to fit the descriptor limit),
    of which ``max_handshakes`` in a TLS handshake; a connection not yet
    served an authenticated request is closed after
    ``unauthenticated_idle_s`` from its accept (again after a 401).
    """

    host: str
    port: int
    web: WebConfig | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_handshakes: int = DEFAULT_MAX_HANDSHAKES
    unauthenticated_idle_s: float = DEFAULT_UNAUTHENTICATED_IDLE_S
