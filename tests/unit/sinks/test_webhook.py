"""Specification of the webhook sink (sinks/webhook.py) against a real HTTP receiver the test starts: the
CloudEvents it POSTs, its retries and bounded queue while the receiver is down, the counts it keeps, its token
and TLS, that ``offer`` (all the analysis does) never waits on the receiver, and that no receiver, however
broken or hostile, and no defect of its own ends the sink (issue 35)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from harness.waits import wait_until
from rainierd.errors import ConfigError
from rainierd.sinks import webhook
from rainierd.sinks.webhook import CONTENT_TYPE, ERROR_REASONS, WebhookCollector, WebhookConfig, WebhookSink
from tests.actions_views import advisory, view
from tests.certs import Pki, make_pki

# Backoff short enough that a test's retries take milliseconds; the schedule's shape is pinned in TestBackoff.
FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 2.0}


@dataclass
class Receiver:
    """A webhook receiver on a loopback port: records each request, answers with the next of ``answers`` (raw
    bytes) or else of ``statuses`` (then 200), or never answers while ``hang`` is set."""

    statuses: list[int] = field(default_factory=list)
    answers: list[bytes] = field(default_factory=list)
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0
    hang: bool = False
    port: int = 0
    server: asyncio.Server | None = None
    ssl_context: ssl.SSLContext | None = None
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is None:
            return
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self.server.wait_closed()
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if self.hang:
                await asyncio.Event().wait()
            self.requests.append((headers, body))
            if self.answers:
                writer.write(self.answers.pop(0))
            else:
                status = self.statuses.pop(0) if self.statuses else 200
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
        writer.close()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.requests]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A started receiver, stopped after the test."""
    rx = Receiver()
    await rx.start()
    yield rx
    await rx.stop()


@contextlib.asynccontextmanager
async def running(sink: WebhookSink) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(sink.run(), name="test-webhook")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def sink_for(rx: Receiver, **config: Any) -> WebhookSink:
    return WebhookSink(WebhookConfig(url=f"http://127.0.0.1:{rx.port}/hook", **(FAST | config)))


