"""The ``rainierd`` command line: parses flags, loads settings, configures
logging and hands over to a role or a small utility.  (The benchmarks live
outside the package: ``python -m benchmarks`` in a source checkout.)

Exit codes: 0 success or a clean stop, 1 a runtime failure, 2 bad usage or an
invalid setting or input (one line on stderr naming it: a scenario or jobs
file, a scheduler's output, an address already in use), 141 when whoever
reads a utility's output closes the pipe first (``rainierd schema | head``:
what a shell tool killed by SIGPIPE returns, without a traceback).  A bare
``rainierd`` prints its usage and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Final, Literal, NoReturn, Union, get_args, get_origin

import numpy as np
import structlog

from rainierd import completion
from rainierd._listen import in_use_message, listen_setting, local_url, taken
from rainierd._start import Stopped
from rainierd._version import describe
from rainierd.bridge import run_bridge
from rainierd.daemon import run_role
from rainierd.errors import ConfigError, JobError, RainierdError
from rainierd.fleet import TRN2, build_inventory, load_inventory, parse_ultraservers, read_node_listing
from rainierd.healthcheck import DEFAULT_TIMEOUT_S
from rainierd.healthcheck import check as check_health
from rainierd.jobs import DEFAULT_GROUP_LABELS, run_jobs
from rainierd.promrules import RULES_DIR, write_rules
from rainierd.runtime import configure_logging
from rainierd.settings import Settings, flag_name, load_settings, role_settings
from rainierd.sinks import nodecheck
from rainierd.top import launch as top_launch
from rainierd.wire import jobs_schema, json_schema

# Roles that hold the fleet's state; see ``entry``.
_DAEMONS = frozenset({"run", "simulate", "monitor", "aggregate", "bridge", "jobs"})

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


class _Version(argparse.Action):
    """``--version``: the version line, asked of git only when given (``_version.describe``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(describe())
        parser.exit(0)


_LOCAL_MONITOR_HELP: Final = ("the monitor's HTTP address, e.g. https://monitor:9780 (default: this machine's, "
                              "from the settings' metrics_addr: http://127.0.0.1:9780 unless RAINIERD_METRICS_ADDR "
                              "or --config says otherwise)")


def _url_optional(parser: argparse.ArgumentParser) -> None:
    """Let ``top``'s --url be left out: it then follows the monitor on this machine (``_local_monitor``)."""
    url = next(a for a in completion.arguments(parser) if a.dest == "url")
    url.required, url.help = False, _LOCAL_MONITOR_HELP


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rainierd", description="Trainium2 fleet telemetry and reliability monitoring.")
    parser.add_argument("-V", "--version", action=_Version,
                        help="print the version (and the commit, in a source checkout) and exit")
    parser.add_argument("--config", type=Path, help="TOML settings file (RAINIERD_CONFIG)")
    # Not required: a bare ``rainierd`` prints the usage (``_parse``) rather than one error line.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, text in (
        ("run", "simulate, monitor and export in one process (embedded broker unless --mqtt-url)"),
        ("simulate", "publish a simulated fleet's telemetry to MQTT"),
        ("monitor", "subscribe to telemetry, analyse it and serve /metrics"),
        ("aggregate", "republish a share of the fleet's per-node frames as batch frames, once a tick "
                      "(docs/aggregation.md)"),
    ):
        role = commands.add_parser(name, help=text, description=text)
        role.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML settings file")
        if name == "run":
            role.add_argument("--top", action="store_true",
                              help="show the fleet in this terminal (rainierd top) while it runs; the log goes to a "
                                   "file (docs/top.md)")
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
    _jobs_parser(commands)
    _inventory_parser(commands)
    text = ("probe the role listening at metrics_addr, from the same settings (RAINIERD_*, --config); "
            "exit 0 healthy, 1 not, with one line saying why")
    check = commands.add_parser("healthcheck", help=text, description=text)
    check.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML settings file")
    check.add_argument("--ready", action="store_true", help="ask /readyz instead of /healthz")
    check.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help=f"give up after this long (default {DEFAULT_TIMEOUT_S:g})")
    _add_settings(check, "healthcheck")
    text = ("node-problem-detector plugin: ask the monitor whether this node has an advisory to act on; "
            "exit 0 OK, 1 problem, 2 unknown, one line on stdout (docs/actions.md)")
    node_check = commands.add_parser("node-check", help=text, description=text)
    nodecheck.add_arguments(node_check)
    text = ("the fleet in a terminal: follow a monitor's read API (this machine's, or --url with its CA and "
            "credentials); needs the 'top' extra (docs/top.md)")
    top = commands.add_parser("top", help=text, description=text)
    top_launch.add_arguments(top)
    _url_optional(top)
    commands.add_parser("version", help="print the version (as --version)")
    text = "print a shell completion script: source <(rainierd completion bash), or zsh"
    shell = commands.add_parser("completion", help=text, description=text)
    shell.add_argument("shell", choices=completion.SHELLS)
    schema = commands.add_parser("schema", help="print the JSON Schema of the JSON frame form (--jobs: of a job "
                                                "document)")
    schema.add_argument("--jobs", action="store_true", help="the job document's schema (docs/jobs.md)")
    rules = commands.add_parser(
        "rules", help="write copies of the Prometheus rules: test-sized, for your runbooks, or for Kubernetes")
    rules.add_argument("output", type=Path, help="directory to write the copies to")
    rules.add_argument("--for", dest="for_", default=None,
                       help="the `for:` of every alert, e.g. 5s (default: the production durations)")
    rules.add_argument("--runbook-base", default=None, metavar="URL",
                       help="address of your runbooks document; each alert links URL#section "
                            "(default: docs/runbooks.md of the public repository)")
    rules.add_argument("--job-goodput-objective", type=float, default=None, metavar="RATIO",
                       help="each training job's goodput objective, 0 < RATIO < 1; its error budget is 1 - RATIO "
                            "(default 0.99; docs/jobs.md, \"Operating jobs\")")
    rules.add_argument("--kubernetes", action="store_true",
                       help="write one prometheus-operator PrometheusRule, OUTPUT/prometheusrule.yaml")
    rules.add_argument("--source", type=Path, default=RULES_DIR,
                       help="directory of rule files (default: the ones shipped with rainierd)")
    return parser


