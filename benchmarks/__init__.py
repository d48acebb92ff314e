"""Benchmarks, run as ``rainierd bench <kind>``; each prints a table or, with
``--json``, one JSON document (benchmarks/README.md describes the fields).
"""

from __future__ import annotations

import argparse

from rainierd.bench import clusterbench, core, detect, ingest, plan, process, scrape, soak, transport, tsdb

__all__ = ["run_bench"]


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark ``args.bench``; return the exit code."""
    if args.bench == "core":
        return core.main(args)
    if args.bench == "detect":
        return detect.main(args)
    if args.bench == "ingest":
        return ingest.main(args)
    if args.bench == "transport":
        return transport.main(args)
    if args.bench == "scrape":
        return scrape.main(args)
    if args.bench == "soak":
        return soak.main(args)
    if args.bench == "cluster":
        return clusterbench.main(args)
    if args.bench == "tsdb":
        return tsdb.main(args)
    if args.bench == "plan":
        return plan.main(args)
    if args.bench == "run":
        return process.main(args)
    raise AssertionError(f"unknown benchmark {args.bench!r}")  # argparse restricts the choices
