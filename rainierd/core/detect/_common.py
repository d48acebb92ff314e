"""What every detector needs from the state: which entities have a new sample
since the last analysis, and how much a counter moved over the last interval."""

from __future__ import annotations

from enum import IntFlag

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, U32, B
from rainierd.core.detect._stats import PeerSample
from rainierd.core.state import Table


class Reason(IntFlag):
    """Why an entity is unhealthy (a bitmask; several may hold)."""

    LANES = 1
    BANDWIDTH = 2
    ERRORS = 4
    LATENCY = 8
    RETRANSMITS = 16
    FLAPPING = 32
    DOWN = 64
    UNRESPONSIVE = 128
    THROTTLE_FLAG = 256
    CLOCK = 512
    EFFICIENCY = 1024
    ECC_UNCORRECTED = 2048
    SILENT = 4096
    INLET = 8192
    FANS = 16384
    TEMPERATURE = 32768
    LOSS_RATE = 65536  # retransmits above the fleet's background over minutes (slow packet loss)
    FEED_LOST = 131072  # most of the nodes heard fell silent together: the transport's loss (detect/feed.py)
    EFA_NODE_SLOW = 262144  # every EFA port of a node far under its peers' traffic (detect/nodepaths.py)
    NEURONLINK_NODE_SLOW = 524288  # every NeuronLink of a node far under its peers' (detect/nodepaths.py)
    UTILISATION = 1 << 20  # a chip's utilisation collapsed while its peers stay busy (detect/chip_peers.py)
    SRAM_ECC_UNCORRECTED = 1 << 21  # an uncorrectable ECC error in a chip's on-chip SRAM
    EXEC_ERRORS = 1 << 22  # a chip's executions keep failing (detect/chip_errors.py)
    EXEC_TIMEOUTS = 1 << 23  # a chip's executions keep outrunning the runtime's timeout (detect/chip_errors.py)
    ABSENT = 1 << 24  # the node's agent reports the device gone (``present`` 0)
    RX_DROPS = 1 << 25  # an EFA port keeps dropping received packets (detect/efa_driver.py)
    RDMA_WR_ERRORS = 1 << 26  # an EFA port's RDMA work requests keep completing in error (detect/efa_driver.py)
    KEEP_ALIVE = 1 << 27  # an EFA device present but no longer sending its driver keep-alives (detect/efa_driver.py)
    # A node slow against its peers whose own traffic fell too, under its usual level (detect/nodepaths.py): its
    # own evidence, not only its peers' (actions/policy.py acts on a node's paths only with it).
    OWN_DROP = 1 << 28


def reason_names(mask: int) -> list[str]:
    """Return the lower-case names of the reasons set in ``mask``."""
    return [str(r.name).lower() for r in Reason if mask & r]


def flag(reasons: npt.NDArray[np.int32], mask: B, reason: Reason) -> None:
    """Set ``reason`` in ``reasons`` where ``mask``, in place (one pass, no temporary)."""
    np.bitwise_or(reasons, np.int32(reason), out=reasons, where=mask)


def new_samples(table: Table, seen: U32) -> B:
    """Return which entities got a sample since ``seen`` (their sample count then), with an interval to diff."""
    return (table.samples > seen) & np.isfinite(table.dt_s)


def counter_delta(table: Table, field: str, *also: str) -> F32:
    """Return how much a counter (plus ``also``) moved over each entity's last interval (NaN: unknown, or reset)."""
    moved = np.array(table.rates[field], dtype=np.float32)
    for other in also:
        moved += table.rates[other]
    moved *= table.dt_s
    return moved



def typical_interval(dt_s: F32, fresh: B, sample: PeerSample, period_s: float | None = None) -> float | None:
    """Return the fresh entities' median interval in seconds (on ``sample``), at most ``period_s`` (the streams'
    typical period, ``Cadence.typical_s``) when known; None with none known."""
    picked = sample.pick(dt_s)[sample.pick(fresh)]
    picked = picked[np.isfinite(picked) & (picked > 0)]
    typical = float(np.median(picked)) if picked.size else None
    if typical is not None and period_s is not None:
        typical = min(typical, period_s)
    return typical


def persistence_seconds(dt_s: F32, fresh: B, sample: PeerSample, period_s: float | None = None) -> F32:
    """Return each entity's interval as persistence counts it: at most the fresh entities' median interval, and at
    most the streams' typical period ``period_s`` when known.

    One sample after a gap (a node back from silence) is one observation,
    not a minute of agreeing ones.  The period bounds it too: after a silence
    the whole fleet shared (a broker outage the monitor came back from after
    its publishers), every fresh interval is the outage, and the median alone
    let that one sample count as ten seconds of learning and evidence.
    """
    typical = typical_interval(dt_s, fresh, sample, period_s)
    if typical is None:
        return dt_s
    return np.minimum(dt_s, np.float32(typical))
