"""The MQTT edge's supervisor: it keeps one aiomqtt session alive with
jittered exponential backoff, failing over between brokers (their addresses
and the connection settings: ``rainierd.mqtt.config``).

A client may be given several brokers (the nodes of a clustered broker,
``mqtt_url`` as comma-separated URLs; docs/scaling.md).  It connects to the
first that answers and stays there; when that broker goes away it tries the
next at once, and backs off only after every broker of the list has failed
in turn.  TLS, credentials and the will apply to every broker alike.

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

A subscriber takes its messages through ``deliver``, not aiomqtt's message
iterator: each QoS 0 PUBLISH goes straight to the subscriber's handler on
the event loop, in the same callback that read it off the socket
(``_paho.read_in_chunks``: one ``recv`` of up to 256 kB, then every whole
packet in it), and anything else through paho and aiomqtt's public
``queue_type=``, with a queue that hands each message on instead of holding
it.  aiomqtt's iterator would put it in a bounded queue
first, discarding what does not fit with a plain-text line on stderr and
counting it nowhere, and would cost a task per message (3.5 times the CPU a
message; benchmarks/README.md, ``receive``); a handler that does O(1)
work (the monitor's inbox) keeps up with the socket instead, so the client
keeps reading and its keep-alive is answered however hard a publisher floods.

A stop cancels the supervisor, and the cancel must arrive whatever aiomqtt
is waiting for.  aiomqtt (2.5) waits for every acknowledgement (CONNACK, a
PUBACK, a SUBACK, even a QoS 0 publish's write) through ``asyncio.wait_for``,
which on Python 3.11 returns the result instead of raising when the cancel
lands in the same loop iteration as the acknowledgement (CPython issue
86296, fixed in 3.12): the stop is lost and the process runs on.  Our client
(``_paho.Client``) waits through ``asyncio.timeout`` instead.  The way out is bounded too: the
retained ``offline`` and the DISCONNECT get ``GOODBYE_S`` together, then the
socket is closed unannounced and the broker publishes the will.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import aiomqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from rainierd.mqtt._paho import Client, Handler, close_unannounced, disconnected, read_in_chunks
from rainierd.mqtt.config import Broker, MqttConfig
from rainierd.mqtt.connection import ConnectionState
from rainierd.wire import status_topic

log = structlog.get_logger("rainierd.mqtt.supervisor")

_BACKOFF_BASE_S: Final = 0.2
_STABLE_AFTER_S: Final = 10.0
# A stop's whole goodbye to the broker: the retained ``offline`` (QoS 1, so a PUBACK) and the DISCONNECT's
# write.  A quarter of the 2 s a stop is given; a broker that takes longer is left to publish the will.
GOODBYE_S: Final = 0.5


def _tls_context(config: MqttConfig, broker: Broker) -> ssl.SSLContext | None:
    if not broker.tls:
        return None
    context = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
    if config.cert_file is not None:
        context.load_cert_chain(str(config.cert_file), str(config.key_file) if config.key_file else None)
    return context


class _Client(Client):
    """The supervisor's client: one a stop always reaches (``_paho.Client``), whose messages go to the handler
    ``deliver`` gives it, once given one, as paho reads them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.handler: Handler | None = None
        client = self

        class HandOn(asyncio.Queue[aiomqtt.Message]):
            # aiomqtt puts each message it reads here, from paho's callback, and never awaits the queue.
            def put_nowait(self, item: aiomqtt.Message) -> None:
                if client.handler is None:
                    super().put_nowait(item)
                else:
                    client.handler(item.topic.value, item.payload, item.retain)

        super().__init__(*args, queue_type=HandOn, **kwargs)
        read_in_chunks(self, lambda: client.handler)


def _client(config: MqttConfig, broker: Broker) -> aiomqtt.Client:
    status = status_topic(config.client_id)
    properties = None
    if config.protocol == "5" and config.max_packet_bytes is not None:
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.MaximumPacketSize = config.max_packet_bytes
    return _Client(
        broker.host,
        broker.port,
        identifier=config.client_id,
        username=config.username,
        password=config.password,
        will=aiomqtt.Will(status, b"offline", qos=1, retain=True),
        keepalive=config.keepalive_s,
        tls_context=_tls_context(config, broker),
        timeout=10.0,
        protocol=aiomqtt.ProtocolVersion.V5 if config.protocol == "5" else aiomqtt.ProtocolVersion.V311,
        properties=properties,
    )


