"""rainierd: telemetry and reliability monitoring for AWS Trainium2 fleets.

The package simulates a fleet (``rainierd.sim``), carries its telemetry over
MQTT (``rainierd.wire``, ``rainierd.mqtt``), analyses it with a pure numpy
core (``rainierd.core``) and exports the results to Prometheus
(``rainierd.exporter``).  ``rainierd.cli`` is the command line.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
