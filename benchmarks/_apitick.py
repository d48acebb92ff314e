"""``benchmarks api --tick-pairs N``: what a terminal UI polling the read API
does to the monitor's tick, measured in one run.

The monitor is the daemon's monitor role itself (``rainierd.daemon.
monitor_role``: MQTT session, analysis loop, exporter, API, probes) running
on this process's event loop, fed by ``rainierd simulate`` through a real
Mosquitto (benchmarks/_fleet.py) with random faults and the simulator's job
mix.  After a warm-up, windows alternate: off (no client), on (a client in
its own process polling once a tick what a terminal UI asks: ``POLL``), N
pairs.  Each analysis's own figures are read from the snapshot it publishes
(``analysis_s``, the data's lag, the monitor's worst loop lag, its backlog),
and the loop's lag is also sampled every 10 ms as ``benchmarks api`` does.
Reported per window: medians and p99 of the analysis time and the loop lag;
over all windows, on against off.

``--follow-command CMD`` then runs CMD (``{url}``: the monitor's URL) in a
real terminal for ``--follow-s`` seconds while the monitor ticks, and
reports its CPU and memory (benchmarks/_follow.py) and the monitor's tick
meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from benchmarks._fleet import simulator
from benchmarks._follow import follow
from harness.procs import mosquitto
from rainierd.cli import command_settings
from rainierd.daemon import SWITCH_INTERVAL_S, MonitorRole, monitor_role
from rainierd.fleet.inventory import load_topology
from rainierd.runtime.looplag import LoopLag
from rainierd.runtime.malloc import keep_freed_memory

__all__ = ["POLL", "Tick", "compare", "pooled", "ratios", "spread", "tick_run", "window_report"]

# What a terminal UI asks once a tick (rainierd top): the fleet, the heat map's page of every UltraServer
# (gzipped), the worst jobs, the latest events and one UltraServer drilled into ({k}: a different one each tick).
POLL: Final = (
    ("/api/v1/fleet", False), ("/api/v1/ultraservers?limit=10000&fields=site,effective_share,unhealthy_total", True),
    ("/api/v1/jobs?limit=50", False), ("/api/v1/events?limit=50", False), ("/api/v1/ultraservers/u{k}", False),
)

_POLLER = """
import gzip, json, sys, time, urllib.error, urllib.request
base, seconds, tick_s, n_us, poll = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), \
    json.loads(sys.argv[5])
out = {target: {"latency_s": [], "bytes": 0, "errors": 0} for target, _gz in poll}
end, k = time.monotonic() + seconds, 0
while (began := time.monotonic()) < end:
    for target, gz in poll:
        row = out[target]
        started = time.perf_counter()
        try:
            request = urllib.request.Request(base + target.format(k=k % n_us),
                                             headers={"Accept-Encoding": "gzip"} if gz else {})
            with urllib.request.urlopen(request, timeout=30) as r:
                body = r.read()
                row["bytes"] = len(body)
                json.loads(gzip.decompress(body) if r.headers.get("Content-Encoding") == "gzip" else body)
        except (OSError, ValueError):
            row["errors"] += 1
            continue
        row["latency_s"].append(time.perf_counter() - started)
    k += 7919  # a prime: every UltraServer in turn, far apart
    time.sleep(max(0.0, began + tick_s - time.monotonic()))