def _jobs_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    """Add ``rainierd jobs slurm|kubernetes|static`` (docs/jobs.md)."""
    jobs = commands.add_parser("jobs", help="publish a scheduler's jobs as retained job documents (docs/jobs.md)")
    kinds = jobs.add_subparsers(dest="jobs", required=True, parser_class=_Parser)
    for kind, text in (
        ("slurm", "squeue --json's running jobs on stdin -> rainier/v1/jobs/<cluster>/<job id>"),
        ("kubernetes", "kubectl get pods -A -o json (or --watch's stream) on stdin -> "
                       "rainier/v1/jobs/<namespace>/<job>"),
        ("static", "a TOML or JSON file of jobs, for fleets without a scheduler -> rainier/v1/jobs/<id>"),
    ):
        parser = kinds.add_parser(kind, help=text, description=text)
        parser.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML settings file")
        if kind == "static":
            parser.add_argument("input", type=Path, metavar="JOBS_FILE", help="the jobs file (.toml or .json)")
        else:
            parser.add_argument("--input", type=Path, default=None, metavar="FILE",
                                help="read the scheduler's output from FILE instead of stdin")
        parser.add_argument("--source", default=None,
                            help=f"this publisher's name in its documents; it removes only its own (default {kind})")
        if kind == "kubernetes":
            parser.add_argument("--watch", action="store_true",
                                help="read kubectl get pods -A -o json --watch's stream and publish as it changes")
            parser.add_argument("--group-label", dest="group_labels", action="append", default=None,
                                metavar="LABEL", help="pod label naming its job, first present wins; repeat for "
                                f"several (default: {', '.join(DEFAULT_GROUP_LABELS)})")
        _add_settings(parser, "jobs")


