"""rainierd's settings: defaults, then an optional TOML file, then environment
variables ``RAINIERD_*``, then command-line flags, each overriding the last.

Validation happens here, once, so a bad value stops the process at start with
one line naming the setting (the CLI exits 2), never later in a task.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from rainierd.core.config import MonitorConfig
from rainierd.errors import ConfigError
from rainierd.hardware import TRN2
from rainierd.inventory import load_inventory
from rainierd.topology import parse_topology

__all__ = ["DEFAULT_METRICS_ADDR", "Settings", "load_settings", "parse_host_port"]

DEFAULT_METRICS_ADDR = "127.0.0.1:9780"


def parse_host_port(value: str, *, default_port: int | None = None) -> tuple[str, int]:
    """Return (host, port) of ``host:port`` or ``[v6]:port``.

    Raises ValueError with a message that says what is wrong.
    """
    parts = urlsplit(f"//{value}")
    try:
        port = parts.port if parts.port is not None else default_port
    except ValueError:
        raise ValueError(f"{value!r} has no valid port") from None
    if not parts.hostname or port is None:
        raise ValueError(f"{value!r} is not host:port")
    return parts.hostname, port


class Settings(BaseSettings):
    """Every setting of every role; see README.md "Configuration"."""

    model_config = SettingsConfigDict(env_prefix="RAINIERD_", extra="forbid", frozen=True)

    mqtt_url: str | None = Field(
        None, description="mqtt://host:port or mqtts://host:port; `run` without it embeds a broker"
    )
    mqtt_username: str | None = None
    mqtt_password: SecretStr | None = None
    mqtt_ca_file: Path | None = None
    mqtt_cert_file: Path | None = None
    mqtt_key_file: Path | None = None
    mqtt_client_id: str | None = Field(None, max_length=64)
    mqtt_qos: Literal[0, 1] = 0
    mqtt_protocol: Literal["3.1.1", "5"] = Field(
        "5", description="MQTT protocol version; 3.1.1 for brokers without MQTT 5 (NATS)",
    )
    mqtt_keepalive_s: int = Field(30, ge=5, le=3600)
    topology: str = "demo"
    efa_ports_per_node: int = Field(16, ge=1, le=64)
    tick_s: float = Field(1.0, gt=0.0, le=3600.0)
    ticks: int = Field(0, ge=0, description="stop the simulator after this many ticks; 0 runs forever")
    seed: int = Field(0, ge=0)
    encoding: Literal["binary", "json"] = "binary"
    batch_nodes: int = Field(
        128, ge=0, le=4_096,
        description="simulator: nodes per batch frame (binary only; 0 publishes one frame per node)",
    )
    scenario: Path | None = Field(None, description="TOML fault scenario for the simulator (docs/scenarios.md)")
    fault_acceleration: float = Field(
        0.0, ge=0.0, le=1e9, description="random faults at the calibrated rates times this; 0 injects none",
    )
    noise: float = Field(1.0, ge=0.0, le=10.0, description="simulator telemetry noise, 1 = default")
    time_scale: float = Field(1.0, gt=0.0, le=1e6, description="simulated seconds per tick second (diurnal cycle)")
    profile: Literal["ideal", "realistic"] = Field(
        "ideal", description="simulator telemetry profile: ideal, or realistic (docs/simulator-profiles.md)")
    truth_file: Path | None = Field(None, description="simulator: write ground truth here (JSON lines)")
    metrics_addr: str = DEFAULT_METRICS_ADDR
    web_config_file: Path | None = Field(
        None, description="exporter: TLS and basic auth, an exporter-toolkit web config (docs/exporter-security.md); "
        "read when the exporter starts",
    )
    stale_after_ticks: int = Field(3, ge=1, le=1000)
    max_frame_bytes: int = Field(1_048_576, ge=1_024, le=64 * 2**20)
    max_clock_skew_s: float = Field(
        300.0, gt=0.0, le=86_400.0,
        description="monitor: a frame whose sample time is further than this from the monitor's clock is rejected",
    )
    reconnect_grace_s: float = Field(
        20.0, ge=0.0, le=3_600.0,
        description="monitor: after (re)connecting, judge no silence for this long while publishers reconnect "
                    "(rainierd's clients back off up to 15 s)",
    )
    state_file: Path | None = Field(
        None, description="monitor: keep sequence accounting here across restarts, so loss is counted exactly "
                          "(docs/reliability.md); unset keeps nothing",
    )
    max_seq_jump: int = Field(
        100_000, ge=16, le=2**40,
        description="monitor: a frame numbered more than this many frames past its stream's last is rejected "
                    "(seq_jump) unless the next frame continues from it",
    )
    max_backlog_bytes: int = Field(
        512 * 2**20, ge=2**20, le=64 * 2**30,
        description="monitor: payload bytes queued for analysis at most; beyond it the oldest are dropped",
    )
    max_entity_series: int = Field(
        1_000, ge=10, le=1_000_000, description="per-entity series per family (unhealthy links, chips, ...) at most",
    )
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("topology")
    @classmethod
    def _known_topology(cls, value: str) -> str:
        try:
            if value.endswith(".toml"):
                load_inventory(Path(value))  # read and checked now, so a bad file stops rainierd at start
            else:
                parse_topology(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("mqtt_url")
    @classmethod
    def _mqtt_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("mqtt", "mqtts"):
            raise ValueError(f"{value!r} must start mqtt:// or mqtts://")
        if parts.username or parts.password:
            raise ValueError("put credentials in mqtt_username / mqtt_password, not in the URL")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError(f"{value!r} has an invalid port") from None
        if not parts.hostname:
            raise ValueError(f"{value!r} has no host")
        return value

    @field_validator("metrics_addr")
    @classmethod
    def _metrics_addr(cls, value: str) -> str:
        parse_host_port(value)
        return value

    def monitor_config(self) -> MonitorConfig:
        """Return the monitor core's configuration: every figure it judges by, from these settings."""
        return MonitorConfig(
            tick_s=self.tick_s, stale_after_ticks=self.stale_after_ticks, max_frame_bytes=self.max_frame_bytes,
            max_clock_skew_s=self.max_clock_skew_s, max_seq_jump=self.max_seq_jump,
            hardware=replace(TRN2, efa_ports_per_node=self.efa_ports_per_node),
        )

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        """Return the (host, port) the exporter listens on."""
        return parse_host_port(self.metrics_addr)


class _FileSource(PydanticBaseSettingsSource):
    """Values from the TOML config file, the lowest-priority source."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)


def _flag_name(field: str) -> str:
    return {"tick_s": "--tick"}.get(field, "--" + field.replace("_", "-"))


def load_settings(flags: dict[str, Any], config_file: Path | None = None) -> Settings:
    """Return validated settings from flags, environment and the config file.

    Raises ConfigError with one line that names the offending setting.
    """
    file_values: dict[str, Any] = {}
    if config_file is not None:
        try:
            file_values = tomllib.loads(config_file.read_text())
        except OSError as exc:
            raise ConfigError(f"config file {config_file}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file}: {exc}") from None

    class _Loaded(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, _FileSource(settings_cls, file_values)

    try:
        return _Loaded(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = str(error["loc"][0]) if error["loc"] else "?"
        where = f"{_flag_name(name)} / RAINIERD_{name.upper()}"
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"invalid setting {name} ({where}): {message}") from None
