"""The MQTT edge: the client supervisor (one aiomqtt session kept alive,
failing over between brokers), its connection state as plain data, the batched
QoS 0 publisher, and the embedded broker ``rainierd run`` starts.  Only
``_paho`` touches aiomqtt's and paho's internals.
"""

from __future__ import annotations

from rainierd.mqtt.broker import EmbeddedBroker
from rainierd.mqtt.burst import publish_many, publish_nowait
from rainierd.mqtt.config import MAX_PACKET_OVERHEAD, MqttConfig, parse_brokers
from rainierd.mqtt.connection import Connection, ConnectionState
from rainierd.mqtt.supervisor import deliver, supervise

__all__ = [
    "MAX_PACKET_OVERHEAD",
    "Connection",
    "ConnectionState",
    "EmbeddedBroker",
    "MqttConfig",
    "deliver",
    "parse_brokers",
    "publish_many",
    "publish_nowait",
    "supervise",
]
