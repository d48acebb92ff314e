"""``benchmarks tsdb``: how many samples a second one real Prometheus, and
one real single-node VictoriaMetrics, ingest on this machine, scraping what
rainierd serves.  ``benchmarks plan`` sizes the Prometheus tier from it.

The exporter renders a simulated fleet (``--topology``, the snapshot ``bench
scrape`` uses) at ``--variants`` successive ticks, so series names, labels
and cardinality are the daemon's own and values change on every scrape.  A
separate process (``benchmarks/_targets.py``) serves those pre-rendered, pre-gzipped
bodies on many loopback ports; each port is one target, as a monitor shard
is.  The TSDB scrapes K of them every ``--interval``, and the ramp doubles K
until a step is not sustained, then tries once between the last sustained
step and the first that was not.

A step is **sustained** when, over its window of whole intervals: every
target was scraped once per interval (none missed), no scrape failed, none
took as long as the interval, and the samples appended (the TSDB's own
counter) were at least 99 % of those offered (K x series per target / the
interval).  The first part is read back from the TSDB (its ``up`` and
``scrape_duration_seconds`` series); CPU and RSS come from /proc.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks._progress import Progress
from benchmarks._table import print_table
from benchmarks.tsdb_rule import (
    SUSTAINED_SHARE,
    Step,
    metric_sum,
    next_targets,
    quiet_phase,
    scrape_counts,
    shortfalls,
)
from harness.procs import cpu_s, free_port, max_rss_bytes, require_binary, rss_bytes
from harness.scrape import current_values
from harness.waits import poll_until
from rainierd.fleet.topology import PRESETS

__all__ = ["ENGINES", "HELP", "Engine", "add_arguments", "bench_tsdb", "run"]

HELP: Final = ("samples/s one real Prometheus and one VictoriaMetrics ingest from rainierd targets, ramped until "
        "they fall behind")

_JOB = "rainierd"


@dataclass(frozen=True, slots=True, kw_only=True)
class Engine:
    """One TSDB: how to start it, and which of its own metrics count what it ingested."""

    name: str
    package: str  # the Debian package
    binary: str
    ready_path: str
    appended: str  # counter family: samples appended to its storage
    series: str  # its count of active series (a series key of its /metrics)

    def argv(self, *, config: Path, data: Path, port: int) -> list[str]:
        """Return its command line: ``config`` to scrape, storage in ``data``, HTTP on 127.0.0.1:``port``."""
        if self.name == "prometheus":
            return [self.binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                    f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
        # latencyOffset 0: the step's scrapes are read back at once, not 30 s later.
        return [self.binary, f"-promscrape.config={config}", f"-storageDataPath={data}",
                f"-httpListenAddr=127.0.0.1:{port}", "-search.latencyOffset=0s", "-loggerLevel=WARN"]


ENGINES: dict[str, Engine] = {
    "prometheus": Engine(name="prometheus", package="prometheus", binary="prometheus", ready_path="/-/ready",
                         appended="prometheus_tsdb_head_samples_appended_total",
                         series="prometheus_tsdb_head_series"),
    # vm_rows_added_to_storage_total, not vm_rows_inserted_total: rows that reached the storage, not the
    # ingestion path's intake; hour_metric_ids is what its docs call active series.
    "victoria-metrics": Engine(name="victoria-metrics", package="victoria-metrics", binary="victoria-metrics",
                               ready_path="/health", appended="vm_rows_added_to_storage_total",
                               series='vm_cache_entries{type="storage/hour_metric_ids"}'),
}


def _config(ports: Sequence[int], interval_s: float) -> dict[str, Any]:
    interval = f"{round(interval_s * 1000)}ms"
    return {"global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": [{"job_name": _JOB, "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]
                                if ports else []}]}


@dataclass
class _Tsdb:
    engine: Engine
    proc: subprocess.Popen[bytes]
    port: int
    config: Path

    def targets(self, ports: Sequence[int], interval_s: float) -> None:
        self.config.write_text(json.dumps(_config(ports, interval_s)))
        self.proc.send_signal(signal.SIGHUP)  # both reread their scrape config on SIGHUP

    def metrics(self) -> dict[str, float]:
        """Return the two families of its own /metrics the benchmark reads ({} while it does not answer)."""
        return current_values(self.port, timeout_s=30.0,
                              only=(self.engine.appended, self.engine.series.split("{", 1)[0]))

    def query(self, expr: str, at: float) -> dict[str, list[float]]:
        """Return {instance: values} of a range selector evaluated at ``at``."""
        query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}", "nocache": "1"})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/query?{query}", timeout=60) as response:
            result = json.load(response)["data"]["result"]
        return {r["metric"]["instance"]: [float(v) for _t, v in r["values"]] for r in result}


@contextlib.contextmanager
def _running(engine: Engine, workdir: Path, interval_s: float) -> Iterator[_Tsdb]:
    require_binary(engine.binary, package=engine.package)
    port, config = free_port(), workdir / f"{engine.name}.yml"
    config.write_text(json.dumps(_config([], interval_s)))
    with (workdir / f"{engine.name}.log").open("w") as log:
        proc = subprocess.Popen(engine.argv(config=config, data=workdir / engine.name, port=port),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: _answers(port, engine.ready_path), 60, f"{engine.name} to be ready")
        yield _Tsdb(engine, proc, port, config)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2):
            return True
    except OSError:
        return False


def _served(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as response:
        return int(response.read())


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    interval_s: float
    window_intervals: int
    series_per_target: int
    targets_pid: int


def _step(tsdb: _Tsdb, ports: Sequence[int], run: _Run) -> Step:
    interval = run.interval_s
    started = time.monotonic()
    before = {p: _served(p) for p in ports}
    tsdb.targets(ports, interval)
    # Warm: every target scraped three times since the reload, so its series exist and two scrapes were appended.
    with contextlib.suppress(AssertionError):  # a TSDB that cannot get there fails the step on missed scrapes
        poll_until(lambda: all(_served(p) >= before[p] + 3 for p in ports), max(30.0, 20 * interval),
                   "every target scraped")
    warmup_s = time.monotonic() - started
    polls: list[tuple[float, float]] = []
    while not polls or polls[-1][0] - polls[0][0] < interval:
        polls.append((time.time(), metric_sum(tsdb.metrics(), tsdb.engine.appended)))
        time.sleep(interval / 25)
    phase = quiet_phase(polls, interval)
    now = time.time()
    t0 = now - now % interval + phase
    while t0 < now + 0.05:
        t0 += interval
    window = run.window_intervals * interval
    time.sleep(max(0.0, t0 - time.time()))
    wall0, m0, cpu0, tcpu0 = time.time(), tsdb.metrics(), cpu_s(tsdb.proc.pid), cpu_s(run.targets_pid)
    time.sleep(max(0.0, t0 + window - time.time()))
    wall1, m1, cpu1, tcpu1 = time.time(), tsdb.metrics(), cpu_s(tsdb.proc.pid), cpu_s(run.targets_pid)
    rss, hwm = rss_bytes(tsdb.proc.pid), max_rss_bytes(tsdb.proc.pid)
    time.sleep(interval + 2.0)  # the window's last scrapes finish and are flushed (VictoriaMetrics: ~1 s)
    selector = f'{{job="{_JOB}"}}[{round(window * 1000)}ms]'
    up = tsdb.query(f"up{selector}", wall1)
    durations = tsdb.query(f"scrape_duration_seconds{selector}", wall1)
    scrapes = scrape_counts(up, durations, targets=[f"127.0.0.1:{p}" for p in ports],
                            per_target=run.window_intervals, interval_s=interval)
    elapsed = wall1 - wall0
    offered = len(ports) * run.series_per_target / interval
    appended = (metric_sum(m1, tsdb.engine.appended) - metric_sum(m0, tsdb.engine.appended)) / elapsed
    return Step(
        targets=len(ports), scraped_series=len(ports) * run.series_per_target,
        tsdb_series=m1.get(tsdb.engine.series, float("nan")), window_s=elapsed,
        offered_samples_per_s=offered, appended_samples_per_s=appended, scrapes=scrapes,
        tsdb_cpu_cores=(cpu1 - cpu0) / elapsed, tsdb_rss_bytes=rss, tsdb_max_rss_bytes=hwm,
        targets_cpu_cores=(tcpu1 - tcpu0) / elapsed, warmup_s=warmup_s,
        shortfalls=shortfalls(scrapes, offered_per_s=offered, appended_per_s=appended),
    )


def _wait_for(gate: Path | None, idle: Callable[[], None], progress: Progress) -> None:
    """Return once ``gate`` exists, scraping nothing meanwhile (a shared machine's signal that it is free)."""
    if gate is None or gate.exists():
        return
    idle()
    progress.note(f"waiting for {gate}")
    while not gate.exists():
        time.sleep(10)


def _ramp(engine: Engine, ports: Sequence[int], run: _Run, args: argparse.Namespace, *,
          workdir: Path, progress: Progress) -> dict[str, Any]:
    gate = Path(args.wait_for_file) if args.wait_for_file else None
    steps: list[Step] = []
    stopped = "a step was not sustained"
    started = time.monotonic()
    with _running(engine, workdir, run.interval_s) as tsdb:
        while (k := next_targets([(s.targets, s.sustained) for s in steps], start=args.start, factor=2.0,
                                 max_targets=len(ports), refine=args.refine)) is not None:
            if steps:
                last = steps[-1]
                step_s = last.warmup_s + last.window_s + 3 * run.interval_s + 3
                if time.monotonic() - started + step_s * 1.2 > args.budget:
                    stopped = "time budget"
                    break
                if last.tsdb_max_rss_bytes * k / last.targets > args.memory_cap_gib * 2**30:
                    stopped = "memory cap"
                    break
            _wait_for(gate, lambda: tsdb.targets([], run.interval_s), progress)
            step = _step(tsdb, ports[:k], run)
            progress.step(f"{engine.name}: {k} targets, {step.appended_samples_per_s:,.0f} of "
                 f"{step.offered_samples_per_s:,.0f} samples/s, CPU {step.tsdb_cpu_cores:.2f}, "
                 f"{'sustained' if step.sustained else '; '.join(step.shortfalls)}")
            steps.append(step)
        else:
            if all(s.sustained for s in steps):
                stopped = "max targets"
    failed = [s.targets for s in steps if not s.sustained]
    best = max((s for s in steps if s.sustained and s.targets < min(failed, default=math.inf)),
               key=lambda s: s.targets, default=None)
    return {"engine": engine.name, "version": _version(engine.package), "stopped_because": stopped,
            "ceiling_found": bool(failed), "largest_sustained": _row(best) if best else None,
            "steps": [_row(s) for s in steps]}


def _row(step: Step) -> dict[str, Any]:
    return {**asdict(step), "sustained": step.sustained}


def _version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip() or "unknown"


def _render(topology: str, variants: int, seed: int, directory: Path) -> dict[str, Any]:
    """Write ``variants`` successive renders of the exporter (plain and gzipped, as it serves them)."""
    import asyncio  # noqa: PLC0415  (only here: the controller is otherwise synchronous)

    from benchmarks.scrape import snapshots  # noqa: PLC0415  (pulls in the simulator and the core)
    from rainierd.exporter import MetricsRoute, build_exporter  # noqa: PLC0415

    made = snapshots(topology, seed)
    _core, snap, topo = next(made)
    current = [snap]
    exporter = build_exporter(topo, lambda: current[0])
    metrics = MetricsRoute(exporter.render, generation=lambda: current[0].generation)

    async def render() -> list[int]:
        series = []
        for i in range(variants):
            if i:
                current[0] = next(made)[1]
                await metrics.refresh()  # the next tick's values
            plain = await metrics.body(gzip=False)
            (directory / f"body-{i}").write_bytes(plain)
            (directory / f"body-{i}.gz").write_bytes(await metrics.body(gzip=True))
            series.append(sum(1 for line in plain.splitlines() if line and not line.startswith(b"#")))
        return series

    series = asyncio.run(render())
    plain = (directory / "body-0").read_bytes()
    return {"topology": topology, "chips": topo.n_chips, "series_per_target": round(sum(series) / len(series)),
            "series_per_variant": series,
            "body_bytes": len(plain), "gzip_bytes": (directory / f"body-{variants - 1}.gz").stat().st_size}


def _machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    memory = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    return {"cores": os.cpu_count(), "cpu": model, "memory_bytes": memory, "kernel": platform.release()}


def bench_tsdb(args: argparse.Namespace) -> dict[str, Any]:
    """Return the report: the rendered targets, then each engine's ramp (module docstring).

    Raises MissingBinaryError, before rendering anything, when an engine is not installed.
    """
    for name in args.engines:
        require_binary(ENGINES[name].binary, package=ENGINES[name].package)
    gate = Path(args.wait_for_file) if args.wait_for_file else None
    with tempfile.TemporaryDirectory(prefix="rainierd-tsdb-") as tmp:
        workdir = Path(tmp)
        bodies = workdir / "bodies"
        bodies.mkdir()
        progress = Progress(prefix="bench tsdb: ")
        _wait_for(gate, lambda: None, progress)
        progress.note(f"rendering {args.variants} scrapes of {args.topology}")
        rendered = _render(args.topology, args.variants, args.seed, bodies)
        server = subprocess.Popen([sys.executable, "-m", "benchmarks._targets", str(bodies),
                                   str(args.max_targets)], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            ports = json.loads(server.stdout.readline())
            run = _Run(interval_s=args.interval, window_intervals=args.window,
                       series_per_target=rendered["series_per_target"], targets_pid=server.pid)
            engines = [_ramp(ENGINES[name], ports, run, args, workdir=workdir, progress=progress)
                       for name in args.engines]
        finally:
            progress.close()
            server.terminate()
            server.wait(timeout=30)
    return {"benchmark": "tsdb", "date": datetime.date.today().isoformat(), "machine": _machine(),
            "targets": {**rendered, "variants": args.variants}, "interval_s": args.interval,
            "window_intervals": args.window,
            "rule": f"sustained: over the window every target scraped once per interval, no scrape failed or took "
                    f"the whole interval, and appended samples/s >= {SUSTAINED_SHARE} x offered",
            "engines": engines}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--topology", default="rainier", choices=list(PRESETS),
                        help="the fleet each target exports, one shard's worth (default rainier: ~150k series)")
    parser.add_argument("--variants", type=int, default=4,
                        help="successive ticks rendered; scrapes cycle through them")
    parser.add_argument("--interval", type=float, default=1.0, help="scrape interval in seconds")
    parser.add_argument("--window", type=int, default=15, help="intervals measured per step, after warm-up")
    parser.add_argument("--start", type=int, default=1, help="targets in the first step; each next doubles")
    parser.add_argument("--max-targets", type=int, default=16)
    parser.add_argument("--refine", type=int, default=1,
                        help="steps between the last sustained and the first failing count (bisection)")
    parser.add_argument("--budget", type=float, default=210.0, help="seconds per engine; no step starts past it")
    parser.add_argument("--memory-cap-gib", type=float, default=8.0,
                        help="no step that would take the TSDB's RSS past this (projected from the last step)")
    parser.add_argument("--wait-for-file", metavar="PATH",
                        help="on a shared machine: before rendering and each step, wait (scraping nothing) until "
                             "PATH exists")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a table."""
    report = bench_tsdb(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    rows = []
    for engine in report["engines"]:
        for s in engine["steps"]:
            sc = s["scrapes"]
            rows.append([engine["engine"], str(s["targets"]), f"{s['scraped_series']:,}",
                         f"{s['offered_samples_per_s']:,.0f}", f"{s['appended_samples_per_s']:,.0f}",
                         f"{_ms(sc['duration_p50_s'])} / {_ms(sc['duration_p99_s'])}",
                         f"{sc['missed']} / {sc['failed']} / {sc['overrun']}", f"{s['tsdb_cpu_cores']:.2f}",
                         f"{s['tsdb_rss_bytes'] / 2**20:,.0f} MiB", f"{s['targets_cpu_cores']:.2f}",
                         "yes" if s["sustained"] else "no: " + "; ".join(s["shortfalls"])])
    print_table(["engine", "targets", "series", "offered samples/s", "appended samples/s", "scrape p50 / p99",
                 "missed / failed / overran", "TSDB CPU (cores)", "TSDB RSS", "targets CPU", "sustained"], rows)
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.0f} ms"
