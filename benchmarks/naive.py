"""The baseline a user might write first, to measure rainierd's design against:
one JSON message per chip and tick, decoded one at a time, and one
prometheus-client Gauge child per chip and metric.

``python -m benchmarks.naive publish PORT CHIPS TICK_S SECONDS`` publishes
(raw paho in a background thread, as fast as it can go, so the publisher is
not what limits the measurement); ``python -m benchmarks.naive monitor
PORT METRICS_PORT`` subscribes with aiomqtt and exports
``naive_messages_total`` and ``naive_lag_seconds_sum`` next to its gauges.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Final

import aiomqtt
import numpy as np
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from prometheus_client import Counter, Gauge, start_http_server

__all__ = ["monitor", "publish"]

_METRICS: Final = ("util", "clock_ratio", "temp_c", "power_w", "fp8_flop_total")


def publish(port: int, chips: int, tick_s: float, seconds: float) -> None:
    """Publish one JSON message per chip every tick for ``seconds``; print what was sent."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="naive-publisher")
    client.connect("127.0.0.1", port)
    client.loop_start()
    rng = np.random.default_rng(0)
    flop = np.zeros(chips)
    start = time.monotonic()
    sent = late = 0
    tick = 0
    while time.monotonic() - start < seconds:
        t_s = time.time()
        util = rng.uniform(0.55, 0.7, chips)
        flop += util * 1.299e15 * tick_s
        for chip in range(chips):
            body = {"chip": chip, "t_s": t_s, "util": util[chip], "clock_ratio": 1.0, "temp_c": 60.0 + util[chip],
                    "power_w": 400.0, "fp8_flop_total": flop[chip]}
            client.publish(f"naive/{chip}", json.dumps(body), qos=0)
        sent += chips
        tick += 1
        delay = start + tick * tick_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            late += 1
    client.loop_stop()
    client.disconnect()
    print(json.dumps({"sent": sent, "ticks": tick, "late_ticks": late}))


async def monitor(port: int, metrics_port: int) -> None:
    """Subscribe, decode each message, and set one Gauge child per chip and metric, until killed."""
    gauges = {name: Gauge(f"naive_chip_{name}", f"Chip {name}.", ["chip"]) for name in _METRICS}
    messages = Counter("naive_messages", "Messages processed.")
    lag = Counter("naive_lag_seconds_sum", "Sum of (processed time - sample time).")
    start_http_server(metrics_port, addr="127.0.0.1")
    async with aiomqtt.Client("127.0.0.1", port, identifier="naive-monitor",
                              max_queued_incoming_messages=1_000_000) as client:
        await client.subscribe("naive/#")
        async for message in client.messages:
            body = json.loads(message.payload)
            chip = str(body["chip"])
            for name in _METRICS:
                gauges[name].labels(chip).set(body[name])
            messages.inc()
            lag.inc(time.time() - body["t_s"])


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "publish":
        publish(int(args[0]), int(args[1]), float(args[2]), float(args[3]))
    else:
        asyncio.run(monitor(int(args[0]), int(args[1])))