@contextlib.asynccontextmanager
async def _connected(config: MqttConfig, broker: Broker) -> AsyncIterator[aiomqtt.Client]:
    """Yield a client connected to ``broker``; on the way out say ``offline`` and disconnect, within ``GOODBYE_S``.

    Raises MqttError if the broker cannot be reached or refuses the client.
    A goodbye that overruns (a broker that stopped reading, a socket whose
    buffer is full) ends with the socket closed unannounced.
    """
    client = _client(config, broker)
    try:
        await client.__aenter__()
    except BaseException:
        # Refused, timed out or stopped while connecting: aiomqtt leaves an opened socket open.
        close_unannounced(client)
        raise
    try:
        yield client
    finally:
        try:
            async with asyncio.timeout(GOODBYE_S):
                # Say offline ourselves: a clean DISCONNECT does not fire the will.
                with contextlib.suppress(aiomqtt.MqttError):
                    await client.publish(status_topic(config.client_id), b"offline", qos=1, retain=True)
                await client.__aexit__(None, None, None)
        except (TimeoutError, aiomqtt.MqttError):
            close_unannounced(client)


def deliver(client: aiomqtt.Client, handler: Handler) -> None:
    """Hand every message ``client`` reads to ``handler`` from now on, never holding it in aiomqtt's queue.

    ``client`` is one ``supervise`` gave its session.  Call it before
    subscribing, so that retained messages sent with the SUBACK reach the
    handler too.  A handler must not raise: the exception escapes into the
    client's read (``_paho.read_in_chunks``), which keeps the message and
    hands it on again at the next read instead of the ones after it.  A topic that is not UTF-8, or that holds a
    wildcard, fails the same way in aiomqtt before the handler sees it; MQTT
    makes a broker refuse such a topic from a publisher (Mosquitto and the
    embedded broker do), so none arrives.

    Raises TypeError for a client ``supervise`` did not make.
    """
    if not isinstance(client, _Client):
        raise TypeError(f"deliver takes a client supervise() made, not a {type(client).__name__}")
    client.handler = handler


async def _until_disconnected(client: aiomqtt.Client, session: Callable[[aiomqtt.Client], Awaitable[None]]) -> None:
    """Run ``session``; if the connection drops first, cancel it and raise MqttError.

    A session that only waits (a bridge with nothing to send, a publisher
    whose outbox is empty) would otherwise not learn that its broker is gone
    until its next publish, and would go on counting itself connected.
    aiomqtt has no public "connection lost" signal; its own message iterator
    waits on this same future.
    """
    lost = disconnected(client)
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

    Brokers are tried in ``config.brokers`` order, from the first; a failure
    (refused, timed out, or a connection lost) moves to the next broker at
    once, after a jitter of at most ``_BACKOFF_BASE_S`` so that the clients of
    a lost node do not all arrive at the same instant.  Only when every broker
    has failed in turn does the client back off, exponentially and jittered,
    before the next round; a session that had run for ``_STABLE_AFTER_S``
    starts the backoff afresh.  With one broker this is plain backoff.

    Returns when ``session`` returns; cancellation propagates.
    """
    rng = rng or random.Random()
    attempt = 0  # rounds of the whole broker list that failed in a row
    index = 0
    failed_this_round = 0
    loop = asyncio.get_running_loop()
    while True:
        broker = config.brokers[index]
        started = loop.time()
        failure: BaseException | None = None
        try:
            async with _connected(config, broker) as client:
                state.connected, state.connects, state.broker = True, state.connects + 1, broker.url
                log.info("mqtt connected", broker=broker.url, client_id=config.client_id)
                try:
                    await client.publish(status_topic(config.client_id), b"online", qos=1, retain=True)
                    await _until_disconnected(client, session)
                    return
                finally:
                    state.connected = False
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
            attempt, failed_this_round = 0, 0
        failed_this_round += 1
        index = (index + 1) % len(config.brokers)
        if failed_this_round < len(config.brokers):
            delay = _BACKOFF_BASE_S * rng.uniform(0.0, 1.0)
        else:
            delay = min(config.backoff_cap_s, _BACKOFF_BASE_S * 2**attempt) * rng.uniform(0.5, 1.0)
            attempt += 1
            failed_this_round = 0
        log.warning("mqtt connection failed; retrying", broker=broker.url, error=str(failure),
                    next_broker=config.brokers[index].url, retry_in_s=round(delay, 2))
        await asyncio.sleep(delay)
