"""The webhook sink: each advisory change (``sinks/changes.py``) POSTed as a
CloudEvents 1.0 event in structured mode (one JSON object, content type
``application/cloudevents+json``), from a bounded queue, by its own task.

Why this shape: the analysis only calls ``offer`` (a diff and a queue
append, never I/O), so a receiver that is slow, down or hostile never holds
an analysis up.  The queue holds at most ``queue_size`` events and drops its
oldest to make room, counted (``rainier_webhook_events_dropped_total``).  One
event is in flight at a time, in order; each is tried at most
``max_attempts`` times, each attempt bounded by ``timeout_s`` (connect, TLS,
request and response together), with full-jitter exponential backoff
between attempts (``backoff_s`` doubling up to ``backoff_max_s``; a 429's or
503's ``Retry-After`` is honoured up to that cap).  A 2xx is delivered; a
timeout, a connection or TLS failure, a malformed answer, 408, 429 and 5xx
are retried; any other answer is final (the receiver refused the event:
retrying would not change its mind).  Retries resend the same event ``id``, so a receiver can
drop duplicates.

The sink never ends the monitor: it is an optional output, and its receiver
may be anyone.  Every exception of an attempt (a timeout, a refused or reset
connection, a TLS failure, a malformed answer: ``HttpError``, or anything
unexpected) is counted in ``rainier_webhook_errors_total{reason}`` and the
attempt retried like a 5xx; an exception anywhere else in delivering an
event (making its data, say) is counted ``internal``, the event counted
failed, and the next event tried after a backoff.  Only cancellation ends
``run``.  The log says once when delivery starts failing (an error or an
event given up on, whichever comes first) and once when an event is
delivered again.

The bearer token is read from ``token_file`` at start and again before each
attempt (a rotated Kubernetes Secret is picked up without a restart; an
unreadable file, or one that holds no ASCII token, keeps the last token),
and is never logged.  ``ca_file``
is the CA bundle that signs the receiver's certificate (unset: the system's).

Event types: ``io.rainierd.action.<state>`` (pending, proposed, suppressed,
expired) when a node's advisory appears or changes, ``io.rainierd.action.cleared``
when it leaves the view (its data the last advisory), ``io.rainierd.brake.tripped``
and ``io.rainierd.brake.released`` (``.changed``: it moved scope) for the brake; the
extension attribute ``dryrun`` says whether the policy runs dry (an
automation must not act on a dry run's proposal).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import random
import ssl
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.actions import ActionsView
from rainierd.errors import ConfigError
from rainierd.http.client import HttpError, Url, parse_url, request
from rainierd.runtime import DropOldestQueue
from rainierd.sinks.changes import Change, diff

log = structlog.get_logger("rainierd.sinks")

CONTENT_TYPE: Final = "application/cloudevents+json"
_TYPE_PREFIX: Final = "io.rainierd"
_RETRIED: Final = frozenset({408, 429})
_MAX_RESPONSE_BYTES: Final = 64 * 1024  # a receiver's answer is read, not kept: only its status matters
_MAX_TOKEN_BYTES: Final = 8 * 1024
# Why an attempt or a delivery raised, each a series of rainier_webhook_errors_total from the start: a timeout
# (webhook_timeout_s), a connection refused, reset or unresolved, a TLS failure, an answer that is not HTTP
# (httpclient.HttpError), anything else (a defect: counted, not fatal).
ERROR_REASONS: Final = ("timeout", "connect", "tls", "http", "internal")


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """Where and how the webhook sink delivers (settings ``webhook_*``; docs/actions.md)."""

    url: str
    token_file: Path | None = None
    ca_file: Path | None = None
    queue_size: int = 1_000
    max_attempts: int = 5
    timeout_s: float = 5.0
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    source: str = "/rainierd/monitor"  # the CloudEvents source: a URI-reference naming this monitor


@dataclass(frozen=True, slots=True)
class WebhookStatus:
    """The sink's counters as of now, for a scrape."""

    sent: int
    failed: int  # given up on: out of attempts, or refused by the receiver
    dropped: int  # dropped from a full queue before a first attempt
    retries: int  # attempts after an event's first
    queued: int
    queue_size: int
    errors: Mapping[str, int]  # exceptions met while delivering, by reason (every one of ERROR_REASONS)


def _rfc3339(t_s: float) -> str:
    return datetime.datetime.fromtimestamp(t_s, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00",
                                                                                                       "Z")


# An event waiting in the queue: its attributes, and its data made when it is sent (1,000 advisories' documents
# made at once would hold the event loop ~35 ms: python -m benchmarks sinks).
_Queued = tuple[dict[str, Any], Callable[[], dict[str, Any]]]


