"""The configuration of ``rainierd jobs …``: one frozen value built once from
the settings (``Settings.jobs_config``), so the adapters' runner never reads
the settings whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rainierd.core import NameIndex

if TYPE_CHECKING:
    from rainierd.mqtt import MqttConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsConfig:
    """Which publisher it is, the fleet's names its jobs resolve against, and its broker."""

    source: str  # its name in its documents: it removes only its own
    index: NameIndex
    mqtt: MqttConfig
