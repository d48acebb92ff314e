"""The exceptions rainierd raises, all rooted in RainierdError.

::

    RainierdError
    ├── ConfigError      a setting or preset is invalid (the CLI exits 2)
    ├── FrameError       a telemetry frame was rejected; ``reason`` is a short
    │                    label counted in rainier_ingest_decode_errors_total
    ├── JobError         a job document (rainier/v1/jobs/…) or a scheduler's
    │                    output was refused; ``reason`` is a short label
    └── BrokerError      the embedded MQTT broker could not start

Transport errors from aiomqtt (``aiomqtt.MqttError``) are not wrapped: only the
supervisor loop that reconnects catches them.
"""

from __future__ import annotations

__all__ = ["BrokerError", "ConfigError", "FrameError", "JobError", "RainierdError"]


class RainierdError(Exception):
    """Base of every error rainierd raises on purpose."""


class ConfigError(RainierdError):
    """A setting, preset or scenario is invalid."""


class FrameError(RainierdError):
    """A frame was rejected; ``reason`` names why, as a metric label value."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class JobError(RainierdError):
    """A job document or a scheduler's output was refused; ``reason`` names why, as a label value."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class BrokerError(RainierdError):
    """The embedded broker failed to start or serve."""
