"""File descriptors for the exporter's connections, with some kept back for
everything else the process opens.

A listening socket that anyone can connect to would otherwise spend every
descriptor the process has: at the common soft limit of 1,024, some 1,100
idle connections left none for the stream checkpoint (its writes failed with
EMFILE) or an MQTT reconnect.  So the exporter raises the soft
``RLIMIT_NOFILE`` to the hard limit (which needs no privilege), and caps its
connections at what is left after the descriptors already open and
``RESERVED_DESCRIPTORS`` more: the checkpoint's file and directory, the MQTT
socket, logs, a DNS lookup, a render thread.
"""

from __future__ import annotations

import os
import resource
from typing import Final

RESERVED_DESCRIPTORS: Final = 64
# The kernel refuses a soft limit above fs.nr_open (1,048,576 by default) even if the hard limit is unlimited.
_UNLIMITED_SOFT: Final = 1 << 20


def connection_budget(wanted: int, *, reserved: int = RESERVED_DESCRIPTORS) -> int:
    """Raise the soft descriptor limit as far as the hard limit allows and return how many connections
    (at most ``wanted``, at least 1) fit below it with ``reserved`` descriptors kept back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_SOFT if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # above fs.nr_open, or a sandbox that forbids it: keep what there is
            pass
    limit = _UNLIMITED_SOFT if soft == resource.RLIM_INFINITY else soft
    return max(1, min(wanted, limit - _open_descriptors() - reserved))


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: assume few are open
        return 16
