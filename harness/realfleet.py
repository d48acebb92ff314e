"""Real Trainium2 nodes as a monitor meets them, on one machine: each node's
neuron-monitor (the documentation-built generator, ``harness/neuron_monitor.py``)
piped into a real ``rainierd bridge neuron-monitor`` process, its EFA driver's
counters (``harness/efa_sysfs.py``) in a directory the bridge reads as ``/sys``,
a real broker and a real ``rainierd monitor`` on an inventory of those nodes.

The end-to-end tests of real nodes and the real-node soak benchmark share it,
so both measure the same pipeline.  Time: the generators count simulated
seconds from 0; ``RealFleet.wall(t)`` is when simulated second ``t`` happens
on this machine's clock, so a report is written to its bridge when
neuron-monitor would have written it, and the EFA counters on disk are those
of the report's capture.  The truth of every report written is kept
(``RealNode.samples``) to score what the monitor says against.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.efa_sysfs import EfaDegraded, EfaNode, EfaSysfsTree, EfaVanish
from harness.neuron_monitor import (
    DeviceVanish,
    EccErrors,
    ExecErrors,
    LowFlop,
    NeuronMonitor,
    NodeSpec,
    Sample,
    Schedule,
    UtilCollapse,
)
from harness.procs import free_port
from harness.scrape import current_values
from harness.waits import wait_until

__all__ = [
    "FAULT_AT_S",
    "SEVEN_FAULTS",
    "Expected",
    "NodePlan",
    "RealFleet",
    "RealNode",
    "Scoreboard",
    "drive",
    "inventory_toml",
    "judge",
    "node_plans",
]


@dataclass(frozen=True, kw_only=True)
class NodePlan:
    """One real node to run: its names, its neuron-monitor and its EFA devices."""

    hostname: str
    instance_id: str
    monitor: NeuronMonitor
    efa: EfaNode = field(default_factory=EfaNode)


def inventory_toml(plans: Sequence[NodePlan], *, site: str = "use2-dc1", ultraserver: str = "us-0000",
                   detail: bool = True) -> str:
    """Return an inventory (rainierd/fleet/inventory.py's format) of one site holding the nodes of ``plans`` in
    UltraServers of 4, in order (node ``i`` is ``n<i>``)."""
    lines = [f'[[site]]\nname = "{site}"\n']
    for i, plan in enumerate(plans):
        if i % 4 == 0:
            lines.append(f'[[site.ultraserver]]\nname = "{ultraserver}-{i // 4}"\n')
        lines.append(f'[[site.ultraserver.node]]\nindex = {i % 4}\nhostname = "{plan.hostname}"\n'
                     f'instance_id = "{plan.instance_id}"\n' + ("detail = true\n" if detail else ""))
    return "\n".join(lines)


@dataclass(eq=False)
class RealNode:
    """One node's bridge process and what has been written to it."""

    index: int
    plan: NodePlan
    sys_root: Path  # what the bridge reads as /sys
    tree: EfaSysfsTree
    metrics_port: int
    log_path: Path
    proc: asyncio.subprocess.Process | None = None
    samples: list[Sample] = field(default_factory=list)  # every report written, in order, with its truth
    written_wall_s: list[float] = field(default_factory=list)  # when each was written (wall clock)
    stopped: bool = False  # SIGSTOPped


class RealFleet:
    """A monitor and a bridge a node, fed in real time; an async context manager that stops every process.

    ``bridge_args`` and ``monitor_args`` are added to each command line (e.g. ``--tick 1``).
    """

    def __init__(self, plans: Sequence[NodePlan], *, workdir: Path, broker_url: str,
                 bridge_args: Sequence[str] = (), monitor_args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.broker_url = broker_url
        self.inventory = workdir / "fleet.toml"
        self.inventory.write_text(inventory_toml(plans))
        self.monitor_port = free_port()
        self.bridge_args = tuple(bridge_args)
        self.monitor_args = tuple(monitor_args)
        self.nodes = [self._node(i, plan) for i, plan in enumerate(plans)]
        self.monitor: asyncio.subprocess.Process | None = None
        self.wall0 = float("nan")
        self._feeders: list[asyncio.Task[None]] = []
        self._logs: list[Any] = []

    def _node(self, i: int, plan: NodePlan) -> RealNode:
        sys_root = self.workdir / f"n{i}-sys"
        tree = EfaSysfsTree(sys_root / "class" / "infiniband", plan.efa)
        return RealNode(i, plan, sys_root, tree, free_port(), self.workdir / f"bridge-n{i}.log")

    async def _spawn(self, args: Sequence[str], log_path: Path, *, stdin: int | None = None,
                     ) -> asyncio.subprocess.Process:
        log = log_path.open("w")
        self._logs.append(log)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rainierd", *args, "--log-format", "json",
            stdin=stdin, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env)

    async def __aenter__(self) -> RealFleet:
        self.monitor = await self._spawn(
            ["monitor", "--mqtt-url", self.broker_url, "--metrics-addr", f"127.0.0.1:{self.monitor_port}",
             "--topology", str(self.inventory), *self.monitor_args], self.workdir / "monitor.log")
        await wait_until(lambda: current_values(self.monitor_port).get("rainier_mqtt_connected") == 1, 20,
                         "the monitor to connect")
        for node in self.nodes:
            node.tree.write()  # the driver's counters exist before the bridge starts
            node.proc = await self._spawn(
                ["bridge", "neuron-monitor", "--node", node.plan.hostname, "--topology", str(self.inventory),
                 "--mqtt-url", self.broker_url, "--mqtt-qos", "1", "--efa-sysfs", str(node.sys_root),
                 "--listen", f"127.0.0.1:{node.metrics_port}", *self.bridge_args],
                node.log_path, stdin=asyncio.subprocess.PIPE)
        # The reports start once every bridge is up, as neuron-monitor's first comes a period after both start:
        # a first line left waiting in the pipe while a bridge starts on a loaded machine starts its sample clock
        # late, and every line read on time after it steps the clock back (its frame without counters).
        await wait_until(lambda: all(self._listening(node) for node in self.nodes), 60, "the bridges to listen")
        self.wall0 = time.time()
        self._feeders = [asyncio.create_task(self._feed(node), name=f"feed-n{node.index}") for node in self.nodes]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._feeders:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._feeders, return_exceptions=True)
        procs = [node.proc for node in self.nodes if node.proc is not None]
        for node in self.nodes:
            if node.proc is not None and node.stopped:
                node.proc.send_signal(signal.SIGCONT)
        if self.monitor is not None:
            procs.append(self.monitor)
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        for log in self._logs:
            log.close()

    def _listening(self, node: RealNode) -> bool:
        """Return True once ``node``'s bridge answers on its metrics port; fail at once if a process has died."""
        self.check_alive()
        return bool(current_values(node.metrics_port))

    def wall(self, t_s: float) -> float:
        """Return when simulated second ``t_s`` happens on the wall clock."""
        return self.wall0 + t_s

    def now_s(self) -> float:
        """Return the simulated second it is now."""
        return time.time() - self.wall0

    async def _feed(self, node: RealNode) -> None:
        """Write each report of the node's neuron-monitor when it is due, the EFA counters of its capture on
        disk first; a bridge that does not read (stopped) makes the writes wait, as a pipe does."""
        assert node.proc is not None
        assert node.proc.stdin is not None
        for sample in node.plan.monitor:
            delay = self.wall(sample.write_at_s) - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await asyncio.to_thread(node.tree.step, sample.captured_at_s)
            node.proc.stdin.write(sample.wire())
            await node.proc.stdin.drain()
            node.samples.append(sample)
            node.written_wall_s.append(time.time())

    async def until(self, t_s: float) -> None:
        """Wait until simulated second ``t_s``; fail at once if a process has died."""
        while (left := self.wall(t_s) - time.time()) > 0:
            self.check_alive()
            await asyncio.sleep(min(left, 1.0))
        self.check_alive()

    def check_alive(self) -> None:
        """Raise AssertionError naming a bridge, feeder or the monitor that has ended."""
        for node in self.nodes:
            if node.proc is not None and node.proc.returncode is not None:
                raise AssertionError(f"bridge n{node.index} exited {node.proc.returncode}: "
                                     f"{node.log_path.read_text()[-2000:]}")
        for task in self._feeders:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise AssertionError(f"{task.get_name()} failed: {task.exception()!r}")
        if self.monitor is not None and self.monitor.returncode is not None:
            raise AssertionError(f"the monitor exited {self.monitor.returncode}: "
                                 f"{(self.workdir / 'monitor.log').read_text()[-2000:]}")

    async def stall(self, node: int, seconds: float) -> None:
        """Stop node ``node``'s bridge for ``seconds`` (SIGSTOP, then SIGCONT): its reports queue in the pipe."""
        real = self.nodes[node]
        assert real.proc is not None
        real.proc.send_signal(signal.SIGSTOP)
        real.stopped = True
        try:
            await asyncio.sleep(seconds)
        finally:
            real.proc.send_signal(signal.SIGCONT)
            real.stopped = False

    def api(self, path: str) -> Any:
        """Return the monitor's read API document at ``path`` (e.g. ``/api/v1/events?limit=1000``)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}{path}", timeout=10) as response:
            return json.loads(response.read())

    def metrics(self) -> dict[str, float]:
        """Return the monitor's samples by series."""
        return current_values(self.monitor_port)

    def bridge_metrics(self, node: int) -> dict[str, float]:
        """Return node ``node``'s bridge's samples by series."""
        return current_values(self.nodes[node].metrics_port)