print(json.dumps({"targets": out, "cpu_s": time.process_time(), "seconds": seconds}))
"""


@dataclass(frozen=True)
class Tick:
    """One analysis, as its snapshot reports it, and when it was published (the loop's clock)."""

    t_s: float
    analysis_s: float
    lag_s: float
    loop_lag_worst_s: float
    backlog_messages: int
    overloaded: bool


def spread(values: list[float]) -> dict[str, float | None]:
    """Return the median, p99 and max of ``values`` (None each when empty)."""
    if not values:
        return {"median": None, "p99": None, "max": None}
    return {"median": statistics.median(values), "p99": float(np.percentile(values, 99)), "max": max(values)}


def window_report(kind: str, ticks: list[Tick], loop_lags: list[float]) -> dict[str, Any]:
    """Return one window's figures: its analyses' times, data lag, backlog and worst loop lag as the monitor
    reported them, and the loop's lag as sampled."""
    return {
        "kind": kind, "ticks": len(ticks),
        "analysis_s": spread([t.analysis_s for t in ticks]),
        "loop_lag_s": spread(loop_lags),
        "monitor_loop_lag_worst_s": spread([t.loop_lag_worst_s for t in ticks]),
        "lag_s": spread([t.lag_s for t in ticks]),
        "backlog_messages_max": max((t.backlog_messages for t in ticks), default=None),
        "overloaded_ticks": sum(t.overloaded for t in ticks),
    }


def _ratio(on: float | None, off: float | None) -> float | None:
    return on / off if on is not None and off else None


def pooled(ticks: list[Tick], lags: list[float]) -> dict[str, dict[str, float | None]]:
    """Return the analysis time's and the loop lag's spread over ``ticks`` and ``lags`` (windows of one kind)."""
    return {"analysis_s": spread([t.analysis_s for t in ticks]), "loop_lag_s": spread(lags)}


def ratios(test: dict[str, dict[str, float | None]], base: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """Return ``test`` over ``base`` (``pooled`` figures): their medians' and p99s' ratios (None: either absent)."""
    return {f"{figure}_{stat}": _ratio(test[figure][stat], base[figure][stat])
            for figure in ("analysis_s", "loop_lag_s") for stat in ("median", "p99")}


def compare(windows: list[dict[str, Any]], ticks: dict[str, list[Tick]], lags: dict[str, list[float]],
            ) -> dict[str, Any]:
    """Return on against off: the analysis time's and the loop lag's median and p99 over all ticks of each kind,
    their on/off ratios, and each pair's ratio of medians (window ``2i`` off, ``2i + 1`` on)."""
    off, on = (pooled(ticks.get(kind, []), lags.get(kind, [])) for kind in ("off", "on"))
    pairs = [{f: _ratio(on_w[f]["median"], off_w[f]["median"]) for f in ("analysis_s", "loop_lag_s")}
             for off_w, on_w in zip(windows[0::2], windows[1::2], strict=True)]
    return {"off": off, "on": on, "on_over_off": ratios(on, off), "pairs_on_over_off_median": pairs}


class _Recorder:
    """Keeps each analysis the monitor publishes and the loop's lag every 10 ms, labelled by the window."""

    def __init__(self, role: MonitorRole) -> None:
        self.role = role
        self.kind = "warmup"
        self.ticks: dict[str, list[Tick]] = {}
        self.lags: dict[str, list[float]] = {}
        self.lag = LoopLag(interval_s=0.01, window=10**9)

    def switch(self, kind: str) -> list[Tick]:
        """Label what comes from now on ``kind`` (a new window) and return the list its analyses go to."""
        self.kind = kind
        self.lag.samples.clear()
        return self.ticks.setdefault(kind, [])

    async def run(self) -> None:
        monitor, seen = self.role.monitor, self.role.monitor.generation
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0.005)
            if (snap := monitor.snapshot) is None or snap.generation == seen:
                continue
            seen = snap.generation
            backlog = snap.status.backlog
            self.ticks.setdefault(self.kind, []).append(Tick(
                t_s=loop.time(), analysis_s=snap.analysis_s, lag_s=snap.lag_s,
                loop_lag_worst_s=snap.status.loop_lag_worst_s or 0.0,
                backlog_messages=backlog.messages if backlog is not None else 0,
                overloaded=backlog is not None and backlog.overloaded))

    def take_lags(self) -> list[float]:
        """Return the loop lags sampled since the window began, filing them under it."""
        samples = list(self.lag.samples)
        self.lag.samples.clear()
        self.lags.setdefault(self.kind, []).extend(samples)
        return samples


async def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench api: no {what} after {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


async def _poll(url: str, *, seconds: float, tick_s: float, n_ultraservers: int) -> tuple[dict[str, Any], float]:
    """Return each target's answers as the client saw them, and the client's CPU share of one core (its own
    parsing, which shares this machine's cores with the monitor; its start not counted)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _POLLER, url, str(seconds), str(tick_s), str(n_ultraservers), json.dumps(POLL),
        stdout=subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    report = json.loads(out)
    return {target: {"requests": len(r["latency_s"]), "errors": r["errors"], "bytes": r["bytes"],
                     "latency_s": spread(r["latency_s"])} for target, r in report["targets"].items()}, (
        report["cpu_s"] / report["seconds"])


async def _windows(rec: _Recorder, url: str, *, pairs: int, window_s: float, tick_s: float,
                   n_ultraservers: int) -> list[dict[str, Any]]:
    windows = []
    for index in range(2 * pairs):
        kind = "on" if index % 2 else "off"
        ticks = rec.switch(kind)
        first = len(ticks)
        client: dict[str, Any] = {}
        if kind == "on":
            answers, cpu_share = await _poll(url, seconds=window_s, tick_s=tick_s, n_ultraservers=n_ultraservers)
            client = {"client": answers, "client_cpu_share_of_one_core": cpu_share}
        else:
            await asyncio.sleep(window_s)
        samples = rec.take_lags()
        report = window_report(kind, ticks[first:], samples)
        windows.append(report | client)
        print(f"bench api: window {index + 1}/{2 * pairs} {kind}: {report['ticks']} ticks, analysis median "
              f"{(report['analysis_s']['median'] or 0) * 1e3:.0f} ms", file=sys.stderr, flush=True)
    return windows


async def tick_run(
    preset: str, *, tick_s: float, warmup_s: float, pairs: int, window_s: float, fault_acceleration: float,
    seed: int, follow_command: str | None, follow_s: float, workdir: Path,
) -> dict[str, Any]:
    """Run the monitor role on this loop, fed by a simulator over Mosquitto; return the alternating windows'
    report (``pairs`` of them) and, with ``follow_command``, the follower's."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as run_role sets it
    with mosquitto(workdir) as broker, contextlib.ExitStack() as running:
        settings = command_settings(["monitor", "--topology", preset, "--tick", str(tick_s), "--mqtt-url",
                                     broker.url, "--metrics-addr", "127.0.0.1:0"])
        topology = load_topology(settings.topology, efa_ports_per_node=settings.efa_ports_per_node)
        async with contextlib.AsyncExitStack() as stack:
            role = await monitor_role(settings, topology, stack, url=settings.mqtt_url, protocol=None,
                                      client_id="rainierd-monitor-bench")
            url = f"http://127.0.0.1:{role.server.port}"
            rec = _Recorder(role)
            gc.collect()
            gc.freeze()  # as the daemon does once every part is built
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(make(), name=name) for name, make in role.coroutines.items()]
                tasks += [tg.create_task(rec.run(), name="bench-record"),
                          tg.create_task(rec.lag.run(), name="bench-loop-lag")]
                await _wait(lambda: role.monitor.connection.connected, 120, "MQTT connection")
                simulator(running, preset, mqtt_url=broker.url, tick_s=tick_s, ticks=0, batch_nodes=128,
                          log=workdir / "simulate.log",
                          extra=("--fault-acceleration", str(fault_acceleration), "--sim-jobs", "mix",
                                 "--seed", str(seed)))
                await _wait(lambda: (s := role.monitor.snapshot) is not None and s.computed, 300, "analysis")
                await asyncio.sleep(warmup_s)
                rec.take_lags()
                windows = await _windows(rec, url, pairs=pairs, window_s=window_s, tick_s=tick_s,
                                         n_ultraservers=topology.n_ultraservers)
                followed = None
                if follow_command:
                    rec.switch("follow")
                    followed = await follow(follow_command, url=url, seconds=follow_s)
                    lags = rec.take_lags()
                    followed["monitor_tick"] = window_report("follow", rec.ticks["follow"], lags)
                    # Not alternated: the one follow window against every off window of the run.
                    followed["monitor_tick_over_off"] = ratios(
                        pooled(rec.ticks["follow"], lags), pooled(rec.ticks.get("off", []), rec.lags.get("off", [])))
                snap = role.monitor.snapshot
                for task in tasks:
                    task.cancel()
    assert snap is not None
    unhealthy = {k: int(v.size) for k, v in snap.health.ids.items()} if snap.health else {}
    return {
        "topology": preset, "chips": topology.n_chips, "ultraservers": topology.n_ultraservers,
        "jobs": snap.jobs.n_jobs if snap.jobs else 0, "unhealthy_at_end": unhealthy,
        "recent_events": len(role.monitor.events.recent), "tick_s": tick_s, "warmup_s": warmup_s,
        "window_s": window_s, "fault_acceleration": fault_acceleration, "seed": seed,
        "poll": [target for target, _gz in POLL], "poll_gzip": [target for target, gz in POLL if gz],
        "windows": windows, "comparison": compare(windows, rec.ticks, rec.lags),
        **({"follow": followed} if followed is not None else {}),
    }


def bench_tick(presets: list[str], **options: Any) -> dict[str, Any]:
    """Return the tick report for each preset (a fresh Mosquitto, monitor and simulator each)."""
    keep_freed_memory()  # as run_role does: fleet-sized temporaries are reused
    results = []
    for preset in presets:
        with tempfile.TemporaryDirectory(prefix="bench-api-tick-") as tmp:
            results.append(asyncio.run(tick_run(preset, workdir=Path(tmp), **options)))
    return {"benchmark": "api-tick", "results": results}