async def until(task: asyncio.Task[None], condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition``; if the sink's task ends first, fail with what ended it."""
    await wait_until(lambda: task.done() or condition(), 10, what)
    if task.done():
        task.result()  # raises what ended run()
        pytest.fail("the sink's run() returned")


NO_ERRORS = dict.fromkeys(ERROR_REASONS, 0)


class TestEvents:
    async def test_a_new_advisory_is_one_structured_cloudevent(self, receiver: Receiver) -> None:
        """A node's first advisory is POSTed as one CloudEvents 1.0 structured JSON event whose data is the
        advisory's document, its subject the node and its type the advisory's state."""
        sink = sink_for(receiver, source="/rainierd/monitor-1")
        first = view(advisory("trn2-a-0001", node_id=1), t_s=1_700_000_000.5)
        sink.offer(first)
        async with running(sink):
            await wait_until(lambda: sink.sent == 1, 10, "the event delivered")
        ((headers, _),) = receiver.requests
        (event,) = receiver.events()
        assert headers["content-type"] == CONTENT_TYPE
        assert "authorization" not in headers
        assert (headers["connection"], "remote" in headers) == ("close", False)  # one request a connection
        assert event == {"specversion": "1.0", "id": event["id"], "source": "/rainierd/monitor-1",
                         "type": "io.rainierd.action.proposed", "time": "2023-11-14T22:13:20.500Z",
                         "subject": "trn2-a-0001", "datacontenttype": "application/json", "dryrun": False,
                         "data": first.advisories[0].document()}
        assert re.fullmatch(r"[0-9a-f]{16}-1", event["id"])

    async def test_only_changes_are_sent(self, receiver: Receiver) -> None:
        """The same advisory again is no event; a state change and a clearing are one each, in order."""
        sink = sink_for(receiver)
        a = advisory("n1", node_id=1, state="pending")
        assert [sink.offer(v) for v in (view(a), view(a), view(advisory("n1", node_id=1)), view())] == [1, 0, 1, 1]
        async with running(sink):
            await wait_until(lambda: sink.sent == 3, 10, "three events delivered")
        assert [(e["type"], e["subject"]) for e in receiver.events()] == [
            ("io.rainierd.action.pending", "n1"), ("io.rainierd.action.proposed", "n1"),
            ("io.rainierd.action.cleared", "n1")]

    async def test_the_brake_tripping_and_releasing_are_events(self, receiver: Receiver) -> None:
        """The brake tripping and releasing are one event each, with the brake's document."""
        sink = sink_for(receiver)
        tripped = view(brake=view().brake.__class__(max_nodes=2, max_fraction=0.1, window_s=60.0, under_action=2,
                                                    tripped=True, scope="fleet", since_s=5.0))
        for v in (view(), tripped, tripped, view()):
            sink.offer(v)
        async with running(sink):
            await wait_until(lambda: sink.sent == 2, 10, "two brake events delivered")
        assert [(e["type"], e["subject"], e["data"]["tripped"]) for e in receiver.events()] == [
            ("io.rainierd.brake.tripped", "_brake", True), ("io.rainierd.brake.released", "_brake", False)]

    async def test_a_dry_run_says_so(self, receiver: Receiver) -> None:
        """A dry run's events carry dryrun true, so an automation can refuse to act on them."""
        sink = sink_for(receiver)
        sink.offer(view(advisory("n1"), dry_run=True))
        async with running(sink):
            await wait_until(lambda: sink.sent == 1, 10, "the event delivered")
        assert receiver.events()[0]["dryrun"] is True


class TestRetries:
    async def test_5xx_and_429_are_retried_with_the_same_id(self, receiver: Receiver) -> None:
        """A 503 and a 429 are retried; the third attempt's 200 delivers the same event id."""
        receiver.statuses = [503, 429]
        sink = sink_for(receiver)
        sink.offer(view(advisory("n1")))
        async with running(sink):
            await wait_until(lambda: sink.sent == 1, 10, "the event delivered")
        assert len({e["id"] for e in receiver.events()}) == 1
        assert (len(receiver.requests), sink.retries, sink.failed) == (3, 2, 0)

    async def test_a_refusal_is_final(self, receiver: Receiver) -> None:
        """A 400 is not retried: the event counts as failed and the next one is sent."""
        receiver.statuses = [400]
        sink = sink_for(receiver)
        sink.offer(view(advisory("n1")))
        sink.offer(view(advisory("n1"), advisory("n2", node_id=2)))
        async with running(sink):
            await wait_until(lambda: sink.sent == 1, 10, "the second event delivered")
        assert (len(receiver.requests), sink.failed, sink.retries) == (2, 1, 0)

    async def test_attempts_are_bounded(self, receiver: Receiver) -> None:
        """An event that keeps failing is tried max_attempts times, then counted failed."""
        receiver.statuses = [500] * 10
        sink = sink_for(receiver, max_attempts=3)
        sink.offer(view(advisory("n1")))
        async with running(sink):
            await wait_until(lambda: sink.failed == 1, 10, "the event given up on")
        assert (len(receiver.requests), sink.retries, sink.sent) == (3, 2, 0)

    async def test_survives_the_receiver_down_then_back(self, receiver: Receiver) -> None:
        """With the receiver down, events queue (the oldest dropped beyond the bound, counted) and fail after
        their attempts; once it is back on its port, the next events are delivered."""
        port = receiver.port
        await receiver.stop()
        sink = sink_for(receiver, queue_size=3, max_attempts=2)
        async with running(sink):
            for i in range(10):
                sink.offer(view(*(advisory(f"n{j}", node_id=j) for j in range(i + 1))))
            await wait_until(lambda: sink.queue.qsize() == 0 and sink.failed + sink.queue.dropped == 10, 10,
                             "every event failed or dropped")
            assert sink.queue.dropped >= 10 - 3 - 1  # at most the bound waits, and one is in flight
            assert sink.sent == 0
            assert sink.errors == NO_ERRORS | {"connect": 2 * sink.failed}  # each attempt refused
            await receiver.start(port)
            sink.offer(view(*(advisory(f"n{j}", node_id=j) for j in range(11))))
            await wait_until(lambda: sink.sent == 1, 10, "the event after the outage delivered")
        assert [e["subject"] for e in receiver.events()] == ["n10"]


# Answers of broken or hostile receivers (issue 35): the first three each ended the monitor with a ValueError
# (int() of a Latin-1 superscript digit, readexactly(-1)), and so did a Content-Length of over 4,300 digits.
HOSTILE = {
    "content_length_superscript_two": b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n",
    "chunk_size_minus_one": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nabc\r\n0\r\n\r\n",
    "status_superscript_digits": b"HTTP/1.1 \xb2\xb2\xb2 OK\r\nContent-Length: 0\r\n\r\n",
    "content_length_of_5000_digits": b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5_000 + b"\r\n\r\n",
    "header_line_of_non_latin_bytes": "HTTP/1.1 200 OK\r\n見出し: 値\r\nContent-Length: 0\r\n\r\n".encode(),
    "negative_content_length": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
    "conflicting_content_lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
    "chunk_size_overflow": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 32 + b"\r\nx\r\n",
    "status_line_of_10_kb": b"HTTP/1.1 200 " + b"A" * 10_000 + b"\r\nContent-Length: 0\r\n\r\n",
}


class TestNeverEnds:
    @pytest.mark.parametrize("answer", HOSTILE.values(), ids=HOSTILE.keys())
    async def test_a_hostile_answer_is_counted_and_the_next_event_delivered(
            self, receiver: Receiver, answer: bytes) -> None:
        """A malformed answer is one error (reason http) and the event, out of attempts, failed; run() goes on
        and delivers the next event once the receiver behaves."""
        receiver.answers = [answer]
        sink = sink_for(receiver, max_attempts=1)
        sink.offer(view(advisory("n1")))
        async with running(sink) as task:
            await until(task, lambda: sink.failed == 1, "the hostile answer's event failed")
            sink.offer(view(advisory("n1"), advisory("n2", node_id=2)))
            await until(task, lambda: sink.sent == 1, "the next event delivered")
        assert (sink.errors, sink.failed, sink.sent) == (NO_ERRORS | {"http": 1}, 1, 1)
        assert [e["subject"] for e in receiver.events()] == ["n1", "n2"]

    async def test_a_malformed_answer_is_retried(self, receiver: Receiver) -> None:
        """A malformed answer is retried like a 5xx: the same event is delivered on the next attempt."""
        receiver.answers = [HOSTILE["chunk_size_minus_one"]]
        sink = sink_for(receiver)
        sink.offer(view(advisory("n1")))
        async with running(sink) as task:
            await until(task, lambda: sink.sent == 1, "the event delivered")
        assert (sink.errors, sink.retries, sink.failed) == (NO_ERRORS | {"http": 1}, 1, 0)
        assert len({e["id"] for e in receiver.events()}) == 1

    async def test_a_receiver_that_never_answers_is_a_timeout(self, receiver: Receiver) -> None:
        """An attempt the receiver never answers ends at timeout_s, counted under timeout."""
        receiver.hang = True
        sink = sink_for(receiver, max_attempts=1, timeout_s=0.2)
        sink.offer(view(advisory("n1")))
        async with running(sink) as task:
            await until(task, lambda: sink.failed == 1, "the event given up on")
        assert sink.errors == NO_ERRORS | {"timeout": 1}

    async def test_an_unexpected_exception_in_an_attempt_is_counted_and_retried(
            self, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
        """An exception no transport raises (a defect, injected into the client here) is counted internal and
        the attempt retried: the event is delivered."""
        real = webhook.request
        calls = 0

        async def broken_once(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise KeyError("a defect")
            return await real(*args, **kwargs)

        monkeypatch.setattr(webhook, "request", broken_once)
        sink = sink_for(receiver)
        sink.offer(view(advisory("n1")))
        async with running(sink) as task:
            await until(task, lambda: sink.sent == 1, "the event delivered")
        assert (sink.errors, sink.retries, sink.failed) == (NO_ERRORS | {"internal": 1}, 1, 0)

    async def test_a_defect_in_delivering_is_counted_backed_off_and_passed_over(
            self, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
        """An exception out of delivering an event (a defect, injected here) twice is counted internal, each
        event failed, run() backs off like a retry (doubling) and delivers the next event."""
        real = WebhookSink._deliver
        calls = 0

        async def broken_twice(self: WebhookSink, queued: Any) -> None:
            nonlocal calls
            calls += 1
            if calls <= 2:
                raise RuntimeError("a defect")
            await real(self, queued)

        class Top:  # the jitter's upper end, so the backoff shows
            @staticmethod
            def uniform(_low: float, high: float) -> float:
                return high

        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        monkeypatch.setattr(WebhookSink, "_deliver", broken_twice)
        sink = WebhookSink(WebhookConfig(url=f"http://127.0.0.1:{receiver.port}/", backoff_s=1.0, backoff_max_s=5.0),
                           rng=Top(), sleep=sleep)  # type: ignore[arg-type]
        for i in range(1, 4):
            sink.offer(view(*(advisory(f"n{j}", node_id=j) for j in range(i))))
        async with running(sink) as task:
            await until(task, lambda: sink.sent == 1, "the third event delivered")
        assert (sink.errors, sink.failed, sink.sent, waits) == (NO_ERRORS | {"internal": 2}, 2, 1, [1.0, 2.0])
        assert [e["subject"] for e in receiver.events()] == ["n2"]

    async def test_a_failing_episode_is_logged_once(self, receiver: Receiver) -> None:
        """Three malformed answers in a row make one warning naming the reason, and the next delivery one line
        saying it works again."""
        receiver.answers = [HOSTILE["status_superscript_digits"]] * 3
        sink = sink_for(receiver, max_attempts=1)
        with structlog.testing.capture_logs() as logs:
            async with running(sink) as task:
                for i in range(1, 5):
                    sink.offer(view(*(advisory(f"n{j}", node_id=j) for j in range(i))))
                await until(task, lambda: sink.sent == 1, "the fourth event delivered")
        assert [(e["event"], e.get("reason")) for e in logs] == [
            ("webhook delivery failing; counted and retried, later events are still tried", "http"),
            ("webhook delivering again", None)]
        assert (sink.errors["http"], sink.failed) == (3, 3)


class TestNeverBlocks:
    async def test_offer_returns_while_the_receiver_hangs_and_the_queue_stays_bounded(
            self, receiver: Receiver) -> None:
        """With the receiver holding the first request for ever, offering a thousand changes returns at once
        each time, the queue holds at most its bound and the rest are counted dropped."""
        receiver.hang = True
        sink = sink_for(receiver, queue_size=50, timeout_s=60.0)
        async with running(sink):
            sink.offer(view(advisory("n0")))
            await wait_until(lambda: receiver.connections == 1, 10, "the first event in flight")
            for i in range(1, 1_001):  # each offer is synchronous: the analysis never awaits the sink
                sink.offer(view(advisory(f"n{i}", node_id=i)))
            # Each view replaces the last node with a new one: two changes (a new one, a cleared one) each.
            assert (sink.queue.qsize(), sink.queue.dropped) == (50, 2_000 - 50)
            assert sink.status().queued == 50


class TestBackoff:
    async def test_waits_are_jittered_exponential_and_capped(self, receiver: Receiver) -> None:
        """Between attempts the sink waits a uniform draw up to backoff_s doubling each time, capped."""
        receiver.statuses = [500] * 10
        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        class Top:  # the jitter's upper end, so the schedule itself shows
            @staticmethod
            def uniform(_low: float, high: float) -> float:
                return high

        sink = WebhookSink(WebhookConfig(url=f"http://127.0.0.1:{receiver.port}/", max_attempts=6, backoff_s=1.0,
                                         backoff_max_s=5.0), rng=Top(), sleep=sleep)  # type: ignore[arg-type]
        sink.offer(view(advisory("n1")))
        async with running(sink):
            await wait_until(lambda: sink.failed == 1, 10, "the event given up on")
        assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]


class TestCredentials:
    async def test_the_bearer_token_is_sent_and_reread(self, receiver: Receiver, tmp_path: Path) -> None:
        """The token file's token is sent as a bearer token, and a rotated file's new token on the next event."""
        token = tmp_path / "token"
        token.write_text("s3cret-one\n")
        sink = sink_for(receiver, token_file=token)
        sink.offer(view(advisory("n1")))
        async with running(sink):
            await wait_until(lambda: sink.sent == 1, 10, "the first event delivered")
            token.write_text("s3cret-two")
            sink.offer(view(advisory("n1"), advisory("n2", node_id=2)))
            await wait_until(lambda: sink.sent == 2, 10, "the second event delivered")
        assert [h["authorization"] for h, _ in receiver.requests] == ["Bearer s3cret-one", "Bearer s3cret-two"]

    async def test_a_token_past_ascii_keeps_the_last_one(self, receiver: Receiver, tmp_path: Path) -> None:
        """A token file rotated to hold a character past ASCII (no bearer token; past Latin-1 it could not even
        be sent) keeps the last token, and the event is delivered with it."""
        token = tmp_path / "token"
        token.write_text("s3cret-one")
        sink = sink_for(receiver, token_file=token)
        async with running(sink) as task:
            token.write_text("s3cret-\u20ac", encoding="utf-8")
            sink.offer(view(advisory("n1")))
            await until(task, lambda: sink.sent == 1, "the event delivered")
        assert [h["authorization"] for h, _ in receiver.requests] == ["Bearer s3cret-one"]

    def test_an_unreadable_token_file_stops_the_start_without_its_content(self, tmp_path: Path) -> None:
        """A token file that is missing or holds a line break inside is a ConfigError naming the file only."""
        bad = tmp_path / "bad"
        bad.write_text("two\nlines")
        euro = tmp_path / "euro"
        euro.write_text("lines-\u20ac", encoding="utf-8")
        for path in (tmp_path / "missing", bad, euro):
            with pytest.raises(ConfigError, match="webhook_token_file") as info:
                WebhookSink(WebhookConfig(url="http://127.0.0.1:1/", token_file=path))
            assert "lines" not in str(info.value)

    def test_a_url_with_credentials_is_refused(self) -> None:
        """A URL holding a password is refused at start: it would be logged."""
        with pytest.raises(ConfigError, match="credentials"):
            WebhookSink(WebhookConfig(url="https://user:pw@example.com/hook"))

    async def test_https_with_the_configured_ca(self, tmp_path: Path) -> None:
        """Over https the receiver's certificate is checked against webhook_ca_file."""
        pki: Pki = make_pki(tmp_path)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pki.server_cert, pki.server_key)
        rx = Receiver(ssl_context=context)
        await rx.start()
        url = f"https://127.0.0.1:{rx.port}/"  # the test certificate names 127.0.0.1
        sink = WebhookSink(WebhookConfig(url=url, ca_file=pki.ca_cert, **FAST))
        untrusted = WebhookSink(WebhookConfig(url=url, **(FAST | {"max_attempts": 1})))
        for each in (sink, untrusted):
            each.offer(view(advisory("n1")))
        async with running(sink), running(untrusted):
            await wait_until(lambda: sink.sent == 1 and untrusted.failed == 1, 10, "one sent, one refused")
        await rx.stop()
        assert len(rx.requests) == 1
        assert untrusted.errors == NO_ERRORS | {"tls": 1}


class TestMetrics:
    def test_the_counters_are_exported(self) -> None:
        """The collector exports sent, failed, dropped, retries, the queue and the errors by reason (every reason
        from the start) as rainier_webhook_* families."""
        sink = WebhookSink(WebhookConfig(url="http://127.0.0.1:1/", queue_size=2))
        for i in range(3):
            sink.offer(view(*(advisory(f"n{j}", node_id=j) for j in range(i + 1))))
        sink.sent, sink.failed, sink.retries = 4, 1, 7
        sink.errors["http"], sink.errors["timeout"] = 2, 3
        registry = CollectorRegistry()
        registry.register(WebhookCollector(sink.status))
        values = {name: registry.get_sample_value(name) for name in (
            "rainier_webhook_events_sent_total", "rainier_webhook_events_failed_total",
            "rainier_webhook_events_dropped_total", "rainier_webhook_retries_total", "rainier_webhook_queue_events",
            "rainier_webhook_queue_capacity_events")}
        assert values == {"rainier_webhook_events_sent_total": 4.0, "rainier_webhook_events_failed_total": 1.0,
                          "rainier_webhook_events_dropped_total": 1.0, "rainier_webhook_retries_total": 7.0,
                          "rainier_webhook_queue_events": 2.0, "rainier_webhook_queue_capacity_events": 2.0}
        errors = {reason: registry.get_sample_value("rainier_webhook_errors_total", {"reason": reason})
                  for reason in ("timeout", "connect", "tls", "http", "internal")}
        assert errors == {"timeout": 3.0, "connect": 0.0, "tls": 0.0, "http": 2.0, "internal": 0.0}


class TestSettings:
    def test_every_webhook_setting_reaches_the_sink(self, tmp_path: Path) -> None:
        """The monitor's webhook sink is built from every webhook_* setting (Settings.webhook_config), its
        source naming the monitor."""
        from rainierd.daemon import _webhook  # noqa: PLC0415 - the daemon's wiring is what this pins
        from rainierd.settings import load_settings  # noqa: PLC0415

        token, ca = tmp_path / "token", tmp_path / "ca.pem"
        token.write_text("t")
        settings = load_settings({"webhook_url": "http://hooks.example:8080/in", "webhook_token_file": str(token),
                                  "webhook_ca_file": str(ca), "webhook_queue_size": "7",
                                  "webhook_max_attempts": "2", "webhook_timeout_s": "1.5"})
        expected = WebhookConfig(url="http://hooks.example:8080/in", token_file=token, ca_file=ca, queue_size=7,
                                 max_attempts=2, timeout_s=1.5, source="/rainierd/rainierd-monitor-1")
        assert settings.webhook_config(source="/rainierd/rainierd-monitor-1") == expected
        sink = _webhook(settings, "rainierd-monitor-1")
        assert sink is not None
        assert sink.config == expected
        assert load_settings({}).webhook_config(source="/rainierd/m") is None
        assert _webhook(load_settings({}), "rainierd-monitor-1") is None

    def test_a_bad_url_stops_the_start(self) -> None:
        """A webhook_url that is not http(s) is refused when the settings load, naming the setting."""
        from rainierd.settings import load_settings  # noqa: PLC0415

        with pytest.raises(ConfigError, match="webhook_url"):
            load_settings({"webhook_url": "ftp://hooks.example/"})