# ---- the real-node scenarios the end-to-end test and the soak benchmark share ----

CHIPS_PER_NODE = 16
FAULT_AT_S = 90.0  # after the detectors' learning (30 s of samples) and a bridge's stall


@dataclass(frozen=True)
class Expected:
    """A fault's raise: an entity kind and id, the states it may go to, and the reasons of which it gives one."""

    what: str
    entity: str
    id: int
    states: frozenset[str]
    reasons: frozenset[str]


SEVEN_FAULTS: tuple[Expected, ...] = (
    Expected("utilisation collapse", "chip", 0 * CHIPS_PER_NODE + 3, frozenset({"straggler"}),
             frozenset({"utilisation"})),
    Expected("30 % low FLOP", "chip", 1 * CHIPS_PER_NODE + 5, frozenset({"straggler"}), frozenset({"efficiency"})),
    Expected("uncorrectable HBM ECC", "chip", 2 * CHIPS_PER_NODE + 7, frozenset({"failed"}),
             frozenset({"ecc_uncorrected"})),
    Expected("rising execution errors", "chip", 3 * CHIPS_PER_NODE + 9, frozenset({"failed"}),
             frozenset({"exec_errors"})),
    # The generator's degraded port also sees its remote peers unresponsive (EfaDegraded.event_rate_s): down.
    Expected("degraded EFA port", "efa", 0 * CHIPS_PER_NODE + 2, frozenset({"degraded", "down"}),
             frozenset({"retransmits", "bandwidth", "unresponsive"})),
    Expected("EFA device vanishing", "efa", 1 * CHIPS_PER_NODE + 4, frozenset({"stale"}), frozenset({"absent"})),
    Expected("Neuron device vanishing", "chip", 2 * CHIPS_PER_NODE + 11, frozenset({"failed", "stale"}),
             frozenset({"absent"})),
)
"""What ``node_plans(faults=True)`` injects, and how the monitor must name each."""


