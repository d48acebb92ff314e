"""rainierd's settings: defaults, then an optional TOML file (``--config``, or
the one ``RAINIERD_CONFIG`` names; read by pydantic-settings' TOML source),
then environment variables ``RAINIERD_*``, then command-line flags, each
overriding the last.

Validation happens here, once, so a bad value stops the process at start with
one line naming the setting (the CLI exits 2), never later in a task.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from rainierd.actions import ActionConfig
from rainierd.bridge import BridgeConfig, BridgeRoleConfig, find_node
from rainierd.core import MonitorConfig, NameIndex
from rainierd.errors import ConfigError
from rainierd.fleet import PRESETS, TRN2, Topology, load_inventory, load_topology, parse_topology
from rainierd.healthcheck import HealthcheckConfig
from rainierd.http.client import parse_url
from rainierd.http.config import HttpConfig
from rainierd.http.webconfig import load_web_config
from rainierd.jobs import JobsConfig
from rainierd.mqtt import MAX_PACKET_OVERHEAD, MqttConfig, parse_brokers
from rainierd.sinks.webhook import WebhookConfig
from rainierd.wire import MAX_JOB_BYTES, Shard, node_topic, parse_shard

DEFAULT_METRICS_ADDR = "127.0.0.1:9780"
CONFIG_ENV: Final = "RAINIERD_CONFIG"  # names the settings file, so it is read before the settings are

# The parts of rainierd that read settings.  "http" is the listening side of
# a role (the exporter, or a simulator's probes), which the healthcheck also
# reads to find it; "server" that side's own limits, which it does not;
# "fleet" the inventory; "healthcheck" the probe's own credentials.
Part = Literal["mqtt", "fleet", "simulator", "monitor", "aggregator", "bridge", "http", "server", "log",
               "healthcheck"]

# Which parts each command runs, so which settings it reads and lists.
ROLE_PARTS: Final[dict[str, frozenset[Part]]] = {
    "run": frozenset({"mqtt", "fleet", "simulator", "monitor", "http", "server", "log"}),
    "simulate": frozenset({"mqtt", "fleet", "simulator", "http", "server", "log"}),
    "monitor": frozenset({"mqtt", "fleet", "monitor", "http", "server", "log"}),
    "aggregate": frozenset({"mqtt", "fleet", "aggregator", "http", "server", "log"}),
    "bridge": frozenset({"mqtt", "fleet", "bridge", "server", "log"}),
    # The scheduler adapters (rainierd jobs ...): they publish job documents named against the inventory.
    "jobs": frozenset({"mqtt", "fleet", "log"}),
    # It probes a role's HTTP side from the same settings, and writes no log.
    "healthcheck": frozenset({"http", "healthcheck"}),
}


@dataclass(frozen=True, slots=True, init=False)
class Use:
    """Which parts of rainierd read a setting (``Annotated`` metadata on a field).

    ``secret`` keeps it off the command line (environment and file only), and
    ``flag`` names its flag when the default does not fit.
    """

    parts: tuple[Part, ...]
    secret: bool = False
    flag: str | None = None

    def __init__(self, *parts: Part, secret: bool = False, flag: str | None = None) -> None:
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "secret", secret)
        object.__setattr__(self, "flag", flag)


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
    """Every setting of every role; docs/settings.md is generated from it (``rainierd.settings_doc``).

    Each field says, in its ``Annotated`` metadata, which parts of rainierd read
    it (``Use``); each role names its parts (``ROLE_PARTS``).  The command line
    is generated from this: a role lists exactly the settings it reads, each
    flag with its description as help, so a new setting is written once, here.
    """

    model_config = SettingsConfigDict(env_prefix="RAINIERD_", extra="forbid", frozen=True)

    mqtt_url: Annotated[str | None, Use("mqtt")] = Field(
        None, description="mqtt://host:port or mqtts://host:port (TLS, default port 8883); several, "
        "comma-separated, are the nodes of a clustered broker: the first that answers is used, the next when it "
        "goes away; `run` without it embeds a broker, other roles default to mqtt://127.0.0.1:1883",
    )
    mqtt_username: Annotated[str | None, Use("mqtt")] = Field(
        None, description="broker user name (unset: connect anonymously)")
    mqtt_password: Annotated[SecretStr | None, Use("mqtt", secret=True)] = Field(
        None, description="broker password; never logged, and never a flag (a command line is visible to ps)",
    )
    mqtt_ca_file: Annotated[Path | None, Use("mqtt")] = Field(
        None, description="CA bundle that signs the broker's certificate for mqtts:// (unset: the system CAs)",
    )
    mqtt_cert_file: Annotated[Path | None, Use("mqtt")] = Field(
        None, description="client certificate for mqtts:// (unset: none)")
    mqtt_key_file: Annotated[Path | None, Use("mqtt")] = Field(
        None, description="private key of the client certificate (unset: in the certificate file)")
    mqtt_client_id: Annotated[str | None, Use("mqtt")] = Field(
        None, max_length=64, description="MQTT client id, also the publisher id in frames "
        "(unset: rainierd-<role>-<random>; run adds -sim and -monitor to a given one); the shipped broker makes "
        "every client's id its username, so there set it to the username (make-credentials does)",
    )
    mqtt_qos: Annotated[Literal[0, 1], Use("mqtt")] = Field(
        0, description="QoS of telemetry publishes and subscriptions")
    mqtt_protocol: Annotated[Literal["3.1.1", "5"], Use("mqtt")] = Field(
        "5", description="MQTT protocol version; 3.1.1 for brokers without MQTT 5 (NATS)",
    )
    mqtt_keepalive_s: Annotated[int, Use("mqtt")] = Field(
        30, ge=5, le=3600, description="seconds between MQTT keep-alive pings")
    mqtt_reconnect_max_s: Annotated[float, Use("mqtt")] = Field(
        2.0, ge=0.2, le=300.0,
        description="longest wait between reconnect attempts when every broker is down (0.2 s doubling to this, "
                    "jittered): a broker that comes back is answered within this; raise it for tens of thousands "
                    "of node agents on one broker (docs/reliability.md)",
    )
    topology: Annotated[str, Use("fleet")] = Field(
        "demo", description=f"inventory FILE.toml, a preset ({', '.join(PRESETS)}), or sites=S,ultraservers=U",
    )
    efa_ports_per_node: Annotated[int, Use("fleet")] = Field(
        16, ge=1, le=64, description="EFA ports per trn2.48xlarge node (an inferred figure, so configurable)")
    tick_s: Annotated[float, Use("simulator", "monitor", "aggregator")] = Field(
        1.0, gt=0.0, le=3600.0, description="seconds between telemetry samples")
    ticks: Annotated[int, Use("simulator")] = Field(
        0, ge=0, description="stop the simulator after this many ticks; 0 runs forever")
    seed: Annotated[int, Use("simulator")] = Field(
        0, ge=0, description="simulator random seed (same seed, same telemetry)")
    encoding: Annotated[Literal["binary", "json"], Use("simulator")] = Field(
        "binary", description="simulator frame encoding")
    batch_nodes: Annotated[int, Use("simulator", "aggregator")] = Field(
        128, ge=0, le=4_096,
        description="simulator: nodes per batch frame (binary only; 0 publishes one frame per node); aggregator: "
        "nodes per batch frame at most (0: 128)",
    )
    scenario: Annotated[Path | None, Use("simulator")] = Field(
        None, description="TOML fault scenario for the simulator (docs/scenarios.md; unset: no scenario)")
    fault_acceleration: Annotated[float, Use("simulator")] = Field(
        0.0, ge=0.0, le=1e9, description="random faults at the calibrated rates times this; 0 injects none",
    )
    noise: Annotated[float, Use("simulator")] = Field(
        1.0, ge=0.0, le=10.0, description="simulator telemetry noise, 1 = default")
    time_scale: Annotated[float, Use("simulator")] = Field(
        1.0, gt=0.0, le=1e6, description="simulated seconds per tick second (diurnal cycle)")
    profile: Annotated[Literal["ideal", "realistic", "training"], Use("simulator")] = Field(
        "ideal", description="simulator telemetry profile: ideal, realistic, or training (skewed agent clocks, "
        "traffic swinging within each step, the job mix; the fleet's shape stays --topology's or the "
        "inventory's) (docs/simulator-profiles.md)")
    sim_jobs: Annotated[Literal["none", "mix"], Use("simulator")] = Field(
        "none", description="simulator: the fleet runs jobs: none (fixed groups), or mix (a seed-driven job mix; "
        "a scenario's [[job]] entries run either way; docs/scenarios.md, Jobs)")
    truth_file: Annotated[Path | None, Use("simulator")] = Field(
        None, description="simulator: write ground truth here, JSON lines (unset: nowhere)")
    metrics_addr: Annotated[str, Use("http")] = Field(
        DEFAULT_METRICS_ADDR, description="HTTP listen address, host:port (loopback unless you say otherwise): "
        "the exporter's /metrics and probes; a simulator serves its /healthz and /readyz there only when "
        "this is set",
    )
    web_config_file: Annotated[Path | None, Use("http", "bridge")] = Field(
        None, description="exporter (and the bridge's --listen): TLS and basic auth, an exporter-toolkit web config "
        "(docs/exporter-security.md); read when the exporter starts (unset: plain HTTP, no auth)",
    )
    http_max_connections: Annotated[int, Use("server")] = Field(
        256, ge=1, le=1_000_000,
        description="exporter: open connections at most, TLS handshakes included (lowered to fit the "
        "descriptor limit with 64 kept for checkpoint, MQTT and logs); at the cap a new connection evicts one "
        "not yet authenticated, of the address holding the most (docs/exporter-security.md)",
    )
    http_max_handshakes: Annotated[int, Use("server")] = Field(
        64, ge=1, le=1_000_000,
        description="exporter: TLS handshakes under way at most (~280 KiB each); one more evicts one of them",
    )
    http_unauthenticated_idle_s: Annotated[float, Use("server")] = Field(
        5.0, gt=0.0, le=130.0,
        description="exporter: seconds a connection has from accept for its first byte, TLS handshake and a "
        "request that authenticates (again after a 401) before it is closed; an authenticated one idles up to 130 s",
    )
    stale_after_ticks: Annotated[int, Use("monitor")] = Field(
        3, ge=1, le=1000,
        description="monitor: a chip not heard from for this many ticks of listening (or this many of its "
                    "publisher's periods, when longer) stops counting as delivering",
    )
    max_frame_bytes: Annotated[int, Use("monitor", "aggregator")] = Field(
        1_048_576, ge=1_024, le=64 * 2**20,
        description="monitor: larger payloads are rejected as they arrive (over MQTT 5 the broker never sends "
                    "more than this plus 4 KiB); aggregator: the same for node frames, and the largest batch "
                    "frame it makes",
    )
    max_clock_skew_s: Annotated[float, Use("monitor")] = Field(
        300.0, gt=0.0, le=86_400.0,
        description="monitor: a frame whose sample time is further than this from the monitor's clock is rejected",
    )
    reconnect_grace_s: Annotated[float, Use("monitor")] = Field(
        20.0, ge=0.0, le=3_600.0,
        description="monitor: after (re)connecting, judge no silence for this long while publishers reconnect "
                    "(rainierd's clients retry at least every mqtt_reconnect_max_s; other agents may take longer)",
    )
    feed_lost_share: Annotated[float, Use("monitor")] = Field(
        0.5, gt=0.0, le=1.0,
        description="monitor: when this share of the nodes heard in the last minute fall silent together while "
                    "it is connected, it reports its feed lost (one event, /readyz 503), not each node lost "
                    "(docs/reliability.md)",
    )
    feed_hold_s: Annotated[float, Use("monitor")] = Field(
        60.0, ge=0.0, le=3_600.0,
        description="monitor: how long a feed loss holds its nodes' silence back; nodes still silent after it "
                    "are judged lost",
    )
    counter_rate_margin: Annotated[float, Use("monitor")] = Field(
        1.05, ge=1.0, le=100.0,
        description="monitor: a counter rising faster than its hardware's peak (a chip's dense FP8, an EFA "
                    "port's line rate, a NeuronLink's bandwidth) times this is refused for that sample: no rate, "
                    "summed nowhere, counted in rainier_ingest_counters_refused_total (docs/metrics.md); the margin "
                    "is for publishers' sample times, not the hardware",
    )
    state_file: Annotated[Path | None, Use("monitor")] = Field(
        None, description="monitor: keep sequence accounting here across restarts, so loss is counted exactly "
                          "(docs/reliability.md); unset keeps nothing",
    )
    max_seq_jump: Annotated[int, Use("monitor")] = Field(
        100_000, ge=16, le=2**40,
        description="monitor: a frame numbered more than this many frames past its stream's last (or further "
                    "than the time since could hold) is held as seq_jump until 3 frames in a row continue from it",
    )
    max_backlog_bytes: Annotated[int | None, Use("monitor")] = Field(
        None, ge=2**20, le=64 * 2**30,
        description="monitor: payload bytes queued for analysis at most; beyond it the oldest are dropped "
                    "(unset: 4 ticks of the fleet's frames, at least 32 MiB and 4 max_frame_bytes; rainier: 440 MiB)",
    )
    share_frames_per_tick: Annotated[float, Use("monitor", "aggregator")] = Field(
        4.0, ge=1.0, le=1e6,
        description="monitor, aggregator: messages (node or batch frames) a telemetry topic's confirmed publisher "
                    "may send a tick, on average over a burst of 5 ticks (anything else on the topic: half that); "
                    "the excess is dropped before decoding, counted as over_share (over_share_unconfirmed) "
                    "(a genuine publisher sends one a tick)",
    )
    share_bytes_per_tick: Annotated[int, Use("monitor", "aggregator")] = Field(
        4 * 2**20, ge=1_024, le=64 * 2**30,
        description="monitor, aggregator: payload bytes one telemetry topic may send a tick, on average over a "
                    "burst of 5 ticks; its excess is dropped before decoding, counted as over_share",
    )
    max_share_topics: Annotated[int, Use("monitor", "aggregator")] = Field(
        131_072, ge=16, le=16_777_216,
        description="monitor, aggregator: telemetry topics whose share is tracked at once; beyond it a new topic's "
                    "messages are dropped (too_many_topics) until idle ones are forgotten (rainier: 32,000 a tick)",
    )
    max_entity_series: Annotated[int, Use("monitor")] = Field(
        1_000, ge=10, le=1_000_000, description="per-entity series per family (unhealthy links, chips, ...) at most",
    )
    max_jobs: Annotated[int, Use("monitor")] = Field(
        1_000, ge=1, le=1_000_000,
        description="jobs with per-job series at most; beyond it those losing the most FP8 are kept and the rest "
                    "counted in rainier_jobs_over_budget (docs/metrics.md)",
    )
    shard: Annotated[str, Use("monitor", "aggregator")] = Field(
        "0/1", description="monitor: watch shard i of N (i/N, i from 0) of the fleet's UltraServers, subscribing "
        "to its share of the topics only (docs/wire-format.md); aggregator: batch that share's node frames "
        "(docs/aggregation.md); 0/1 is the whole fleet",
    )
    telemetry_input: Annotated[Literal["all", "batches"], Use("monitor")] = Field(
        "all", description="monitor: all hears node frames and batch frames; batches hears batch and facility "
        "frames only, as a monitor behind an aggregation tier must (rainierd aggregate; docs/aggregation.md)",
    )
    webhook_url: Annotated[str | None, Use("monitor")] = Field(
        None, description="monitor: POST each advisory change as a CloudEvent to this http(s) URL "
        "(docs/actions.md; unset: no webhook)",
    )
    webhook_token_file: Annotated[Path | None, Use("monitor")] = Field(
        None, description="monitor: file holding the webhook's bearer token, re-read before each attempt; never "
        "logged (unset: no Authorization header)",
    )
    webhook_ca_file: Annotated[Path | None, Use("monitor")] = Field(
        None, description="monitor: CA bundle that signs the webhook receiver's certificate (unset: the system CAs)",
    )
    webhook_queue_size: Annotated[int, Use("monitor")] = Field(
        1_000, ge=1, le=1_000_000,
        description="monitor: webhook events queued at most; beyond it the oldest is dropped and counted",
    )
    webhook_max_attempts: Annotated[int, Use("monitor")] = Field(
        5, ge=1, le=20, description="monitor: tries of one webhook event (jittered exponential backoff between)",
    )
    webhook_timeout_s: Annotated[float, Use("monitor")] = Field(
        5.0, gt=0, le=60, description="monitor: one webhook attempt (connect, TLS, request, response) at most",
    )
    actions_dry_run: Annotated[bool, Use("monitor")] = Field(
        True, description="monitor: advisories are advice only: every sink says dry_run and nothing acts on them "
        "(false: a sink's consumer may act on a proposed advisory) (docs/actions.md)",
    )
    actions_hold_s: Annotated[float, Use("monitor")] = Field(
        300.0, ge=0.0, le=86_400.0,
        description="monitor: seconds a node's causes must stand before its advisory is proposed: a flap or a "
        "checkpoint clears first (docs/actions.md)",
    )
    actions_expired_keep_s: Annotated[float, Use("monitor")] = Field(
        3_600.0, ge=0.0, le=30 * 86_400.0,
        description="monitor: seconds a proposed advisory whose causes cleared stays visible as expired",
    )
    actions_brake_max_nodes: Annotated[int, Use("monitor")] = Field(
        10, ge=1, le=1_000_000,
        description="monitor: the brake: nodes proposed for action within the brake's window at most; beyond it "
        "nothing new is proposed (docs/actions.md)",
    )
    actions_brake_max_fraction: Annotated[float, Use("monitor")] = Field(
        0.05, gt=0.0, le=1.0,
        description="monitor: the brake: share of a site's, and of the fleet's, present nodes proposed within the "
        "window at most (at least one node)",
    )
    actions_brake_window_s: Annotated[float, Use("monitor")] = Field(
        3_600.0, gt=0.0, le=30 * 86_400.0, description="monitor: the brake's window, seconds")
    actions_lemon_flags: Annotated[int, Use("monitor")] = Field(
        3, ge=1, le=1_000,
        description="monitor: a node proposed for action this many times within actions_lemon_days is a lemon "
        "(the repeat-offender ledger, kept in <state-file>.ledger)",
    )
    actions_lemon_days: Annotated[float, Use("monitor")] = Field(
        30.0, gt=0.0, le=3_650.0, description="monitor: the repeat-offender ledger's window, days")
    actions_restart_s: Annotated[float, Use("monitor")] = Field(
        300.0, ge=0.0, le=86_400.0,
        description="monitor: what moving a job costs it, in seconds of its healthy FLOP/s (requeue, reload from "
        "its checkpoint): a cause costing more over actions_horizon_s calls for its dear action (docs/actions.md)",
    )
    actions_horizon_s: Annotated[float, Use("monitor")] = Field(
        3_600.0, gt=0.0, le=30 * 86_400.0,
        description="monitor: how far ahead a cause's cost is counted against a restart's (default break-even: "
        "a cause costing its job over 300/3600 = 8.3 % is worth moving it)",
    )
    actions_reset_escalate_s: Annotated[float, Use("monitor")] = Field(
        1_200.0, ge=0.0, le=86_400.0,
        description="monitor: seconds from a link's or port's onset after which a reset has not restored it and "
        "what follows the reset is advised",
    )
    actions_reset_brake_max_nodes: Annotated[int, Use("monitor")] = Field(
        20, ge=1, le=1_000_000,
        description="monitor: the resets' own brake: nodes proposed a reset_link or reset_port within the brake's "
        "window at most (drains count apart)",
    )
    bridge_listen: Annotated[str, Use("bridge", flag="--listen")] = Field(
        "127.0.0.1:9781", description="bridge: HTTP listen address, host:port, of its /metrics, /healthz and /readyz "
        "(loopback unless you say otherwise; `rainierd healthcheck --metrics-addr` the same to probe it)",
    )
    ecc_counts: Annotated[Literal["per-period", "cumulative"], Use("bridge")] = Field(
        "per-period", description="bridge: whether neuron-monitor's neuron_hw_counters ECC values are counts over "
        "the group's period (what AWS's neuron-monitor-prometheus.py assumes: it adds each report's) or totals "
        "(then a value going backwards is a reset); the guide does not say (docs/bridge.md)",
    )
    sample_max_lag_s: Annotated[float, Use("bridge")] = Field(
        30.0, ge=1.0, le=3_600.0,
        description="bridge: its sample clock (advanced by each report's captured period) is stepped to the wall "
        "clock when it falls further behind than this (counted in rainier_bridge_clock_resyncs_total)",
    )
    healthcheck_user: Annotated[str | None, Use("healthcheck", flag="--basic-auth-user")] = Field(
        None, description="healthcheck: the basic-auth user it probes as when the web config asks for basic auth "
        "(unset: the web config's only user)",
    )
    healthcheck_password_file: Annotated[Path | None, Use("healthcheck", flag="--basic-auth-password-file")] = Field(
        None, description="healthcheck: file holding that user's password, read as top and node-check read "
        "theirs; never logged",
    )
    log_format: Annotated[Literal["auto", "json", "console"], Use("log")] = Field(
        "auto", description="log format: json, console, or auto (console on a terminal)")
    log_level: Annotated[Literal["debug", "info", "warning", "error"], Use("log")] = Field(
        "info", description="least severe log level written")

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
        urls = [url.strip() for url in value.split(",")]
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("mqtt", "mqtts"):
                raise ValueError(f"{url!r} must start mqtt:// or mqtts://")
            if parts.username or parts.password:
                raise ValueError("put credentials in mqtt_username / mqtt_password, not in the URL")
            try:
                parts.port  # noqa: B018 - raises on a bad port
            except ValueError:
                raise ValueError(f"{url!r} has an invalid port") from None
            if not parts.hostname:
                raise ValueError(f"{url!r} has no host")
        if len(set(urls)) != len(urls):
            raise ValueError(f"{value!r} names a broker twice")
        return ",".join(urls)

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        if value is not None:
            parse_url(value)  # raises ValueError saying what is wrong
        return value

    @field_validator("shard")
    @classmethod
    def _shard(cls, value: str) -> str:
        return str(parse_shard(value))  # raises ValueError saying what is wrong

    @field_validator("metrics_addr", "bridge_listen")
    @classmethod
    def _metrics_addr(cls, value: str) -> str:
        parse_host_port(value)
        return value

    def monitor_config(self, topology: Topology | None = None) -> MonitorConfig:
        """Return the monitor core's configuration: every figure it judges by, from these settings.

        With the ``topology`` the monitor watches, its EFA ports a node are the hardware's: an inventory's
        ``efa_ports_per_node`` wins over the setting (``load_inventory``), and the core refuses a hardware
        and topology that disagree, so taking the setting here made an inventory of 8 ports a node exit with
        a traceback unless the flag repeated it.
        """
        ports = self.efa_ports_per_node if topology is None else topology.efa_ports_per_node
        return MonitorConfig(
            tick_s=self.tick_s, stale_after_ticks=self.stale_after_ticks, max_frame_bytes=self.max_frame_bytes,
            max_clock_skew_s=self.max_clock_skew_s, max_seq_jump=self.max_seq_jump,
            feed_lost_share=self.feed_lost_share, feed_hold_s=self.feed_hold_s,
            counter_rate_margin=self.counter_rate_margin, hardware=replace(TRN2, efa_ports_per_node=ports),
        )

    def http_config(self, listen: str | None = None) -> HttpConfig:
        """Return the HTTP edge's configuration: listening on ``listen`` (host:port; default ``metrics_addr``),
        with the web config file's TLS and basic auth (read now) and the connection limits.

        Raises ConfigError if the web config file is missing or unusable.
        """
        host, port = parse_host_port(self.metrics_addr if listen is None else listen)
        return HttpConfig(
            host=host, port=port,
            web=None if self.web_config_file is None else load_web_config(self.web_config_file),
            max_connections=self.http_max_connections, max_handshakes=self.http_max_handshakes,
            unauthenticated_idle_s=self.http_unauthenticated_idle_s,
        )

    def mqtt_config(
        self, *, client_id: str, url: str | None = None, suffix: str | None = None,
        max_packet_bytes: int | None = None, protocol: Literal["3.1.1", "5"] | None = None,
    ) -> MqttConfig:
        """Return an MQTT client's connection config for ``url`` (default: these settings' URL).

        ``client_id`` is used unless the settings give one; ``suffix`` is added to
        a given one, so that the clients of one process (``run``: simulator and
        monitor) never share an id and take each other's session over.
        ``protocol`` overrides the settings'.
        """
        return MqttConfig(
            brokers=parse_brokers(url or self.mqtt_url or "mqtt://127.0.0.1:1883"),
            client_id=(f"{self.mqtt_client_id}-{suffix}" if suffix else self.mqtt_client_id)
            if self.mqtt_client_id else client_id,
            username=self.mqtt_username,
            password=self.mqtt_password.get_secret_value() if self.mqtt_password else None,
            ca_file=self.mqtt_ca_file,
            cert_file=self.mqtt_cert_file,
            key_file=self.mqtt_key_file,
            keepalive_s=self.mqtt_keepalive_s,
            qos=self.mqtt_qos,
            protocol=protocol or self.mqtt_protocol,
            max_packet_bytes=max_packet_bytes,
            backoff_cap_s=self.mqtt_reconnect_max_s,
        )

    def bridge_config(self, topology: Topology, node: int) -> BridgeConfig:
        """Return the neuron-monitor bridge's configuration for ``node`` of ``topology`` (its EFA device names and
        instance id from the inventory, when it gives them)."""
        names = topology.names
        return BridgeConfig(
            hardware=replace(TRN2, efa_ports_per_node=topology.efa_ports_per_node),
            chips_per_node=topology.chips_per_node, efa_ports_per_node=topology.efa_ports_per_node,
            ecc_counts=self.ecc_counts, max_lag_s=self.sample_max_lag_s,
            efa_devices=names.efa_devices[node] if names.efa_devices else None,
            instance_id=names.instance_ids[node] if names.instance_ids else None,
        )

    def action_config(self) -> ActionConfig:
        """Return the advisory policy's configuration (docs/actions.md): the one place it is built."""
        return ActionConfig(
            dry_run=self.actions_dry_run, hold_s=self.actions_hold_s, expired_keep_s=self.actions_expired_keep_s,
            brake_max_nodes=self.actions_brake_max_nodes, brake_max_fraction=self.actions_brake_max_fraction,
            brake_window_s=self.actions_brake_window_s, lemon_flags=self.actions_lemon_flags,
            lemon_days=self.actions_lemon_days, restart_s=self.actions_restart_s, horizon_s=self.actions_horizon_s,
            reset_escalate_s=self.actions_reset_escalate_s, reset_brake_max_nodes=self.actions_reset_brake_max_nodes,
        )

    @property
    def monitor_shard(self) -> Shard:
        """Return the share of the fleet a monitor watches."""
        return parse_shard(self.shard)

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        """Return the (host, port) the exporter listens on."""
        return parse_host_port(self.metrics_addr)

    # Each edge's own frozen configuration, so that no edge imports Settings (tests/unit/test_architecture.py):
    # the webhook sink, the healthcheck, the bridge and the jobs runner.

    def webhook_config(self, *, source: str) -> WebhookConfig | None:
        """Return the monitor's webhook sink configuration, ``source`` its CloudEvents source (a URI-reference naming
        this monitor); None when no ``webhook_url`` is set."""
        if self.webhook_url is None:
            return None
        return WebhookConfig(
            url=self.webhook_url, token_file=self.webhook_token_file, ca_file=self.webhook_ca_file,
            queue_size=self.webhook_queue_size, max_attempts=self.webhook_max_attempts,
            timeout_s=self.webhook_timeout_s, source=source,
        )

    def healthcheck_config(self) -> HealthcheckConfig:
        """Return what ``rainierd healthcheck`` probes: the role's HTTP side as its settings place it, and the probe's
        own credentials."""
        host, port = self.metrics_host_port
        return HealthcheckConfig(host=host, port=port, web_config_file=self.web_config_file,
                                 user=self.healthcheck_user, password_file=self.healthcheck_password_file)

    def bridge_role_config(self, *, node_name: str) -> BridgeRoleConfig:
        """Return ``rainierd bridge neuron-monitor``'s configuration as node ``node_name`` (its inventory hostname,
        or ``n<id>``) of the settings' topology.

        Raises ConfigError when the topology does not load or holds no such node, or the web config file is unusable.
        """
        topology = load_topology(self.topology, efa_ports_per_node=self.efa_ports_per_node)
        node = find_node(topology, node_name)
        return BridgeRoleConfig(
            node=node, node_name=topology.node_name(node), topic=node_topic(*topology.node_path(node)),
            bridge=self.bridge_config(topology, node),
            # n<id>: the same as the topic's node level, and the username the shipped ACL gives a node agent, whose
            # status topic is its username (docs/security.md); unique in the fleet, so no two bridges share a session.
            mqtt=self.mqtt_config(client_id=f"n{node}"),
            http=self.http_config(self.bridge_listen),
        )

    def jobs_config(self, *, source: str) -> JobsConfig:
        """Return ``rainierd jobs``' configuration as publisher ``source``: the names of the settings' topology its
        jobs resolve against, and its broker (client id ``rainierd-jobs-<source>`` unless the settings name one).

        Raises ConfigError when the topology does not load.
        """
        topology = load_topology(self.topology, efa_ports_per_node=self.efa_ports_per_node)
        # Over MQTT 5 the broker never sends a retained document larger than any valid one (docs/jobs.md).
        return JobsConfig(source=source, index=NameIndex.of(topology),
                          mqtt=self.mqtt_config(client_id=f"rainierd-jobs-{source}",
                                                max_packet_bytes=MAX_JOB_BYTES + MAX_PACKET_OVERHEAD))


