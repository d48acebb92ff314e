"""The ``rainierd`` command line: parses flags, loads settings, configures
logging and hands over to a role, a benchmark or a small utility.

Exit codes: 0 success or a clean stop, 1 a runtime failure, 2 bad usage or an
invalid setting (one line on stderr naming it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Final, Literal, NoReturn, Union, get_args, get_origin

import structlog

from rainierd import __version__
from rainierd.bench import run_bench
from rainierd.bench.cluster import ENGINES
from rainierd.bench.core import SWEEP
from rainierd.bench.detect import FULL as DETECT_FULL
from rainierd.bench.detect import QUICK as DETECT_QUICK
from rainierd.bench.ingest import DEFAULT_SIZES, NAIVE_CHIPS
from rainierd.bench.transport import SIZES as TRANSPORT_SIZES
from rainierd.bench.tsdb import ENGINES as TSDB_ENGINES
from rainierd.bridge.run import run_bridge
from rainierd.daemon import run_role
from rainierd.errors import ConfigError, RainierdError
from rainierd.healthcheck import DEFAULT_TIMEOUT_S
from rainierd.healthcheck import check as check_health
from rainierd.logs import configure_logging
from rainierd.promrules import RULES_DIR, write_rules
from rainierd.settings import Settings, flag_name, load_settings, role_settings
from rainierd.topology import PRESETS
from rainierd.wire import json_schema

__all__ = ["command_settings", "entry", "main"]

# Roles that hold the fleet's state; see ``entry``.
_DAEMONS = frozenset({"run", "simulate", "monitor", "bridge"})

_METAVARS: Final[dict[Any, str]] = {Path: "FILE", int: "N", float: "NUMBER", str: "VALUE"}


def _add_settings(parser: argparse.ArgumentParser, role: str) -> None:
    """Give ``parser`` a flag for each setting ``role`` reads, generated from the settings model.

    Every flag defaults to None, so only what is given on the command line
    overrides the environment and the config file (``load_settings``).
    """
    group = parser.add_argument_group("settings", "each also RAINIERD_<NAME> or a key in the --config file")
    for name in role_settings(role):
        field = Settings.model_fields[name]
        kind: Any = field.annotation
        if get_origin(kind) in (Union, UnionType):
            kind = next(arg for arg in get_args(kind) if arg is not type(None))
        kwargs: dict[str, Any] = {}
        if get_origin(kind) is Literal:
            kwargs["choices"] = list(get_args(kind))
            kind = type(kwargs["choices"][0])
        else:
            kwargs["metavar"] = "SECONDS" if name.endswith("_s") else _METAVARS.get(kind, "VALUE")
        if kind in (int, float, Path):
            kwargs["type"] = kind
        # An unset setting's description says what unset means.
        default = "" if field.default is None else f"; default {field.default}"
        text = f"{field.description} (RAINIERD_{name.upper()}{default})"
        group.add_argument(flag_name(name), dest=name, default=None, help=text.replace("%", "%%"), **kwargs)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"rainierd: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rainierd", description="Trainium2 fleet telemetry and reliability monitoring.")
    parser.add_argument("--config", type=Path, help="TOML settings file (RAINIERD_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, text in (
        ("run", "simulate, monitor and export in one process (embedded broker unless --mqtt-url)"),
        ("simulate", "publish a simulated fleet's telemetry to MQTT"),
        ("monitor", "subscribe to telemetry, analyse it and serve /metrics"),
    ):
        role = commands.add_parser(name, help=text, description=text)
        role.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML settings file")
        _add_settings(role, name)
    bridge = commands.add_parser("bridge", help="bridge a node's own telemetry sources to MQTT")
    sources = bridge.add_subparsers(dest="bridge", required=True, parser_class=_Parser)
    text = "neuron-monitor's reports on stdin (plus EFA sysfs counters) -> this node's frames"
    neuron = sources.add_parser("neuron-monitor", help=text, description=text)
    neuron.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML settings file")
    neuron.add_argument("--node", required=True, help="this node: its inventory hostname, or n<id>")
    neuron.add_argument("--efa-sysfs", type=Path, default=Path("/sys"),
                        help="root of the EFA driver's counters (default /sys)")
    _add_settings(neuron, "bridge")
    text = ("probe the role listening at metrics_addr, from the same settings (RAINIERD_*, --config); "
            "exit 0 healthy, 1 not, with one line saying why")
    check = commands.add_parser("healthcheck", help=text, description=text)
    check.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML settings file")
    check.add_argument("--ready", action="store_true", help="ask /readyz instead of /healthz")
    check.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help=f"give up after this long (default {DEFAULT_TIMEOUT_S:g})")
    _add_settings(check, "healthcheck")
    commands.add_parser("version", help="print the version")
    commands.add_parser("schema", help="print the JSON Schema of the JSON frame form")
    rules = commands.add_parser(
        "rules", help="write copies of the Prometheus rules: test-sized, for your runbooks, or for Kubernetes")
    rules.add_argument("output", type=Path, help="directory to write the copies to")
    rules.add_argument("--for", dest="for_", default=None,
                       help="the `for:` of every alert, e.g. 5s (default: the production durations)")
    rules.add_argument("--runbook-base", default=None, metavar="URL",
                       help="address of your runbooks document; each alert links URL#section "
                            "(default: docs/runbooks.md of the public repository)")
    rules.add_argument("--kubernetes", action="store_true",
                       help="write one prometheus-operator PrometheusRule, OUTPUT/prometheusrule.yaml")
    rules.add_argument("--source", type=Path, default=RULES_DIR,
                       help="directory of rule files (default: the ones shipped with rainierd)")
    _bench_parsers(commands.add_parser("bench", help="benchmarks (see benchmarks/README.md)"))
    return parser


def _bench_parsers(bench: argparse.ArgumentParser) -> None:
    kinds = bench.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    core = kinds.add_parser("core", help="per-tick cost of the monitor's core, from 64 to 1,000,000 chips")
    core.add_argument("--topology", nargs="+", default=list(SWEEP),
                      help="presets or sites=S,ultraservers=U (default: a sweep from 64 to 1,000,000 chips)")
    core.add_argument("--repeat", type=int, default=10, help="ticks measured per size (after one warm-up)")
    core.add_argument("--batch-nodes", type=int, default=128, help="nodes per batch frame (0: one frame per node)")
    core.add_argument("--seed", type=int, default=0)
    core.add_argument("--plot", help="also draw the scaling curve to this PNG (needs matplotlib)")
    core.add_argument("--json", action="store_true", help="print JSON instead of a table")
    detect = kinds.add_parser("detect", help="detection quality against injected ground truth")
    detect.add_argument("--seeds", type=int, help=f"seeds per cell (default {DETECT_FULL.seeds}; "
                                                   f"--quick {DETECT_QUICK.seeds})")
    detect.add_argument("--ultraservers", type=int,
                        help=f"UltraServers in each fault run (default {DETECT_FULL.ultraservers}; "
                             f"--quick {DETECT_QUICK.ultraservers})")
    detect.add_argument("--control-seeds", type=int, help=f"fault-free runs (default {DETECT_FULL.control_seeds}; "
                                                           f"--quick {DETECT_QUICK.control_seeds})")
    detect.add_argument("--control-ultraservers", type=int,
                        help=f"UltraServers in each fault-free run (default {DETECT_FULL.control_ultraservers}; "
                             f"--quick {DETECT_QUICK.control_ultraservers})")
    # --control-ticks is the old name, from when every tick was 1 s.
    detect.add_argument("--control-seconds", "--control-ticks", dest="control_seconds", type=float,
                        help=f"length of each fault-free run (default {DETECT_FULL.control_seconds:g} s; "
                             f"--quick {DETECT_QUICK.control_seconds:g} s)")
    detect.add_argument("--quick", action="store_true",
                        help="a smoke run: one seed, small fleets, short controls (explicit sizes still win)")
    detect.add_argument("--profile", nargs="+", metavar="NAME",
                        help="simulator profiles, the first heading the report (default: realistic ideal)")
    detect.add_argument("--tick", nargs="+", type=float, metavar="SECONDS",
                        help="tick lengths in seconds, e.g. 0.5 1 5 (default 1); other ticks compare against 1 s")
    detect.add_argument("--kinds", nargs="+", metavar="KIND", help="grade only these fault kinds (default: all)")
    detect.add_argument("--noise", type=float, default=1.0)
    detect.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per core)")
    detect.add_argument("--output", help="also write the JSON report to this file")
    detect.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")
    scrape = kinds.add_parser("scrape", help="/metrics latency, size and event-loop lag")
    scrape.add_argument("--topology", nargs="+", default=["demo", "rainier"], choices=list(PRESETS))
    scrape.add_argument("--scrapes", type=int, default=100)
    scrape.add_argument("--interval", type=float, default=0.1, help="seconds between scrapes")
    scrape.add_argument("--seed", type=int, default=0)
    scrape.add_argument("--json", action="store_true")
    ingest = kinds.add_parser("ingest", help="simulate -> real Mosquitto -> monitor, swept up in fleet size")
    ingest.add_argument("--topology", nargs="+", default=list(DEFAULT_SIZES), help="sizes, smallest first")
    ingest.add_argument("--tick", type=float, default=1.0)
    ingest.add_argument("--warmup", type=float, default=20.0, help="seconds before the measured window")
    ingest.add_argument("--seconds", type=float, default=120.0, help="measured window per size")
    ingest.add_argument("--batch-nodes", type=int, default=128)
    ingest.add_argument("--no-naive", dest="naive", action="store_false", help="skip the naive baseline")
    ingest.add_argument("--naive-chips", type=int, nargs="+", default=list(NAIVE_CHIPS))
    ingest.add_argument("--naive-seconds", type=float, default=20.0)
    ingest.add_argument("--json", action="store_true")
    _soak_parser(kinds.add_parser("soak", help="simulate -> real Mosquitto -> monitor at one size for a long "
                                               "while: RSS growth, frames lost, sample and event-loop lag"))
    transport = kinds.add_parser("transport", help="cost of moving a Rainier tick a second through Mosquitto, "
                                                   "by message size")
    transport.add_argument("--sizes", type=int, nargs="+", default=list(TRANSPORT_SIZES), help="message bytes")
    transport.add_argument("--mb-per-s", type=float, default=116.0, help="offered (116: one rainier tick a second)")
    transport.add_argument("--seconds", type=float, default=10.0)
    transport.add_argument("--json", action="store_true")
    _cluster_parsers(kinds)
    run = kinds.add_parser("run", help="CPU and memory of a whole `rainierd run` process")
    run.add_argument("--topology", default="demo", choices=list(PRESETS))
    run.add_argument("--seconds", type=float, default=60.0, help="measurement window")
    run.add_argument("--warmup", type=float, default=5.0)
    run.add_argument("--json", action="store_true")


def _cluster_parsers(kinds: argparse._SubParsersAction[_Parser]) -> None:
    cluster = kinds.add_parser("cluster", help="a three-node NATS and RabbitMQ cluster against one Mosquitto: "
                                               "throughput of rainierd frames, failover, retained messages, wills")
    cluster.add_argument("--engines", nargs="+", default=["mosquitto", *ENGINES],
                         choices=["mosquitto", *ENGINES])
    cluster.add_argument("--size", type=int, default=463_000, help="message bytes (a rainier batch frame: ~463 KB)")
    cluster.add_argument("--mb-per-s", type=float, nargs="+", default=[116.0, 232.0],
                         help="offered rates (116: one rainier tick a second)")
    cluster.add_argument("--seconds", type=float, default=10.0)
    cluster.add_argument("--json", action="store_true")
    _tsdb_parser(kinds.add_parser("tsdb", help="samples/s one real Prometheus and one VictoriaMetrics ingest "
                                               "from rainierd targets, ramped until they fall behind"))
    plan = kinds.add_parser("plan", help="the deployment for N chips from the measured figures (docs/scaling.md)")
    plan.add_argument("--chips", type=float, nargs="+", default=[499_200, 1e6, 5e6],
                      help="fleet sizes in chips (default: rainier, 1M, 5M)")
    plan.add_argument("--tick", type=float, default=1.0, help="seconds between samples")
    plan.add_argument("--figures", help="measured figures JSON (default: benchmarks/plan-figures.json's copy)")
    plan.add_argument("--json", action="store_true")


def _tsdb_parser(tsdb: argparse.ArgumentParser) -> None:
    tsdb.add_argument("--engines", nargs="+", default=list(TSDB_ENGINES), choices=list(TSDB_ENGINES))
    tsdb.add_argument("--topology", default="rainier", choices=list(PRESETS),
                      help="the fleet each target exports, one shard's worth (default rainier: ~150k series)")
    tsdb.add_argument("--variants", type=int, default=4, help="successive ticks rendered; scrapes cycle through them")
    tsdb.add_argument("--interval", type=float, default=1.0, help="scrape interval in seconds")
    tsdb.add_argument("--window", type=int, default=15, help="intervals measured per step, after warm-up")
    tsdb.add_argument("--start", type=int, default=1, help="targets in the first step; each next doubles")
    tsdb.add_argument("--max-targets", type=int, default=16)
    tsdb.add_argument("--refine", type=int, default=1,
                      help="steps between the last sustained and the first failing count (bisection)")
    tsdb.add_argument("--budget", type=float, default=210.0, help="seconds per engine; no step starts past it")
    tsdb.add_argument("--memory-cap-gib", type=float, default=8.0,
                      help="no step that would take the TSDB's RSS past this (projected from the last step)")
    tsdb.add_argument("--wait-for-file", metavar="PATH",
                      help="on a shared machine: before rendering and each step, wait (scraping nothing) until "
                           "PATH exists")
    tsdb.add_argument("--seed", type=int, default=0)
    tsdb.add_argument("--json", action="store_true")


def _soak_parser(soak: argparse.ArgumentParser) -> None:
    soak.add_argument("--topology", default="rainier", help="a preset or sites=S,ultraservers=U (default rainier)")
    soak.add_argument("--tick", type=float, default=5.0)
    soak.add_argument("--seconds", type=float, default=600.0, help="measured window, after the warm-up")
    soak.add_argument("--warmup", type=float, default=60.0, help="seconds before the measured window")
    soak.add_argument("--sample-interval", type=float, default=5.0, help="seconds between RSS reads and scrapes")
    soak.add_argument("--batch-nodes", type=int, default=128)
    soak.add_argument("--json", action="store_true")


def _settings(args: argparse.Namespace) -> Settings:
    flags = {name: getattr(args, name) for name in role_settings(args.command)}
    config = args.config
    if config is None and (env := os.environ.get("RAINIERD_CONFIG")):
        config = Path(env)
    return load_settings(flags, config)


def command_settings(argv: Sequence[str]) -> Settings:
    """Return the settings a role's command line would run with (its flags, over the environment, over the
    config file), without running it.

    Raises SystemExit(2) for a usage error, ConfigError for an invalid setting.
    """
    return _settings(_parser().parse_args(argv))


async def _daemon(args: argparse.Namespace, settings: Settings) -> None:
    if args.command == "bridge":
        await run_bridge(settings, node_name=args.node, efa_root=args.efa_sysfs)
    else:
        await run_role(args.command, settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    return _main(_parser().parse_args(argv))


def _main(args: argparse.Namespace) -> int:
    if args.command == "version":
        print(f"rainierd {__version__}")
        return 0
    if args.command == "schema":
        print(json.dumps(json_schema(), indent=2))
        return 0
    if args.command == "rules":
        try:
            for path in write_rules(args.source, args.output, duration=args.for_,
                                    runbook_base=args.runbook_base, kubernetes=args.kubernetes):
                print(path)
        except ConfigError as exc:
            print(f"rainierd: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "bench":
        # Benchmarks print their report on stdout; logs go to stderr only.
        configure_logging(log_format="auto", level="warning")
        return run_bench(args)
    try:
        settings = _settings(args)
    except ConfigError as exc:
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    if args.command == "healthcheck":
        verdict = check_health(settings, probe="readyz" if args.ready else "healthz", timeout_s=args.timeout)
        print(f"{'healthy' if verdict.ok else 'unhealthy'}: {verdict.reason}")
        return 0 if verdict.ok else 1
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    log = structlog.get_logger("rainierd")
    try:
        asyncio.run(_daemon(args, settings))
    except ConfigError as exc:  # a scenario file is read only once the role starts
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    except (RainierdError, OSError) as exc:
        # The message says it all (a port in use, a broker that cannot start).
        log.error("rainierd failed to start", error=str(exc))  # noqa: TRY400
        return 1
    except ExceptionGroup as group:
        for failure in group.exceptions:
            log.error("rainierd task failed", error=repr(failure), exc_info=failure)  # noqa: TRY400
        return 1
    return 0


def entry() -> NoReturn:
    """The console script: ``main``, then leave without tearing the heap down.

    A monitor at ``rainier`` holds millions of Python objects (names, labels,
    stream state) and a gigabyte of arrays.  Once ``asyncio.run`` has returned
    everything that matters is done: the retained ``offline`` status is sent,
    the TaskGroup has joined, the logs are written.  Interpreter finalisation
    would then spend about two seconds freeing that heap object by object,
    past the two seconds a supervisor gives between SIGTERM and SIGKILL.  So a
    daemon role flushes its streams and ends with ``os._exit``; every other
    command (benchmarks with worker pools and temporary directories) exits
    normally.
    """
    args = _parser().parse_args()
    code = _main(args)
    if args.command in _DAEMONS:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
