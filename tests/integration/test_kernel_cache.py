"""numba, and the core's compiled kernels, load only in a process that
builds detectors (rainierd/core/detect/_kernels.py): a health check run every
few seconds, a simulator or ``--help`` pays neither the import nor the cache."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_does_not_import_numba() -> None:
    """Importing the command line (every role's entry) leaves numba unimported."""
    code = "import sys, rainierd.cli; sys.exit('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=60).returncode == 0


def test_building_a_monitor_loads_every_kernel_once() -> None:
    """A monitor's core holds each kernel's one signature as soon as it is built, before any tick."""
    code = ("from rainierd.core.analysis import MonitorCore; from rainierd.core.config import MonitorConfig; "
            "from rainierd.core.kernels import compiled; from rainierd.topology import build_topology; "
            "MonitorCore(build_topology('demo'), MonitorConfig()); "
            "import sys; sys.exit(set(compiled().values()) != {1})")
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=300).returncode == 0