def cloud_event(*, type_: str, subject: str, data: dict[str, Any] | None, t_s: float | str, source: str,
                dry_run: bool, event_id: str | None = None) -> dict[str, Any]:
    """Return one CloudEvents 1.0 event in structured JSON form (``t_s``: wall seconds, or already RFC 3339)."""
    return {"specversion": "1.0", "id": event_id or uuid.uuid4().hex, "source": source,
            "type": f"{_TYPE_PREFIX}.{type_}", "time": t_s if isinstance(t_s, str) else _rfc3339(t_s),
            "subject": subject,
            "datacontenttype": "application/json", "dryrun": dry_run, "data": data}


class WebhookSink:
    """Queues each change of the advisories (``offer``) and POSTs them (``run``, its own task).

    Raises ConfigError at construction for a bad URL, an unreadable token
    file or CA bundle.
    """

    def __init__(self, config: WebhookConfig, *, rng: random.Random | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        if config.queue_size < 1 or config.max_attempts < 1 or config.timeout_s <= 0:
            raise ConfigError("webhook: queue size, attempts and timeout must be positive")
        try:
            self._url: Url = parse_url(config.url)
        except ValueError as exc:
            raise ConfigError(f"webhook_url: {exc}") from None
        self.config = config
        self._token: str | None = None
        if config.token_file is not None:
            self._token = self._read_token(config.token_file)
            if self._token is None:
                raise ConfigError(f"webhook_token_file: cannot read a token from {config.token_file}")
        self._ssl: ssl.SSLContext | None = None
        if self._url.scheme == "https":
            try:
                self._ssl = ssl.create_default_context(cafile=config.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"webhook_ca_file: {exc}") from None
        self.queue: DropOldestQueue[_Queued] = DropOldestQueue(config.queue_size)
        self._last: ActionsView | None = None
        self._rng = rng or random.Random()  # jitter, not a secret
        self._sleep = sleep
        self.sent = self.failed = self.retries = 0
        self.errors = dict.fromkeys(ERROR_REASONS, 0)
        self._failing = False  # since an error or an event given up on, until an event is delivered
        # Event ids: this sink's random prefix and a count, unique per source (CloudEvents' rule) across restarts.
        self._ids = itertools.count(1)
        self._id_prefix = uuid.uuid4().hex[:16]

    @staticmethod
    def _read_token(path: Path) -> str | None:
        try:
            with path.open("rb") as handle:
                token = handle.read(_MAX_TOKEN_BYTES + 1).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        # A bearer token is ASCII (RFC 6750 b64token) and a header value holds no line breaks or controls: such a
        # file is not a token (and a character past Latin-1 could not even be sent).
        if not token or len(token) > _MAX_TOKEN_BYTES or not token.isascii() or any(
                ord(c) < 0x20 or ord(c) == 0x7F for c in token):
            return None
        return token

    def status(self) -> WebhookStatus:
        """Return the counters (a copy, safe to read from the render thread)."""
        return WebhookStatus(sent=self.sent, failed=self.failed, dropped=self.queue.dropped, retries=self.retries,
                             queued=self.queue.qsize(), queue_size=self.config.queue_size, errors=dict(self.errors))

    def offer(self, view: ActionsView | None) -> int:
        """Queue the events of what changed since the last view offered; return how many (never blocks).

        None (no policy has run) changes nothing.
        """
        if view is None:
            return 0
        before, self._last = self._last, view
        time_text = _rfc3339(view.t_s)
        events = [self._event(change, view, time_text) for change in diff(before, view)]
        was = (before.brake.tripped, before.brake.scope) if before is not None else (False, None)
        if was != (view.brake.tripped, view.brake.scope):  # its count moving is no event: the next change carries it
            events.append(self._brake_event(before, view))
        for event in events:
            self.queue.offer(event)
        return len(events)

    def _event(self, change: Change, view: ActionsView, time_text: str) -> _Queued:
        return (cloud_event(type_=f"action.{change.event_type}", subject=change.node, data=None, t_s=time_text,
                            source=self.config.source, dry_run=view.dry_run,
                            event_id=f"{self._id_prefix}-{next(self._ids)}"), change.advisory.document)

    def _brake_event(self, before: ActionsView | None, view: ActionsView) -> _Queued:
        was = before is not None and before.brake.tripped
        kind = "tripped" if view.brake.tripped and not was else "released" if was and not view.brake.tripped \
            else "changed"
        return (cloud_event(type_=f"brake.{kind}", subject="_brake", data=None, t_s=view.t_s,
                            source=self.config.source, dry_run=view.dry_run,
                            event_id=f"{self._id_prefix}-{next(self._ids)}"), view.brake.document)

    async def run(self) -> None:
        """Deliver queued events, one at a time, until cancelled: nothing else ends it."""
        broken = 0  # deliveries in a row that raised: their backoff doubles like a retry's
        while True:
            event = await self.queue.get()
            try:
                await self._deliver(event)
                broken = 0
            except Exception as exc:  # a sink never ends the monitor (CancelledError is no Exception: it ends run)
                broken += 1
                self.failed += 1
                self._error("internal", exc)
                await self._sleep(self._backoff_s(broken))
            finally:
                self.queue.task_done()

    async def _deliver(self, queued: _Queued) -> None:
        event, data = queued
        body = json.dumps(event | {"data": data()}, separators=(",", ":")).encode()
        for attempt in range(1, self.config.max_attempts + 1):
            if attempt > 1:
                self.retries += 1
            outcome, retry_after_s = await self._attempt(body)
            if outcome == "sent":
                self.sent += 1
                if self._failing:
                    self._failing = False
                    log.info("webhook delivering again", url=str(self._url))
                return
            if outcome != "retry" or attempt == self.config.max_attempts:
                break
            delay_s = self._backoff_s(attempt) if retry_after_s is None else min(retry_after_s,
                                                                                 self.config.backoff_max_s)
            await self._sleep(delay_s)
        self.failed += 1
        if not self._failing:
            self._failing = True
            log.warning("webhook event not delivered; later ones are still tried", url=str(self._url),
                        type=event["type"], subject=event["subject"], reason=outcome)

    def _backoff_s(self, attempt: int) -> float:
        """Return the wait after the ``attempt``-th failure in a row: full jitter, doubling, capped."""
        return self._rng.uniform(0, min(self.config.backoff_max_s, self.config.backoff_s * 2 ** min(attempt - 1, 62)))

    def _error(self, reason: str, exc: BaseException) -> None:
        """Count an exception met while delivering under ``reason``; log it if it starts a failing episode."""
        self.errors[reason] += 1
        if not self._failing:
            self._failing = True
            # The exception's type and message, never its traceback's locals; HttpError quotes a hostile answer
            # only through repr, so the log line stays one line.
            log.warning("webhook delivery failing; counted and retried, later events are still tried",
                        url=str(self._url), reason=reason, error=f"{type(exc).__name__}: {exc}"[:200])

    async def _attempt(self, body: bytes) -> tuple[str, float | None]:
        """Return ("sent" | "retry" | why it is final, Retry-After seconds or None) of one POST."""
        headers = {"Content-Type": CONTENT_TYPE, "User-Agent": "rainierd-webhook"}
        if self.config.token_file is not None:
            self._token = self._read_token(self.config.token_file) or self._token
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            async with asyncio.timeout(self.config.timeout_s):
                response = await request(self._url, method="POST", headers=headers, body=body,
                                         ssl_context=self._ssl, max_body_bytes=_MAX_RESPONSE_BYTES)
        except Exception as exc:  # whatever the receiver does is counted and retried, never fatal
            self._error(_reason(exc), exc)
            return "retry", None
        if 200 <= response.status < 300:
            return "sent", None
        if response.status in _RETRIED or response.status >= 500:
            return "retry", _retry_after(response.headers.get("retry-after"))
        return f"refused_{response.status}", None


def _reason(exc: Exception) -> str:
    """Return the ERROR_REASONS entry of an attempt's exception."""
    if isinstance(exc, TimeoutError):  # an OSError too: asyncio.timeout's, or the kernel's connect timeout
        return "timeout"
    if isinstance(exc, ssl.SSLError):  # a certificate refused too (ssl.CertificateError is one)
        return "tls"
    if isinstance(exc, OSError):
        return "connect"
    return "http" if isinstance(exc, HttpError) else "internal"


def _retry_after(value: str | None) -> float | None:
    """Return a ``Retry-After`` of delay-seconds as seconds (an HTTP date is ignored: backoff applies)."""
    if value is None or not value.strip().isdigit():
        return None
    with contextlib.suppress(ValueError):
        return float(int(value.strip()))
    return None


class WebhookCollector(Collector):
    """The webhook sink's counters as ``rainier_webhook_*`` (docs/metrics.md)."""

    def __init__(self, status: Callable[[], WebhookStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        """Yield the sink's families."""
        status = self._status()
        for name, text, value in (
            ("rainier_webhook_events_sent", "Advisory events the webhook receiver accepted (2xx).", status.sent),
            ("rainier_webhook_events_failed", "Advisory events given up on: out of attempts, or refused.",
             status.failed),
            ("rainier_webhook_events_dropped", "Advisory events dropped from the full queue, never tried.",
             status.dropped),
            ("rainier_webhook_retries", "Delivery attempts after an event's first.", status.retries),
        ):
            yield CounterMetricFamily(name, text, value=value)
        errors = CounterMetricFamily("rainier_webhook_errors", "Exceptions met delivering advisory events, by reason "
                                     "(each counted, backed off and retried or passed over, never fatal).",
                                     labels=["reason"])
        for reason in ERROR_REASONS:
            errors.add_metric([reason], status.errors.get(reason, 0))
        yield errors
        yield GaugeMetricFamily("rainier_webhook_queue_events", "Advisory events waiting for delivery.",
                                value=status.queued)
        yield GaugeMetricFamily("rainier_webhook_queue_capacity_events", "Advisory events the queue holds at most.",
                                value=status.queue_size)
