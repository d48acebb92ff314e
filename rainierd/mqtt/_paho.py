"""The one module that touches aiomqtt's and paho's internals.

aiomqtt wraps a paho client and keeps it private; rainierd needs a few
things that neither library offers in public.  Each function here borrows
one of them, says why the public API cannot do it, and names the versions it
was checked against (``CHECKED_AGAINST``).  Each borrowed attribute has a
canary in tests/unit/mqtt/test_paho.py, so an upgrade that moves one fails
the unit tier by name; pyproject.toml pins both libraries to these minor
versions, and ruff's ``SLF`` rule keeps private access out of every other
module.

What is borrowed:

- aiomqtt's ``Client._client`` (its paho client), to reach paho's own
  ``_packet_queue``, ``_sock_close`` and ``publish``;
- aiomqtt's ``Client._disconnected`` (the future its message iterator waits on);
- aiomqtt's ``Client._wait_for`` (every wait of the client), overridden.

Messages are received through aiomqtt's public ``queue_type=`` instead
(``supervisor.deliver``): replacing paho's ``on_message`` saved under a tenth
of the CPU a message, which did not earn two more borrowed internals
(benchmarks/README.md, ``receive``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Final, TypeVar

import aiomqtt
import paho.mqtt.client as paho

# The releases every function below was read against; pyproject.toml pins these minor versions.
CHECKED_AGAINST: Final = {"aiomqtt": "2.5", "paho-mqtt": "2.2"}

_T = TypeVar("_T")


def _paho(client: aiomqtt.Client) -> paho.Client:
    # aiomqtt 2.5 keeps its paho client as ``_client`` and offers no accessor.
    inner: paho.Client = client._client
    return inner


class Client(aiomqtt.Client):
    """aiomqtt's client, but a cancel always reaches the task that waits on it.

    aiomqtt 2.5 waits for every acknowledgement (CONNACK, PUBACK, SUBACK, even
    a QoS 0 publish's write) in ``_wait_for``, through ``asyncio.wait_for``,
    which on Python 3.11 returns the result instead of raising when the cancel
    lands in the same loop iteration as the acknowledgement (CPython issue
    86296, fixed in 3.12): a stop is lost.  No public hook replaces the wait,
    so the private method is overridden whole, keeping aiomqtt's contract:
    ``None`` is the client's timeout, ``math.inf`` none, and a timeout raises
    MqttError.  Checked against aiomqtt 2.5.1.
    """

    async def _wait_for(self, fut: Awaitable[_T], timeout: float | None) -> _T:  # noqa: ASYNC109 (aiomqtt's signature)
        if timeout is None:
            timeout = self.timeout
        try:
            async with asyncio.timeout(None if timeout == math.inf else timeout):
                return await fut
        except TimeoutError:
            raise aiomqtt.MqttError("Operation timed out") from None


def close_unannounced(client: aiomqtt.Client) -> None:
    """Close the client's socket without a DISCONNECT (the broker then publishes its will).

    aiomqtt's only way out is ``__aexit__``, which sends a DISCONNECT and
    waits for it; a broker that stopped reading would hold a stop.  paho's
    own ``_sock_close`` also takes the socket off the event loop (aiomqtt's
    socket callbacks), which closing the socket by hand would not.  Checked
    against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    """
    _paho(client)._sock_close()


def disconnected(client: aiomqtt.Client) -> asyncio.Future[None]:
    """Return the future aiomqtt completes when the connection is lost (with MqttCodeError) or closed.

    aiomqtt has no public "connection lost" signal; its own message iterator
    waits on this future.  Checked against aiomqtt 2.5.1.
    """
    future: asyncio.Future[None] = client._disconnected
    return future


def speaks_v5(client: aiomqtt.Client) -> bool:
    """Return True if the client speaks MQTT 5 (aiomqtt does not say which protocol it was given).

    Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0 (``paho.Client.protocol``, public on paho).
    """
    return bool(_paho(client).protocol == paho.MQTTv5)


def queue_packet(client: aiomqtt.Client, packet: bytes) -> None:
    """Queue ``packet``, whole PUBLISH packets at QoS 0, for the client to write as one; return at once.

    paho (and so aiomqtt) frames each message it publishes as a packet of its
    own, written with a ``send`` of its own; paho's ``_packet_queue`` queues
    any bytes and writes them when aiomqtt's event-loop writer says the socket
    can take them.  A QoS 0 PUBLISH has no packet id, so many back to back are
    one packet to paho; its one ``on_publish`` (mid 0) is none of aiomqtt's,
    and paho marks the ``MQTTMessageInfo`` it is given published once written.
    An empty packet would read to paho as a stalled socket: the caller never
    queues one.  Raises aiomqtt.MqttCodeError when the client is not connected.
    Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    """
    inner = _paho(client)
    if not inner.is_connected():
        raise aiomqtt.MqttCodeError(paho.MQTT_ERR_NO_CONN, "could not publish: not connected")
    inner._packet_queue(paho.PUBLISH, packet, 0, 0, paho.MQTTMessageInfo(0))


def publish_nowait(client: aiomqtt.Client, topic: str, payload: bytes, *, qos: int) -> int:
    """Hand one message to the client without waiting for its write or acknowledgement; return paho's code
    (``paho.MQTT_ERR_SUCCESS``, 0, when queued).

    aiomqtt's ``publish`` waits for the write (QoS 0) or the PUBACK (QoS 1)
    of each message; paho's own ``publish`` (public on paho) only queues it.
    Checked against aiomqtt 2.5.1 and paho-mqtt 2.2.0.
    """
    return int(_paho(client).publish(topic, payload, qos).rc)
