"""The MQTT edge's configuration as one frozen value: the brokers to try and
how to connect to each.  ``rainierd.settings`` builds it (``Settings.mqtt_config``),
so the edge never reads the whole ``Settings``; importing it loads neither
aiomqtt nor paho.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

# A PUBLISH packet's bytes beyond its payload: fixed header, topic (ours are
# under 100 bytes) and MQTT 5 properties.  A payload up to the monitor's
# ``max_frame_bytes`` always fits; one far beyond it never reaches us.
MAX_PACKET_OVERHEAD: Final = 4_096


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker address: a node of a cluster, or the only one."""

    host: str
    port: int
    tls: bool = False

    @property
    def url(self) -> str:
        """Return the broker URL (never with credentials: they are not part of it)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'mqtts' if self.tls else 'mqtt'}://{host}:{self.port}"


def parse_brokers(urls: str) -> tuple[Broker, ...]:
    """Return the brokers of ``mqtt://host:port[,mqtts://host:port...]``, in order.

    The settings validate each URL; this only reads them.
    """
    brokers = []
    for url in urls.split(","):
        parts = urlsplit(url.strip())
        tls = parts.scheme == "mqtts"
        brokers.append(Broker(parts.hostname or "127.0.0.1", parts.port or (8883 if tls else 1883), tls))
    return tuple(brokers)


@dataclass(frozen=True, slots=True)
class MqttConfig:
    """Where and how to connect; ``password`` never appears in repr or logs.

    ``brokers`` are tried in order (fail-over); every other field applies to each.
    """

    brokers: tuple[Broker, ...]
    client_id: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    keepalive_s: int = 30
    qos: int = 0
    protocol: Literal["3.1.1", "5"] = "5"
    max_packet_bytes: int | None = None  # MQTT 5 only: the largest packet the broker may send us
    # The longest wait between rounds of attempts: a broker back is answered within it (docs/reliability.md).
    backoff_cap_s: float = 2.0

    @property
    def url(self) -> str:
        """Return the broker URLs, comma-separated, without credentials."""
        return ",".join(broker.url for broker in self.brokers)
