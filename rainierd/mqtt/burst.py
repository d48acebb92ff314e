"""Messages handed to an aiomqtt client without waiting for each: many QoS 0
messages as one write, or one message queued at any QoS.

paho writes each message it queues with a ``send`` of its own; on the
loaded 2-core development machine that was ~150 µs a message, the larger
part of what a node frame cost the simulator publishing one frame per node
(31,200 a second at ``rainier``).  ``publish_many`` frames the PUBLISH
packets itself and queues them on paho as one packet, so the kernel sees
one ``send`` (or a few, as the socket takes them) for hundreds of
messages.  ``publish_nowait`` hands paho one message at any QoS without
waiting for its write or PUBACK, which aiomqtt's ``publish`` waits for.
A leaf: the simulator (which may not import the daemon's MQTT edge,
``rainierd.mqtt.supervisor``) and any other publisher may use it; what it
borrows of aiomqtt's and paho's internals is in ``_paho``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import aiomqtt
import paho.mqtt.client as paho

from rainierd.mqtt import _paho


@functools.lru_cache(maxsize=1 << 17)
def publish_packet_header(topic: str, payload_bytes: int, *, v5: bool) -> bytes:
    """Return the bytes before the payload of a QoS 0, not retained PUBLISH of ``payload_bytes`` on ``topic``:
    the fixed header (type, remaining length) and the variable header (topic; with MQTT 5 an empty property
    list).  MQTT 3.1.1 and 5.0, section 3.3.

    Cached: a publisher sends the same topics and sizes tick after tick.
    """
    name = topic.encode()
    variable = struct.pack("!H", len(name)) + name + (b"\x00" if v5 else b"")
    remaining = len(variable) + payload_bytes
    fixed = bytearray((0x30,))
    while True:
        remaining, digit = divmod(remaining, 128)
        fixed.append(digit | (0x80 if remaining else 0))
        if not remaining:
            return bytes(fixed) + variable


def publish_many(client: aiomqtt.Client, topics: Sequence[str], payloads: Sequence[bytes]) -> None:
    """Queue ``payloads[i]`` on ``topics[i]`` at QoS 0, not retained, on ``client`` as one write; return at once.

    The messages go out in order, after whatever the client queued before
    and before whatever it queues next: awaiting a later ``client.publish``
    waits for these too.  Nothing says when they are written; a connection
    lost before then loses them, as any QoS 0 message.

    Raises aiomqtt.MqttCodeError when the client is not connected.
    """
    if not topics:
        return
    v5 = _paho.speaks_v5(client)
    parts: list[bytes] = []
    for topic, payload in zip(topics, payloads, strict=True):
        parts += (publish_packet_header(topic, len(payload), v5=v5), payload)
    _paho.queue_packet(client, b"".join(parts))


def publish_nowait(client: aiomqtt.Client, topic: str, payload: bytes, *, qos: int) -> None:
    """Queue one message on ``client`` at ``qos``, not retained; return at once, not waiting for its write or
    (QoS 1) its PUBACK.

    The message goes out in order with the client's others, as ``publish_many``'s.
    Raises aiomqtt.MqttCodeError when the client refuses it (not connected, or its queue full).
    """
    rc = _paho.publish_nowait(client, topic, payload, qos=qos)
    if rc != paho.MQTT_ERR_SUCCESS:
        raise aiomqtt.MqttCodeError(rc, f"could not publish on {topic}")
