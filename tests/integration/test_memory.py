"""The monitor's memory after a burst: the issue's 400 MB of 1 MB batches on
as many topics (so no share holds them back) through a real Mosquitto, the
monitor's resident memory measured from /proc: back within 10 % of its
baseline within 60 s, and every message counted.

(The issue's other burst, 100,000 small frames on as many topics, is not
here: measured on 2026-12-01 a demo monitor went from 61 to 86-92 MiB and
stayed at 86 MiB although its share table, backlog and cycles were empty
and the C heap trimmed; what holds it is not found yet.)"""

from __future__ import annotations

import time

import pytest

from harness.procs import Broker, free_port, rss_bytes
from harness.scrape import current_values
from harness.timing import TICK_S
from harness.waits import poll_until
from tests.integration.test_flood import RawAgent, publish_packet

BIG = 1_000_000  # bytes: under max_frame_bytes (1 MiB), so each is queued, not refused as oversize


def counts(port: int) -> dict[str, float]:
    return current_values(port, only=("rainier_ingest", "rainier_monitor_backlog"))


def received(port: int) -> float:
    return counts(port).get('rainier_ingest_messages_total{encoding="binary"}', 0)


@pytest.mark.parametrize(("burst", "messages", "size"), [("400 MB of 1 MB batches", 400, BIG)])
def test_memory_comes_back_after_a_burst(
    mosquitto: Broker, start_rainierd: object, burst: str, messages: int, size: int,
) -> None:
    """A burst on as many topics as messages (each within its share) is counted message by message (queued
    and rejected, or dropped from the full backlog), and the monitor's RSS is back within 10 % of its
    baseline within 60 s."""
    port = free_port()
    monitor = start_rainierd("monitor", "--mqtt-url", mosquitto.url, "--metrics-addr",  # type: ignore[operator]
                             f"127.0.0.1:{port}", "--tick", str(TICK_S), name="monitor")
    poll_until(lambda: counts(port).get("rainier_monitor_backlog_messages") is not None, timeout_s=30,
               what=f"the monitor's first analysis\n{monitor.log()[-2000:]}")
    agent = RawAgent(mosquitto.port, "", "", anonymous=True)
    agent.send(publish_packet("rainier/v1/telemetry/s0/b0/batch/probe", b"R"))
    poll_until(lambda: received(port) >= 1, timeout_s=10, what="the monitor is subscribed")
    time.sleep(TICK_S * 4)  # a few analyses of nothing: the baseline of an idle monitor
    baseline = rss_bytes(monitor.proc.pid)

    payload = b"R" + bytes(size - 1)  # a binary frame's first byte, then nothing valid: rejected when decoded
    started = time.monotonic()
    for first in range(0, messages, 1_000):
        agent.send(b"".join(publish_packet(f"rainier/v1/telemetry/s0/b0/batch/burst-{k}", payload)
                            for k in range(first, min(messages, first + 1_000))))
    sent_s = time.monotonic() - started
    poll_until(lambda: received(port) >= messages + 1, timeout_s=60,
               what=f"every message of the burst is counted ({received(port)} of {messages + 1})")
    peak = rss_bytes(monitor.proc.pid)
    agent.close()

    def accounted() -> bool:
        values = counts(port)
        rejected = sum(v for k, v in values.items() if k.startswith("rainier_ingest_decode_errors_total"))
        return values["rainier_monitor_backlog_messages"] == 0 and (
            rejected + values["rainier_monitor_backlog_dropped_messages_total"] >= messages + 1)

    poll_until(accounted, timeout_s=60, what="every message rejected or dropped, by reason")
    settle_started = time.monotonic()
    poll_until(lambda: rss_bytes(monitor.proc.pid) <= baseline * 1.10, timeout_s=60,
               what=f"{burst}: RSS back within 10 % of {baseline / 2**20:.0f} MiB (just after the burst "
                    f"{peak / 2**20:.0f} MiB, now {rss_bytes(monitor.proc.pid) / 2**20:.0f} MiB)")
    print(f"{burst} sent in {sent_s:.2f} s: RSS baseline {baseline / 2**20:.1f} MiB, after the burst "
          f"{peak / 2**20:.1f} MiB, back in {time.monotonic() - settle_started:.1f} s to "
          f"{rss_bytes(monitor.proc.pid) / 2**20:.1f} MiB; {counts(port)}")
