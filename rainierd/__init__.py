"""rainierd: telemetry and reliability monitoring for AWS Trainium2 fleets.

The package simulates a fleet (``rainierd.sim``), carries its telemetry over
MQTT (``rainierd.wire``, ``rainierd.mqtt``), analyses it with a pure numpy core
(``rainierd.core``), exports the results to Prometheus (``rainierd.exporter``)
and serves them, with a read API (``rainierd.api``), over HTTP
(``rainierd.http``).  ``rainierd.fleet`` is the fleet's vocabulary and
``rainierd.runtime`` what every process runs on; ``rainierd.cli`` is the command
line.  docs/architecture.md draws the house.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