def _inventory_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    """Add ``rainierd inventory from-neuron-ls`` (docs/real-nodes.md)."""
    inventory = commands.add_parser("inventory", help="build a fleet's inventory from what its nodes report")
    sources = inventory.add_subparsers(dest="inventory", required=True, parser_class=_Parser)
    text = ("each node's neuron-ls --json-output (and its UltraServer ids) -> the fleet's inventory TOML on stdout "
            "(docs/real-nodes.md)")
    parser = sources.add_parser("from-neuron-ls", help=text, description=text)
    parser.add_argument("listings", nargs="+", metavar="[HOST[@INSTANCE_ID]=]FILE",
                        help="one node's neuron-ls -j output; without HOST=, the file is named HOST.json or "
                             "HOST@INSTANCE_ID.json")
    parser.add_argument("--ultraservers", type=Path, default=None, metavar="FILE",
                        help="<server id>:<node id>:<host> a line, from each node's "
                             "/sys/class/neuron_device/server_id_4 and node_id_4 (unset: every node its own "
                             "UltraServer, with a warning)")
    parser.add_argument("--name", default="inventory", help="the inventory's name (default inventory)")
    parser.add_argument("--site", default="site0", help="the site the nodes are in (default site0)")
    parser.add_argument("--availability-zone", default=None, metavar="ZONE", help="the site's availability zone")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE",
                        help="write the inventory here (default stdout)")
    text = ("each node of an inventory, one line a node: its broker user n<id>, hostname, instance id, UltraServer "
            "and index, tab-separated (for make-credentials and the bridges' Secret: docs/real-nodes.md)")
    nodes = sources.add_parser("nodes", help=text, description=text)
    nodes.add_argument("inventory_file", type=Path, metavar="FILE.toml", help="the inventory")


def _inventory_nodes(path: Path) -> int:
    """Run ``rainierd inventory nodes``: each present node's line, 0; 2 with one line when the file is bad."""
    try:
        topology = load_inventory(path)
    except ConfigError as exc:
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    names = topology.names
    for node in map(int, np.flatnonzero(topology.node_present)):
        us = int(topology.node_ultraserver[node])
        print("\t".join((f"n{node}", names.hostnames[node] or "-", names.instance_ids[node] or "-",
                         names.ultraservers[us], str(node % TRN2.nodes_per_ultraserver))))
    return 0


