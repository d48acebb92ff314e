"""EFA devices by name, as the node's EFA port records.  Pure: snapshots in
(``_efa``), records out; the state is the name → port map and each
counter's running total.

**The map.**  The driver names devices by PCI address, and a listing's
order is no identity: numbered by position, a vanished device hands its
successors' counters to the wrong ports (jumps, counters going backwards)
and nothing says it is gone.  So each name is mapped to a port once, by
this rule, and never again:

1. the inventory's ``efa_devices`` for the node, in port order, when it
   lists them (``rainierd/fleet/inventory.py``);
2. else the natural order of the names seen in the first snapshot that has
   any (``rdmap16s0`` before ``rdmap112s0``), at most the node's
   ``efa_ports_per_node``, frozen.

Port ``k`` of node ``n`` is ``n * efa_ports_per_node + k``.  A mapped name
absent from a later snapshot (gone, or renamed) is that port
``present: false``, its neighbours untouched; a name not in the map is
counted, never given a port.

**The counters.**  Each driver counter becomes a wire ``*_total`` that
only grows: a counter that goes backwards is a reset (the device was reset
or the driver reloaded), after which its new value is what was counted
since, so it is added and the reset counted.  ``rdma_wr_errors_total`` is
``rdma_read_wr_err + rdma_write_wr_err``, ``keep_alive_total`` the device's
``keep_alive_rcvd``, ``port_active`` whether the state reads ``ACTIVE``.
Bytes that grew faster than the port's line rate times the margin over the
time between two reads are refused and counted; the total does not take
them (the counter's new value becomes the base), so one impossible reading
costs that reading only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rainierd.bridge._config import BridgeConfig
from rainierd.bridge._totals import CumulativeTotal
from rainierd.bridge._values import Refusals

# Wire field -> the driver counters it sums.
EFA_WIRE_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "tx_bytes_total": ("tx_bytes",),
    "rx_bytes_total": ("rx_bytes",),
    "retrans_bytes_total": ("retrans_bytes",),
    "retrans_pkts_total": ("retrans_pkts",),
    "retrans_timeout_events_total": ("retrans_timeout_events",),
    "unresponsive_remote_events_total": ("unresponsive_remote_events",),
    "impaired_remote_conn_events_total": ("impaired_remote_conn_events",),
    "rx_drops_total": ("rx_drops",),
    "rdma_wr_errors_total": ("rdma_read_wr_err", "rdma_write_wr_err"),
    "keep_alive_total": ("keep_alive_rcvd",),
}
_BYTES: Final = frozenset({"tx_bytes", "rx_bytes", "retrans_bytes"})
_U64: Final = 2**64
_STATE: Final = re.compile(r"([0-9]+): ([A-Z_]+)")
_STATES: Final = frozenset({"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"})  # ib_port_state names


@dataclass(frozen=True, slots=True)
class EfaDevice:
    """One EFA device's counters as read: an int, or the reason it was refused (``wrong_type``)."""

    counters: Mapping[str, int | str] = field(default_factory=dict)
    state: str | None = None  # the port's state as the file says it (None: unreadable)


@dataclass(frozen=True, slots=True)
class EfaSnapshot:
    """Every EFA device read at once."""

    devices: Mapping[str, EfaDevice]
    read_s: float  # when, on the monotonic clock: what a port's byte rate is judged over
    # False: the devices' directory could not be listed (no EFA driver, sysfs not mounted): every port unknown,
    # rather than every port gone.
    listed: bool = True


def natural_order(names: Sequence[str]) -> list[str]:
    """Return ``names`` sorted by the numbers in them as numbers (``rdmap96s0`` before ``rdmap112s0``)."""
    def key(name: str) -> list[tuple[int, int | str]]:
        return [(0, int(part)) if part.isascii() and part.isdigit() else (1, part)
                for part in re.split(r"([0-9]+)", name) if part]
    return sorted(names, key=key)


@dataclass(eq=False)
class _Port:
    """One mapped device's counters since the bridge started."""

    totals: dict[str, CumulativeTotal] = field(default_factory=dict)
    read_s: float | None = None


class EfaPorts:
    """The node's EFA devices by name, as port records (see the module docstring)."""

    def __init__(self, *, first_port: int, config: BridgeConfig) -> None:
        self.first_port, self.config = first_port, config
        self.names: tuple[str, ...] | None = (config.efa_devices[: config.efa_ports_per_node]
                                              if config.efa_devices else None)
        self._ports: dict[str, _Port] = {}
        self.resets: Counter[str] = Counter()
        self.seen = 0  # devices in the last snapshot
        self.missing = 0  # mapped names absent from it
        self.unmapped = 0  # names in it without a port

    def records(self, snapshot: EfaSnapshot, refusals: Refusals) -> list[dict[str, Any]]:
        """Return the port records of ``snapshot`` (freezing the map on the first that has devices); none when
        the snapshot could not list the devices."""
        if not snapshot.listed:
            self.seen = self.missing = self.unmapped = 0
            return []
        if self.names is None and snapshot.devices:
            self.names = tuple(natural_order(list(snapshot.devices))[: self.config.efa_ports_per_node])
        names = self.names or ()
        self.seen = len(snapshot.devices)
        self.missing = sum(name not in snapshot.devices for name in names)
        self.unmapped = len(set(snapshot.devices) - set(names))
        return [self._record(k, name, snapshot, refusals) for k, name in enumerate(names)]

    def _record(self, k: int, name: str, snapshot: EfaSnapshot, refusals: Refusals) -> dict[str, Any]:
        """Return port ``k``'s record from device ``name`` in ``snapshot``."""
        record: dict[str, Any] = {"port": self.first_port + k}
        device = snapshot.devices.get(name)
        if device is None:
            record["present"] = False
            return record
        port = self._ports.setdefault(name, _Port())
        dt_s = None if port.read_s is None else snapshot.read_s - port.read_s
        port.read_s = snapshot.read_s
        totals: dict[str, int] = {}
        for counter, value in device.counters.items():
            if isinstance(value, str):
                refusals.add(counter, value)
                continue
            total = port.totals.setdefault(counter, CumulativeTotal(limit=_U64))
            if counter in _BYTES and dt_s is not None and \
                    total.increase(value) > self.config.port_bytes_s_bound * max(dt_s, 0.0):
                refusals.add(counter, "above_line_rate")
                total.rebase(value)
                continue
            resets = total.resets
            if not total.observe(value):
                refusals.add(counter, "too_large")
                continue
            if total.resets > resets:
                self.resets[counter] += 1
            totals[counter] = total.value
        for wire, sources in EFA_WIRE_FIELDS.items():
            if all(source in totals for source in sources):
                value = sum(totals[source] for source in sources)
                if value < _U64:
                    record[wire] = value
        if device.state is not None:
            match = _STATE.fullmatch(device.state)
            if match is not None and match[2] in _STATES:
                record["port_active"] = match[2] == "ACTIVE"
            else:
                refusals.add("state", "wrong_type")
        record["present"] = True
        return record
