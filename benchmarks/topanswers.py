"""``benchmarks top-answers``: what holding each answer ``rainierd top``
reads against the read API's schema costs it (``rainierd/top/answers.py``,
docs/top.md), beside what parsing the answer costs, at a fleet's size.

The documents are the read API's own (``ReadApi`` over a simulated fleet with
faults and jobs, as ``benchmarks api`` builds it), asked for exactly as top
asks (its ``TARGETS``, one UltraServer, one job); each is parsed and checked
``--repeat`` times in this process and the medians reported.  With
``jsonschema`` importable (the test extra), the same documents through
``jsonschema.Draft202012Validator`` for comparison (fewer repeats: it is slow).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any, Final

from benchmarks._table import print_table
from benchmarks.api import _fleet
from rainierd.api import ReadApi
from rainierd.fleet.topology import PRESETS
from rainierd.runtime.logs import configure_logging
from rainierd.top.answers import check, definition_of, schema
from rainierd.top.app import TARGETS

__all__ = ["HELP", "add_arguments", "bench_answers", "run"]

HELP: Final = "rainierd top: checking each answer against the schema, per endpoint"


def _median_s(action: Callable[[], object], repeat: int) -> dict[str, float]:
    """Median wall and CPU seconds of ``action`` (CPU: what it costs on a machine others share)."""
    wall, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        action()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}


def _jsonschema(target: str) -> Callable[[Any], None] | None:
    try:
        import jsonschema  # type: ignore[import-untyped]  # noqa: PLC0415 - the comparison, from the test extra
    except ImportError:
        return None
    file, name = definition_of(target.partition("?")[0])
    root = dict(schema(file))
    validator = jsonschema.Draft202012Validator(root if name is None else {**root, "$ref": f"#/$defs/{name}"})
    validate: Callable[[Any], None] = validator.validate
    return validate


async def _answers(api: ReadApi, targets: list[str]) -> dict[str, bytes]:
    out = {}
    for target in targets:
        path, _, query = target.partition("?")
        status, body = await api.answer(path, query)
        if not status.startswith("200"):
            raise RuntimeError(f"{target}: {status}")
        out[target] = body
    return out


def bench_answers(preset: str, *, repeat: int, seed: int, jobs: int, ticks: int) -> dict[str, Any]:
    """Return, per target top reads at ``preset``, the body's size and the median parse and check times."""
    topo, core, snap, events = _fleet(preset, seed, n_jobs=jobs, ticks=ticks)
    api = ReadApi(topo, lambda: snap, core=core, lock=asyncio.Lock(), events=lambda: events.recent)
    job = snap.jobs.ids[0] if snap.jobs else None
    targets = [t for name, t in TARGETS.items() if name != "actions"]  # actions are another server's (actions.md)
    targets += ["/api/v1/fleet", "/api/v1/ultraservers/u0"] + ([f"/api/v1/jobs/{job}"] if job else [])
    bodies = asyncio.run(_answers(api, targets))
    rows = []
    for target, body in bodies.items():
        document = json.loads(body)
        other = _jsonschema(target)
        rows.append({
            "target": target, "bytes": len(body),
            "rows": max((len(v) for v in document.values() if isinstance(v, list)), default=0),
            "parse_s": _median_s(lambda b=body: json.loads(b), repeat),  # type: ignore[misc]
            "check_s": _median_s(lambda t=target, d=document: check(t, d), repeat),  # type: ignore[misc]
            "jsonschema_s": None if other is None else _median_s(lambda o=other, d=document: o(d),  # type: ignore[misc]
                                                                  max(1, repeat // 10)),
        })
    return {"benchmark": "top-answers", "topology": preset, "ultraservers": topo.n_ultraservers,
            "repeat": repeat, "answers": rows}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--topology", default="rainier", choices=list(PRESETS))
    parser.add_argument("--repeat", type=int, default=20, help="times each answer is parsed and checked")
    parser.add_argument("--jobs", type=int, default=1_000, help="jobs over the fleet (whole UltraServers each)")
    parser.add_argument("--ticks", type=int, default=3, help="ticks simulated before the snapshot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    configure_logging(log_format="auto", level="error")
    report = bench_answers(args.topology, repeat=max(1, args.repeat), seed=args.seed, jobs=args.jobs,
                           ticks=args.ticks)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0

    def ms(value: dict[str, float] | None) -> str:
        return "-" if value is None else f"{value['cpu'] * 1e3:.2f} ms ({value['wall'] * 1e3:.2f})"

    print(f"{report['topology']}: {report['ultraservers']:,} UltraServers, medians of {report['repeat']}: CPU (wall)")
    print_table(("answer", "bytes", "rows", "parse", "check", "jsonschema"), (
        (f"`{r['target']}`", f"{r['bytes']:,}", f"{r['rows']:,}", ms(r["parse_s"]), ms(r["check_s"]),
         ms(r["jsonschema_s"])) for r in report["answers"]))
    return 0
