"""The EFA driver's hardware counters, as the kernel exposes them:
``<root>/class/infiniband/<device>/ports/1/hw_counters/<counter>``, one
integer a file.  The root is ``/sys`` on a node, a directory of samples in
tests.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["EFA_COUNTERS", "read_efa_counters"]

# The wire's EFA counter fields and the driver's files they come from (same names, plus _total).
EFA_COUNTERS: Final = (
    "tx_bytes", "rx_bytes", "retrans_bytes", "retrans_pkts", "retrans_timeout_events",
    "unresponsive_remote_events", "impaired_remote_conn_events",
)


def _natural(name: str) -> tuple[str, int, str]:
    """Sort ``rdmap96s0`` before ``rdmap112s0``: by the number in the name, not its characters."""
    m = re.match(r"^(\D*)(\d+)(.*)$", name)
    return (m[1], int(m[2]), m[3]) if m else (name, -1, "")


def read_efa_counters(root: Path) -> list[dict[str, int]]:
    """Return each EFA device's counters, devices in natural order of their names (port 0 first).

    A counter whose file is missing or unreadable is left out (unknown); a
    root with no EFA devices gives an empty list.
    """
    base = root / "class" / "infiniband"
    try:
        devices = sorted((d.name for d in base.iterdir() if d.name.startswith("rdmap") or d.name.startswith("efa")),
                         key=_natural)
    except OSError:
        return []
    out = []
    for device in devices:
        counters = base / device / "ports" / "1" / "hw_counters"
        values = {}
        for name in EFA_COUNTERS:
            try:
                values[name] = int((counters / name).read_text().strip())
            except (OSError, ValueError):
                continue
        out.append(values)
    return out
