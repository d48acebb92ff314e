"""The MQTT edge: connection settings, and a supervisor that keeps one aiomqtt
session alive with jittered exponential backoff.

The supervisor is the only place that catches ``aiomqtt.MqttError``, plain or
inside the ExceptionGroup of a session's own TaskGroup.  Each
client connects with a retained will on ``rainier/v1/status/<client-id>``
saying ``offline``, and says ``online`` there once connected, so a publisher
that dies is marked offline by the broker.

Clients speak MQTT 5 by default, so the monitor can tell its broker the
largest packet it accepts (CONNECT "Maximum Packet Size"): a broker never
sends it a larger one, so an oversize payload is refused before a byte of it
is buffered here (MQTT 3.1.1 has no such field: there, the broker's own
``max_packet_size`` is the bound; docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

import aiomqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from rainierd.settings import Settings
from rainierd.status import ConnectionState
from rainierd.wire.topics import status_topic

__all__ = ["MAX_PACKET_OVERHEAD", "MqttConfig", "mqtt_config", "supervise"]

log = structlog.get_logger("rainierd.mqtt")

# A PUBLISH packet's bytes beyond its payload: fixed header, topic (ours are
# under 100 bytes) and MQTT 5 properties.  A payload up to the monitor's
# ``max_frame_bytes`` always fits; one far beyond it never reaches us.
MAX_PACKET_OVERHEAD: Final = 4_096
_BACKOFF_BASE_S: Final = 0.2
_BACKOFF_CAP_S: Final = 15.0
_STABLE_AFTER_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class MqttConfig:
    """Where and how to connect; ``password`` never appears in repr or logs."""

    host: str
    port: int
    client_id: str
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    keepalive_s: int = 30
    qos: int = 0
    protocol: Literal["3.1.1", "5"] = "5"
    max_packet_bytes: int | None = None  # MQTT 5 only: the largest packet the broker may send us

    @property
    def url(self) -> str:
        """Return the broker URL, without credentials."""
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"


def mqtt_config(
    settings: Settings, *, client_id: str, url: str | None = None, suffix: str | None = None,
    max_packet_bytes: int | None = None, protocol: Literal["3.1.1", "5"] | None = None,
) -> MqttConfig:
    """Return the connection config for ``url`` (default: the settings' URL).

    ``client_id`` is used unless the settings give one; ``suffix`` is added to
    a given one, so that the clients of one process (``run``: simulator and
    monitor) never share an id and take each other's session over.
    ``protocol`` overrides the settings' (the embedded broker speaks 3.1.1 only).
    """
    parts = urlsplit(url or settings.mqtt_url or "mqtt://127.0.0.1:1883")
    tls = parts.scheme == "mqtts"
    return MqttConfig(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or (8883 if tls else 1883),
        client_id=(f"{settings.mqtt_client_id}-{suffix}" if suffix else settings.mqtt_client_id)
        if settings.mqtt_client_id else client_id,
        tls=tls,
        username=settings.mqtt_username,
        password=settings.mqtt_password.get_secret_value() if settings.mqtt_password else None,
        ca_file=settings.mqtt_ca_file,
        cert_file=settings.mqtt_cert_file,
        key_file=settings.mqtt_key_file,
        keepalive_s=settings.mqtt_keepalive_s,
        qos=settings.mqtt_qos,
        protocol=protocol or settings.mqtt_protocol,
        max_packet_bytes=max_packet_bytes,
    )


def _tls_context(config: MqttConfig) -> ssl.SSLContext | None:
    if not config.tls:
        return None
    context = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
    if config.cert_file is not None:
        context.load_cert_chain(str(config.cert_file), str(config.key_file) if config.key_file else None)
    return context


def _client(config: MqttConfig) -> aiomqtt.Client:
    status = status_topic(config.client_id)
    properties = None
    if config.protocol == "5" and config.max_packet_bytes is not None:
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.MaximumPacketSize = config.max_packet_bytes
    return aiomqtt.Client(
        config.host,
        config.port,
        identifier=config.client_id,
        username=config.username,
        password=config.password,
        will=aiomqtt.Will(status, b"offline", qos=1, retain=True),
        keepalive=config.keepalive_s,
        tls_context=_tls_context(config),
        timeout=10.0,
        protocol=aiomqtt.ProtocolVersion.V5 if config.protocol == "5" else aiomqtt.ProtocolVersion.V311,
        properties=properties,
        # This queue only bridges paho's callback to the session's consume
        # loop, which hands each message on at once (the monitor's inbox is
        # bounded in bytes); the bound matters only if that loop is starved.
        max_queued_incoming_messages=20_000,
    )


async def _until_disconnected(client: aiomqtt.Client, session: Callable[[aiomqtt.Client], Awaitable[None]]) -> None:
    """Run ``session``; if the connection drops first, cancel it and raise MqttError.

    A session that only waits (a bridge with nothing to send, a publisher
    whose outbox is empty) would otherwise not learn that its broker is gone
    until its next publish, and would go on counting itself connected.
    aiomqtt has no public "connection lost" signal; its own message iterator
    waits on this same future.
    """
    lost: asyncio.Future[None] | None = getattr(client, "_disconnected", None)
    if lost is None:  # another aiomqtt: a session then learns of the loss at its next operation
        await session(client)
        return
    work = asyncio.ensure_future(session(client))
    try:
        await asyncio.wait((work, lost), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():
            work.cancel()
            # Wait for it without taking its CancelledError for ours: if we are
            # being cancelled too, that must still reach the caller.
            await asyncio.wait((work,))
    if not work.cancelled():
        work.result()  # the session's own return or failure
        return
    lost.result()  # raises MqttCodeError: "Unexpected disconnection"
    raise aiomqtt.MqttError("disconnected by the broker")


async def supervise(
    config: MqttConfig,
    session: Callable[[aiomqtt.Client], Awaitable[None]],
    *,
    state: ConnectionState,
    rng: random.Random | None = None,
) -> None:
    """Run ``session`` on a connected client for ever, reconnecting on failure.

    Returns when ``session`` returns; cancellation propagates.
    """
    rng = rng or random.Random()
    attempt = 0
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        failure: BaseException | None = None
        try:
            async with _client(config) as client:
                state.connected, state.connects = True, state.connects + 1
                log.info("mqtt connected", broker=config.url, client_id=config.client_id)
                await client.publish(status_topic(config.client_id), b"online", qos=1, retain=True)
                try:
                    await _until_disconnected(client, session)
                    return
                finally:
                    state.connected = False
                    # Say offline ourselves: a clean DISCONNECT does not fire the will.
                    with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                        async with asyncio.timeout(0.5):
                            await client.publish(
                                status_topic(config.client_id), b"offline", qos=1, retain=True,
                            )
        # A session that runs tasks of its own (a TaskGroup) raises its
        # transport errors inside an ExceptionGroup; a plain ``except`` would
        # miss them and let one broker restart end the process.  ``except*``
        # takes both forms; anything else in the group still propagates.
        except* aiomqtt.MqttError as group:
            failure = group.exceptions[0]
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            # A stop came while the session was failing: the transport error must not swallow it.
            raise asyncio.CancelledError
        state.connected = False
        state.failures += 1
        if loop.time() - started > _STABLE_AFTER_S:
            attempt = 0
        delay = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt) * rng.uniform(0.5, 1.0)
        attempt += 1
        log.warning("mqtt connection failed; retrying", broker=config.url, error=str(failure),
                    retry_in_s=round(delay, 2))
        await asyncio.sleep(delay)
