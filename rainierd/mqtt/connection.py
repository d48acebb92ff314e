"""Whether a supervised MQTT session is connected, as plain data: the MQTT
edge (``mqtt.supervise``) writes it, the roles read it for their probes and
freeze it into their per-tick status.  Neither side imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Connection:
    """A session's connection as of one instant (see ``ConnectionState``)."""

    connected: bool = False
    broker: str | None = None  # URL of the broker of the current or last connection (fail-over: which node)
    connects: int = 0
    failures: int = 0
    status_overwritten: int = 0  # another client wrote this one's retained status; it was said again


@dataclass(slots=True)
class ConnectionState:
    """A supervised session's connection, kept current by ``mqtt.supervise`` (live; freeze to hand it on)."""

    connected: bool = False
    broker: str | None = None
    connects: int = 0
    failures: int = 0
    status_overwritten: int = 0

    def frozen(self) -> Connection:
        """Return the connection as it stands now."""
        return Connection(self.connected, self.broker, self.connects, self.failures, self.status_overwritten)
