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

from harness.efa_sysfs import EfaNode, EfaSysfsTree
from harness.neuron_monitor import NeuronMonitor, Sample
from harness.procs import free_port
from harness.scrape import current_values
from harness.waits import wait_until

__all__ = ["NodePlan", "RealFleet", "RealNode", "inventory_toml"]


@dataclass(frozen=True, kw_only=True)
class NodePlan:
    """One real node to run: its names, its neuron-monitor and its EFA devices."""

    hostname: str
    instance_id: str
    monitor: NeuronMonitor
    efa: EfaNode = field(default_factory=EfaNode)


def inventory_toml(plans: Sequence[NodePlan], *, site: str = "use2-dc1", ultraserver: str = "us-0000",
                   detail: bool = True) -> str:
    """Return an inventory (rainierd/inventory.py's format) of one site holding the nodes of ``plans`` in
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
