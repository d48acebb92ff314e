"""Admission before decoding, for every receiver of telemetry (the monitor's
inbox, an aggregator): each message's header read, and each charged to the
share of whoever it comes from, so garbage or a flood costs its sender alone
(``_admission``); the shares themselves, per topic and tick (``_shares``).

Pure and O(1) a message: no I/O, no clock of its own (the caller hands in
its monotonic and receive clocks), no knowledge of the core; what it knows
of the streams (``Confirmed``) its caller builds from its own accounting.
"""

from __future__ import annotations

from rainierd.admission._admission import Admission, Confirmed, Fate, StreamsView
from rainierd.admission._quota import BURST_TICKS, SharePolicy, Shares

__all__ = ["BURST_TICKS", "Admission", "Confirmed", "Fate", "SharePolicy", "Shares", "StreamsView"]