def node_plans(*, faults: bool, period_s: float = 5.0, fault_at_s: float = FAULT_AT_S, seed: int = 100,
               ) -> list[NodePlan]:
    """Return four nodes of one UltraServer at ``period_s`` (neuron-monitor's default 5 s), 64 runtimes each
    at LNC=2; with ``faults``, ``SEVEN_FAULTS`` from ``fault_at_s``, each on its own device."""
    chip: dict[int, list[Any]] = {
        0: [UtilCollapse(device=3, start_s=fault_at_s)],
        1: [LowFlop(device=5, start_s=fault_at_s, factor=0.7)],
        2: [EccErrors(device=7, start_s=fault_at_s, kind="mem_ecc_uncorrected", rate_s=0.2),
            DeviceVanish(device=11, start_s=fault_at_s)],
        3: [ExecErrors(device=9, start_s=fault_at_s, kind="hardware", rate_s=0.5, growth_s2=0.01)],
    } if faults else {}
    efa: dict[int, list[Any]] = {
        0: [EfaDegraded(device=2, start_s=fault_at_s)],
        1: [EfaVanish(device=4, start_s=fault_at_s)],
    } if faults else {}
    out = []
    for i in range(4):
        instance = f"i-0{i}a1b2c3d4e5f6071"
        monitor = NeuronMonitor(node=NodeSpec(lnc=2, instance_id=instance), schedule=Schedule(period_s=period_s),
                                faults=chip.get(i, []), seed=seed + i)
        out.append(NodePlan(hostname=f"ip-10-0-17-{8 + i}", instance_id=instance, monitor=monitor,
                            efa=EfaNode(faults=efa.get(i, []), seed=seed + 100 + i)))
    return out