def _inventory(args: argparse.Namespace) -> int:
    """Run ``rainierd inventory from-neuron-ls``: 0 with the inventory written, 2 with one line why not."""
    if args.inventory == "nodes":
        return _inventory_nodes(args.inventory_file)
    try:
        slots = None
        if args.ultraservers is not None:
            try:
                text = args.ultraservers.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{args.ultraservers}: {getattr(exc, 'strerror', None) or exc}") from None
            slots = parse_ultraservers(text, source=str(args.ultraservers))
        made = build_inventory([read_node_listing(a) for a in args.listings], slots, name=args.name,
                               site=args.site, availability_zone=args.availability_zone)
        if args.output is not None:
            try:
                args.output.write_text(made.toml)
            except OSError as exc:
                raise ConfigError(f"{args.output}: {exc.strerror or exc}") from None
    except ConfigError as exc:
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    for warning in made.warnings:
        print(f"rainierd: warning: {warning}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(made.toml)
    return 0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; with no command, print the usage and the commands on stderr and exit 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        parser.exit(2)
    args.argv = None if argv is None else list(argv)
    return args


def _settings(args: argparse.Namespace) -> Settings:
    flags = {name: getattr(args, name) for name in role_settings(args.command)}
    return load_settings(flags, args.config)


def command_settings(argv: Sequence[str]) -> Settings:
    """Return the settings a role's command line would run with (its flags, over the environment, over the
    config file), without running it.

    Raises SystemExit(2) for a usage error, ConfigError for an invalid setting.
    """
    return _settings(_parser().parse_args(argv))


async def _daemon(args: argparse.Namespace, settings: Settings) -> None:
    if args.command == "bridge":
        await run_bridge(settings.bridge_role_config(node_name=args.node), efa_root=args.efa_sysfs)
    elif args.command == "jobs":
        await run_jobs(settings.jobs_config(source=args.source or args.jobs), kind=args.jobs, input_path=args.input,
                       watch=getattr(args, "watch", False),
                       labels=tuple(getattr(args, "group_labels", None) or DEFAULT_GROUP_LABELS))
    else:
        await run_role(args.command, settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    return _main(_parse(argv))


def _utility(args: argparse.Namespace) -> int | None:
    """Run a command that reads no settings and return its exit code (None: ``args`` is not one)."""
    if args.command == "node-check":
        return nodecheck.run(args)
    if args.command == "top":
        if args.url is None:
            try:
                args.url = _local_monitor(args.config)
            except ConfigError as exc:
                print(f"rainierd top: {exc}", file=sys.stderr)
                return 2
        return top_launch.run_top(args)
    if args.command == "inventory":
        return _inventory(args)
    if args.command == "version":
        print(describe())
        return 0
    if args.command == "completion":
        sys.stdout.write(completion.script(_parser(), args.shell))
        return 0
    if args.command == "schema":
        print(json.dumps(jobs_schema() if args.jobs else json_schema(), indent=2))
        return 0
    if args.command == "rules":
        return _rules(args)
    return None


def _local_monitor(config: Path | None) -> str:
    """Return the URL of the monitor on this machine: the settings' ``metrics_addr`` (RAINIERD_*, --config), a
    wildcard address asked on loopback, https when the web config serves TLS.

    Raises ConfigError for invalid settings or an unreadable web config.
    """
    http = load_settings({}, config).http_config()
    return local_url(http, http.port)


def _rules(args: argparse.Namespace) -> int:
    """Run ``rainierd rules``: each written file's path, 0; one line and 2 when OUTPUT cannot take them."""
    if args.output.exists() and not args.output.is_dir():
        print(f"rainierd: rules: {args.output} exists and is not a directory; name a directory for the copies",
              file=sys.stderr)
        return 2
    try:
        for path in write_rules(args.source, args.output, duration=args.for_, runbook_base=args.runbook_base,
                                kubernetes=args.kubernetes, job_goodput_objective=args.job_goodput_objective):
            print(path)
    except ConfigError as exc:
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rainierd: rules: cannot write to {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _main(args: argparse.Namespace) -> int:
    if (code := _utility(args)) is not None:
        return code
    try:
        settings = _settings(args)
    except ConfigError as exc:
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    if (setting := listen_setting(args.command, settings)) is not None:
        address = getattr(settings, setting)
        if (problem := taken(address)) is not None:
            print(f"rainierd: {in_use_message(setting, address, problem)}", file=sys.stderr)
            return 2
    if args.command == "run" and args.top:
        child = [arg for arg in (sys.argv[1:] if args.argv is None else args.argv) if arg != "--top"]
        return top_launch.run_with_top(child, settings.metrics_addr, tls=settings.web_config_file is not None)
    if args.command == "healthcheck":
        verdict = check_health(settings.healthcheck_config(), probe="readyz" if args.ready else "healthz",
                               timeout_s=args.timeout)
        print(f"{'healthy' if verdict.ok else 'unhealthy'}: {verdict.reason}")
        return 0 if verdict.ok else 1
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    return _run_daemon(args, settings)


def _run_daemon(args: argparse.Namespace, settings: Settings) -> int:
    """Run a daemon role (or a jobs adapter) to its end; return its exit code, with one line saying why not 0."""
    log = structlog.get_logger("rainierd")
    try:
        asyncio.run(_daemon(args, settings))
    except ConfigError as exc:  # a scenario file is read only once the role starts
        print(f"rainierd: {exc}", file=sys.stderr)
        return 2
    except JobError as exc:  # a scheduler's output that is not one: nothing was published or removed
        command = " ".join(filter(None, (args.command, getattr(args, "jobs", None))))
        print(f"rainierd: {command}: bad input ({exc.detail}); nothing published", file=sys.stderr)
        return 2
    except OSError as exc:
        if (setting := listen_setting(args.command, settings)) is not None and exc.errno == errno.EADDRINUSE:
            # Taken between the check above and the bind.
            print(f"rainierd: {in_use_message(setting, getattr(settings, setting), exc)}", file=sys.stderr)
            return 2
        log.error("rainierd failed to start", error=str(exc))  # noqa: TRY400
        return 1
    except RainierdError as exc:
        # The message says it all (a broker that cannot start, a simulation that published nothing).
        log.error("rainierd failed", error=str(exc))  # noqa: TRY400
        return 1
    except ExceptionGroup as group:
        for failure in group.exceptions:
            if isinstance(failure, RainierdError):  # one of ours, whose message says it all
                log.error("rainierd failed", error=str(failure))  # noqa: TRY400
            else:
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
    command exits normally.
    """
    args = _parse(None)
    try:
        code = _main(args)
    except Stopped:  # a signal before the role's tasks ran (rainierd/_start.py): a clean stop, nothing to flush
        code = 0
    except BrokenPipeError:
        # The reader of a utility's output closed the pipe (``rainierd schema | head``): leave as a shell tool
        # killed by SIGPIPE would, quietly; stdout goes to /dev/null so the exit's own flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    if args.command in _DAEMONS:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
