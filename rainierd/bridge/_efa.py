"""The EFA driver's counters, read from sysfs: the bridge's only file I/O.

Where the Linux EFA driver puts them (drivers/infiniband/hw/efa/efa_verbs.c,
in the kernel and in amzn/amzn-drivers kernel/linux/efa/src/efa_verbs.c;
the RDMA core's sysfs layout publishes each ``rdma_stat_desc`` as one file
holding one decimal integer):

- port counters, ``EFA_DEFINE_PORT_STATS``:
  ``<root>/class/infiniband/<device>/ports/1/hw_counters/<name>``
  (``tx_bytes``, ``rx_bytes``, ``rx_drops``, ``rdma_read_wr_err``,
  ``rdma_write_wr_err``, ``retrans_bytes``, ``retrans_pkts``,
  ``retrans_timeout_events``, ``unresponsive_remote_events``,
  ``impaired_remote_conn_events``, …);
- device counters, ``EFA_DEFINE_DEVICE_STATS``:
  ``<root>/class/infiniband/<device>/hw_counters/keep_alive_rcvd``
  (keep-alive messages the driver received from the device);
- the port's state, ``<root>/class/infiniband/<device>/ports/1/state``
  (``4: ACTIVE``).  ``efa_query_port`` reports ``IB_PORT_ACTIVE`` whatever
  the link is doing, so it says the driver holds the port, not that the
  link is up.

``root`` is ``/sys`` on a node and a directory tree in tests.  Devices are
named by PCI address (``rdmap16s0``), not by chip; which port id each name
is, is ``_ports``'s business.  A counter whose file is missing (an older
driver has no ``rx_drops``) is absent, not zero; one that does not hold a
decimal integer is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from rainierd.bridge._ports import EfaDevice, EfaSnapshot

PORT_COUNTERS: Final = (
    "tx_bytes", "rx_bytes", "retrans_bytes", "retrans_pkts", "retrans_timeout_events",
    "unresponsive_remote_events", "impaired_remote_conn_events", "rx_drops", "rdma_read_wr_err",
    "rdma_write_wr_err",
)
DEVICE_COUNTERS: Final = ("keep_alive_rcvd",)
_PREFIXES: Final = ("rdmap", "efa")  # how the driver's devices are named (rdmap<bus>s<slot>), without a map
_MAX_TEXT: Final = 64  # a u64 in decimal is 20 characters; a counter file is never longer


def _read(path: Path) -> str | None:
    """Return a sysfs file's text, None if it cannot be read."""
    try:
        with path.open("rb") as file:
            return file.read(_MAX_TEXT).decode("ascii", "replace").strip()
    except OSError:
        return None


def _counter(path: Path) -> int | str | None:
    """Return a counter file's value, ``"wrong_type"`` if it holds no decimal integer, None if it is absent."""
    text = _read(path)
    if text is None:
        return None
    return int(text) if text.isascii() and text.isdigit() else "wrong_type"


def _names(base: Path) -> list[str] | None:
    """Return the EFA devices under ``base`` (None when it cannot be listed)."""
    try:
        return [entry.name for entry in base.iterdir() if entry.name.startswith(_PREFIXES)]
    except OSError:
        return None


def read_efa(root: Path, *, names: Sequence[str] | None = None,
             clock: Callable[[], float] = time.monotonic) -> EfaSnapshot:
    """Return the counters of the EFA devices ``names`` (None: every device named like one) that exist."""
    base = root / "class" / "infiniband"
    found = _names(base)
    if found is None:
        return EfaSnapshot({}, clock(), listed=False)
    devices: dict[str, EfaDevice] = {}
    for name in found if names is None else names:
        device = base / name
        if not device.is_dir():
            continue
        port = device / "ports" / "1"
        counters: dict[str, int | str] = {}
        for counter in PORT_COUNTERS:
            if (value := _counter(port / "hw_counters" / counter)) is not None:
                counters[counter] = value
        for counter in DEVICE_COUNTERS:
            if (value := _counter(device / "hw_counters" / counter)) is not None:
                counters[counter] = value
        devices[name] = EfaDevice(counters, _read(port / "state"))
    return EfaSnapshot(devices, clock())
