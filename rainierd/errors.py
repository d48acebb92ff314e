"""The exceptions rainierd raises, all rooted in RainierdError.

::

    RainierdError
    ├── ConfigError        a setting or preset is invalid (the CLI exits 2)
    ├── FrameError         a telemetry frame was rejected; ``reason`` is a short
    │                      label counted in rainier_ingest_decode_errors_total
    ├── JobError           a job document (rainier/v1/jobs/…) or a scheduler's
    │                      output was refused; ``reason`` is a short label
    ├── BrokerError        the embedded MQTT broker could not start
    │   ── defined beside what raises them, rooted here ──
    ├── CheckpointError    monitor/checkpoint_file.py: a stream checkpoint that
    │                      cannot be read back is refused whole
    ├── LearnedStateError  core/learned.py: a learned-state file refused whole
    ├── LedgerError        actions/ledger.py: a repeat-offender ledger refused
    │                      (also a ValueError, as JSON's own errors are)
    ├── ApiError           api/_common.py: a read-API request refused (4xx)
    ├── HttpError          http/client.py: a response that is not HTTP/1.x
    ├── SourceError        top/source.py: a monitor that did not answer
    ├── BadAnswerError     top/answers.py: an answer that breaks the schema
    └── SchemaError        top/answers.py: a packaged schema it cannot compile

Transport errors from aiomqtt (``aiomqtt.MqttError``) are not wrapped: only the
supervisor loop that reconnects catches them.  A handful of private errors
(``_ProtocolError`` in the embedded broker, ``_DuplicateKeyError`` in the JSON
decoder, ...) never leave the module that raises them.
"""

from __future__ import annotations


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
