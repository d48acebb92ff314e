"""``python -m benchmarks <kind> [options]``: the one table of benchmarks,
each module adding its own options and running itself, and beside them the
tools that read their reports (``compare``).

Exit codes: 0 done, 1 a failure, 2 bad usage or a program the benchmark
needs that is not installed (one line on stderr saying how to install it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from benchmarks import (
    aggregate,
    anchors,
    api,
    cluster,
    compare,
    control,
    core,
    detect,
    ingest,
    plan,
    process,
    realfleet,
    realnode,
    receive,
    scrape,
    simfeed,
    sinks,
    soak,
    startup,
    topanswers,
    transport,
    tsdb,
)
from harness.procs import MissingBinaryError
from rainierd.runtime.logs import configure_logging

__all__ = ["BENCHMARKS", "TOOLS", "main", "parser"]

# kind -> module; each has HELP, add_arguments(parser) and run(args) -> int.
BENCHMARKS: dict[str, ModuleType] = {
    "core": core,
    "detect": detect,
    "control": control,
    "anchors": anchors,
    "scrape": scrape,
    "ingest": ingest,
    "soak": soak,
    "transport": transport,
    "receive": receive,
    "cluster": cluster,
    "tsdb": tsdb,
    "plan": plan,
    "run": process,
    "aggregate": aggregate,
    "startup": startup,
    "simfeed": simfeed,
    "sinks": sinks,
    "api": api,
    "realnode": realnode,
    "realfleet": realfleet,
    "top-answers": topanswers,
}

# command -> module, the same shape: tools that run no benchmark but read what the benchmarks wrote.
TOOLS: dict[str, ModuleType] = {
    "compare": compare,
}

_ROOT = Path(__file__).resolve().parent.parent


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    """Return the command line's parser: a subcommand per benchmark and per tool, with the options its module
    adds."""
    top = _Parser(prog="python -m benchmarks", description="rainierd's benchmarks (benchmarks/README.md)")
    kinds = top.add_subparsers(dest="kind", required=True, metavar="KIND", parser_class=_Parser)
    for kind, module in {**BENCHMARKS, **TOOLS}.items():
        add_arguments: Callable[[argparse.ArgumentParser], None] = module.add_arguments
        add_arguments(kinds.add_parser(kind, help=module.HELP, description=module.HELP))
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark or tool the command line names; return the exit code."""
    args = parser().parse_args(argv)
    # Benchmarks start helpers as `python -m benchmarks.<module>`: they must find this checkout wherever
    # the command was started from.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *paths])
    # The report goes to stdout; logs (warnings only) and progress to stderr.
    configure_logging(log_format="auto", level="warning")
    run: Callable[[argparse.Namespace], int] = {**BENCHMARKS, **TOOLS}[args.kind].run
    try:
        return run(args)
    except MissingBinaryError as exc:
        print(f"benchmarks {args.kind}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
