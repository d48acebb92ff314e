"""What goes into admission and what one window gives back: plain frozen values,
so the window can be admitted off the event loop and its result handed back."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from rainierd._types import F64, I64
from rainierd.wire import Frame, RawBatch, TopicAddress


@dataclass(frozen=True, slots=True)
class Message:
    """One MQTT message as received: when (listening clock, and receive clock), where, what.

    ``rx_wall_s`` is on the monitor's receive clock: wall seconds, but moved on by the monotonic clock only
    (``monitor/inbox.py``), so a step of the monitor's own clock never shows as a change of every receive lag.
    """

    rx_s: float
    topic: str
    payload: bytes
    rx_wall_s: float = float("nan")
    # Messages of this topic the monitor itself refused (over their share) since the last it kept: each held
    # one frame of every node the topic carries, so the next frame's seq may lead by that many more.
    shed: int = 0


@dataclass(frozen=True, slots=True)
class Received:
    """One decoded frame (or a batch whose header alone is decoded), when it was received and the topic it came on."""

    rx_s: float
    address: TopicAddress | None
    frame: Frame | RawBatch
    rx_wall_s: float = float("nan")
    shed: int = 0  # Message.shed


@dataclass(frozen=True, eq=False)
class FlushResult:
    """What one window applied, rejected (by reason) and found missing."""

    applied: int
    rejected: Counter[str]
    lost: int = 0
    publisher_changes: int = 0
    latest_tick: int = -1
    frames: Counter[str] = field(default_factory=Counter)  # decoded, by encoding
    applied_t_s: F64 = field(default_factory=lambda: np.zeros(0))  # sample times of the frames applied
    # Wall time at receipt minus sample time, of the frames applied (a publisher's clock skew included).
    receive_lag_s: F64 = field(default_factory=lambda: np.zeros(0))
    samples: Counter[str] = field(default_factory=Counter)  # entity samples applied, by record kind
    late: int = 0  # frames that were missing and arrived after all (never lost, not applied)
    restarts: int = 0  # a publisher restarted under the same id
    missing: int = 0  # frames missing after this window (may still come late; not yet lost)
    # Receive lag above each applied node frame's own stream's floor (core/streams.py), and that frame's node:
    # what queueing before the monitor adds, whatever the publishers' clocks say.
    receive_excess_s: F64 = field(default_factory=lambda: np.zeros(0))
    receive_entity: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    streams_heard: int = 0  # node streams with a frame that passed the rules in the window
    # Counters of applied samples refused over their physical or exactness bound (core/bounds.py): their rate is
    # unknown and their increase summed nowhere; by (kind, field, reason).
    refused: Counter[tuple[str, str, str]] = field(default_factory=Counter)