@dataclass
class Scoreboard:
    """Each node's effective FP8 as the read API shows it, against the truth of the report it is from."""

    period_s: float
    errors: list[float] = field(default_factory=list)  # |monitor - truth| / truth, a node and a poll
    top_chip_flops: float = 0.0  # the largest chip figure seen
    top_node_flops: float = 0.0
    worst: list[tuple[float, str, float, float, float]] = field(default_factory=list)  # (error, node, t_s, seen, want)
    unknown: int = 0  # node figures the monitor said it did not know (a chip's null): not compared, counted

    def add(self, fleet: RealFleet, document: dict[str, Any]) -> None:
        """Score one ``/api/v1/ultraservers/<id>`` document: each node whose chips share one sample time is
        compared with the truth of the report captured then (the bridge's clock starts at its first line and
        moves by each report's captured period)."""
        by_node: dict[int, list[dict[str, Any]]] = {}  # by node index
        for chip in document["chips"]:
            by_node.setdefault(chip["index"] // CHIPS_PER_NODE, []).append(chip)
            self.top_chip_flops = max(self.top_chip_flops, chip["effective_flops"] or 0.0)
        for node in fleet.nodes:
            chips = by_node.get(node.index, [])
            self.top_node_flops = max(self.top_node_flops, sum(c["effective_flops"] or 0.0 for c in chips))
            times = {c["sample_t_s"] for c in chips if c["sample_t_s"] is not None}
            if len(times) != 1 or len(node.samples) < 3:
                continue
            (t_s,) = times
            offset = node.written_wall_s[0] - node.samples[0].captured_at_s
            k = min(range(len(node.samples)), key=lambda i: abs(node.samples[i].captured_at_s + offset - t_s))
            if k == 0 or abs(node.samples[k].captured_at_s + offset - t_s) > self.period_s / 2:
                continue
            cores = node.samples[k].truth.cores
            if cores is None:
                continue
            truth = np.asarray(cores.flop_rate_s, dtype=float)
            seen = {c["index"] - node.index * CHIPS_PER_NODE: c["effective_flops"] for c in chips}
            known = [d for d in range(CHIPS_PER_NODE) if np.isfinite(truth[d])]
            want = float(truth[known].sum())
            if want <= 0:
                continue
            if any(seen.get(d) is None for d in known):
                self.unknown += 1  # unknown, not wrong: a chip's first interval, or its counter restarted
                continue
            got = sum(seen[d] for d in known)
            self.errors.append(abs(got - want) / want)
            entry = (self.errors[-1], f"n{node.index}", t_s, got, want)
            if entry not in self.worst:
                self.worst = sorted([*self.worst, entry], reverse=True)[:5]

    def percentile(self, q: float) -> float:
        """Return the ``q``-th percentile of the errors (NaN with none)."""
        return float(np.percentile(self.errors, q)) if self.errors else float("nan")


def judge(events: Sequence[dict[str, Any]], expected: Sequence[Expected], *, wall_fault_s: float,
          ) -> tuple[dict[str, float], list[str], list[dict[str, Any]]]:
    """Return (time to detect each expected fault found, in seconds from its start; the faults not found; every
    other raise: a false alarm)."""
    raises = [e for e in events if e["after"] != "healthy"]
    found: dict[str, float] = {}
    missing: list[str] = []
    for x in expected:
        hits = [e for e in raises if e["entity"] == x.entity and e["index"] == x.id and e["after"] in x.states
                and x.reasons & set(e["reasons"])]
        if hits:
            found[x.what] = min(e["t_s"] for e in hits) - wall_fault_s
        else:
            missing.append(x.what)
    culprits = {(x.entity, x.id) for x in expected}
    return found, missing, [e for e in raises if (e["entity"], e["index"]) not in culprits]


async def drive(fleet: RealFleet, board: Scoreboard, *, run_s: float, stall: tuple[int, float, float] | None = None,
                ultraserver: str = "u0") -> None:
    """Run ``fleet`` until simulated second ``run_s``, scoring the read API about once a second; with ``stall``
    (node, at simulated second, seconds), stop that node's bridge once."""
    stalled = stall is None
    while fleet.now_s() < run_s:
        if not stalled and stall is not None and fleet.now_s() >= stall[1]:
            stalled = True
            await fleet.stall(stall[0], stall[2])
        await fleet.until(min(run_s, fleet.now_s() + 1.0))
        try:
            document = await asyncio.to_thread(fleet.api, f"/api/v1/ultraservers/{ultraserver}")
        except OSError:
            continue
        board.add(fleet, document)
