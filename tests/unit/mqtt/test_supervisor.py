"""Specification of the MQTT edge's client: every client the supervisor makes is the one a stop always reaches.

The supervisor's behaviour against real brokers (fail-over, backoff, a
broker killed mid-session) is in tests/integration/test_failover.py, and a
real process's stop around its connect in tests/integration/test_stops.py;
the override that keeps a stop from being lost, with its canaries, in
tests/unit/mqtt/test_paho.py.
"""

from __future__ import annotations

import pytest

from rainierd.mqtt._paho import Client
from rainierd.mqtt.config import Broker, MqttConfig
from rainierd.mqtt.supervisor import _client


class TestClients:
    @pytest.mark.parametrize("protocol", ["3.1.1", "5"])
    async def test_every_client_waits_through_the_override_a_stop_reaches(self, protocol: str) -> None:
        """The supervisor's clients, under either protocol, are ``_paho.Client``: their waits are cancellable."""
        config = MqttConfig(brokers=(Broker("127.0.0.1", 1),), client_id="unit", protocol=protocol)  # type: ignore[arg-type]
        assert isinstance(_client(config, config.brokers[0]), Client)