def _use(field: str) -> Use:
    use = next((m for m in Settings.model_fields[field].metadata if isinstance(m, Use)), None)
    if use is None:
        raise TypeError(f"setting {field} says nothing of who reads it: annotate it with Use(...)")
    return use


def flag_name(field: str) -> str:
    """Return the command-line flag of setting ``field``: its name in kebab case, less a unit suffix ``_s``
    (the help says "seconds"), unless the field names its own."""
    use = _use(field)
    if use.flag is not None:
        return use.flag
    return "--" + field.removesuffix("_s").replace("_", "-")


def role_settings(role: str) -> list[str]:
    """Return the settings ``role`` reads that may be given as flags, in the model's order.

    Raises KeyError for a command that reads no settings.
    """
    parts = ROLE_PARTS[role]
    return [name for name in Settings.model_fields
            if not _use(name).secret and parts.intersection(_use(name).parts)]


def load_settings(flags: dict[str, Any], config_file: Path | None = None) -> Settings:
    """Return validated settings from flags, environment and the config file (``config_file``, or the one
    ``RAINIERD_CONFIG`` names when that is None).

    Raises ConfigError with one line that names the offending setting, or the file.
    """
    if config_file is None and (named := os.environ.get(CONFIG_ENV)):
        config_file = Path(named)
    file_source = None if config_file is None else _file_source(config_file)

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
            # Flags (the init arguments) over RAINIERD_* over the file; no .env, no secrets directory.
            return (init_settings, env_settings) if file_source is None else (init_settings, env_settings, file_source)

    try:
        return _Loaded(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = str(error["loc"][0]) if error["loc"] else "?"
        where = (f"RAINIERD_{name.upper()}" if name not in Settings.model_fields or _use(name).secret
                 else f"{flag_name(name)} / RAINIERD_{name.upper()}")
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"invalid setting {name} ({where}): {message}") from None


def _file_source(path: Path) -> TomlConfigSettingsSource:
    """Return the settings file at ``path`` as pydantic-settings' TOML source.

    Raises ConfigError naming the file when it cannot be read, is not TOML, or holds a key that is no setting.
    """
    try:
        # The source reads nothing from a path that is no file; a config file named and missing is an error.
        with path.open("rb"):
            pass
        source = TomlConfigSettingsSource(Settings, toml_file=path)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError, or bytes that are not UTF-8
        raise ConfigError(f"config file {path}: {exc}") from None
    # Checked here, by exact name: the source would take TICK_S for tick_s, and validation would name an
    # unknown key's environment variable rather than the file it is in.
    for key in source.toml_data:
        if key not in Settings.model_fields:
            close = difflib.get_close_matches(key.lower(), Settings.model_fields, n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (README.md, Configuration, lists them)"
            raise ConfigError(f"config file {path}: {key!r} is not a setting{hint}")
    return source
