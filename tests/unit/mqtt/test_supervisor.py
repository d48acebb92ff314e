"""Specification of the MQTT edge's client: a stop always reaches a task waiting on it.

The supervisor's behaviour against real brokers (fail-over, backoff, a
broker killed mid-session) is in tests/integration/test_failover.py, and a
real process's stop around its connect in tests/integration/test_stops.py.
"""

from __future__ import annotations

import asyncio
import inspect

import aiomqtt
import pytest

from rainierd.mqtt.supervisor import Broker, MqttConfig, _client, mqtt_config
from rainierd.settings import Settings

CONFIG = MqttConfig(brokers=(Broker("127.0.0.1", 1),), client_id="unit")  # never connected


class TestClientWaits:
    async def test_a_cancel_that_lands_with_the_acknowledgement_is_not_lost(self) -> None:
        """A stop in the loop iteration that also brings the awaited acknowledgement still cancels the waiter
        (aiomqtt's own wait, ``asyncio.wait_for`` on 3.11, returned the acknowledgement and dropped the stop)."""
        client = _client(CONFIG, CONFIG.brokers[0])
        acknowledged = asyncio.Event()
        waiting = asyncio.create_task(client._wait_for(acknowledged.wait(), timeout=None))
        await asyncio.sleep(0)  # the task now waits for the acknowledgement
        acknowledged.set()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    async def test_a_wait_past_its_timeout_raises_mqtt_error(self) -> None:
        """The overridden wait keeps aiomqtt's contract: a timeout is an ``MqttError``."""
        client = _client(CONFIG, CONFIG.brokers[0])
        with pytest.raises(aiomqtt.MqttError, match="timed out"):
            await client._wait_for(asyncio.Event().wait(), timeout=0.01)

    @pytest.mark.parametrize("method", ["__aenter__", "__aexit__", "publish", "subscribe", "unsubscribe"])
    def test_every_aiomqtt_wait_goes_through_the_overridden_method(self, method: str) -> None:
        """aiomqtt's connect, disconnect, publish and (un)subscribe wait through ``_wait_for``: if an upgrade
        waits some other way, the override no longer covers it and this fails."""
        assert "self._wait_for(" in inspect.getsource(getattr(aiomqtt.Client, method))


class TestReconnectCap:
    def test_the_settings_cap_reaches_every_client(self) -> None:
        """mqtt_reconnect_max_s (2 s unless set) is the longest wait between reconnect rounds
        (tests/integration/test_failover.py holds a client to it against a refusing broker)."""
        assert mqtt_config(Settings(), client_id="x").backoff_cap_s == 2.0
        assert mqtt_config(Settings(mqtt_reconnect_max_s=30), client_id="x").backoff_cap_s == 30.0
