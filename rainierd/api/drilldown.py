"""The drill-down: one UltraServer's 64 chips, 192 NeuronLinks, 64 EFA ports
and 4 nodes, one series each with its health state, served on demand at
``/probe?target=u<id>`` in the style of the blackbox and SNMP exporters.

Exporting every chip, link and port all the time would be about 19 million
series at ``rainier``; an UltraServer is about 2,500, so Prometheus scrapes
this only for the UltraServers it is told to.  ``/probe/targets`` tells it
which: a Prometheus HTTP service discovery document of the UltraServers that
have an unhealthy entity now (worst first, at most ``max_targets``), so the
drill-down is there for every UltraServer in trouble without anyone editing
a config; a static target list adds any others (docs/metrics.md).

A probe reads the monitor's live state, not the snapshot (which holds no
per-entity arrays: copying them every tick would cost ~100 MB of memory
traffic at ``rainier``), under the lock the monitor holds while an analysis
mutates that state, so it never sees a half-applied tick; it waits at most
one analysis.  Building one costs a few fancy-indexed slices and ~2,500
lines of text (``python -m benchmarks scrape`` reports its time).

Query errors: no or several ``target``, or one that is not an UltraServer id (``s0/u1``), ``u<index>``, an index
or a name of the inventory, is 400; an UltraServer the fleet does not have
is 404; before any telemetry has been analysed, 503.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from prometheus_client import CONTENT_TYPE_LATEST

from rainierd.api.figures import CHIP_FIGURES, EFA_FIGURES, LINK_FIGURES, NODE_FIGURES, Figure, live_values
from rainierd.core import MonitorCore, Table
from rainierd.core.detect import STATE_NAMES
from rainierd.exporter import family_head
from rainierd.fleet import LINK_KIND_NAMES, Topology
from rainierd.fleet.ids import chip_id, efa_id, link_id, node_id, parse, ultraserver_id
from rainierd.http.routes import Get, Reply
from rainierd.monitor import MonitorSnapshot

_TARGET: Final = re.compile(r"u?([0-9]{1,9})")
_TEXT: Final = "text/plain; charset=utf-8"
_STATE_HELP: Final = {entity: ", ".join(f"{i} {name}" for i, name in enumerate(names))
                      for entity, names in STATE_NAMES.items()}


class UltraServerProbe:
    """Serves ``/probe`` and ``/probe/targets`` over a monitor's core (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        core: MonitorCore,
        snapshot: Callable[[], MonitorSnapshot | None],
        *,
        lock: asyncio.Lock,
        max_targets: int = 50,
    ) -> None:
        self._topo, self._core, self._snapshot, self._lock = topology, core, snapshot, lock
        self._max_targets = max_targets
        self._names = {name: u for u, name in enumerate(topology.names.ultraservers)}
        self._present = np.asarray(topology.node_present.reshape(topology.n_ultraservers, -1).any(axis=1), bool)
        self.last_duration_s = float("nan")

    def resolve(self, query: str) -> tuple[str, int]:
        """Return ("200 OK", UltraServer id) for a probe's query string, or (error status, -1)."""
        targets = urllib.parse.parse_qs(query, keep_blank_values=True).get("target", [])
        if len(targets) != 1:
            return "400 Bad Request", -1
        target = targets[0]
        if target in self._names:
            return "200 OK", self._names[target]
        if "/" in target:  # an UltraServer's canonical id, s0/u1
            try:
                kind, us = parse(self._topo, target)
            except ValueError:
                return "404 Not Found", -1
            if kind != "ultraserver":
                return "400 Bad Request", -1
            return ("200 OK", us) if self._present[us] else ("404 Not Found", us)
        match = _TARGET.fullmatch(target)
        if match is None:
            return "400 Bad Request", -1
        us = int(match.group(1))
        if us >= self._topo.n_ultraservers or not self._present[us]:
            return "404 Not Found", us
        return "200 OK", us

    async def probe(self, query: str) -> tuple[str, bytes]:
        """Return (status, body) for ``/probe?<query>``: the UltraServer's series, or a one-line error."""
        status, us = self.resolve(query)
        if status.startswith("400"):
            return status, (b"want exactly one target: an UltraServer id (s0/u1), u<index> (0 .. "
                            + str(self._topo.n_ultraservers - 1).encode() + b"), an index, or an inventory name; "
                            b"e.g. /probe?target=u0\n")
        if status.startswith("404"):
            which = f"u{us}" if us >= 0 else "of that id"
            return status, f"no UltraServer {which} in this fleet ({self._topo.n_ultraservers} UltraServers)\n".encode()
        async with self._lock:
            snap = self._snapshot()
            if snap is None or snap.throughput.tick < 0:
                return "503 Service Unavailable", b"no telemetry analysed yet\n"
            started = time.perf_counter()
            body = self.render(us, snap)
            self.last_duration_s = time.perf_counter() - started
        name = "rainier_probe_duration_seconds"
        return "200 OK", body + (family_head(name, "Time this probe took to build.")
                                 + f"{name} {self.last_duration_s!r}\n").encode()

    async def serve_probe(self, get: Get) -> Reply:
        """Answer ``/probe?target=...``: the exposition text, or a one-line plain-text error."""
        status, body = await self.probe(get.query)
        return Reply(status, CONTENT_TYPE_LATEST if status.startswith("200") else _TEXT, body)

    async def serve_targets(self, _get: Get) -> Reply:
        """Answer ``/probe/targets``: the HTTP service-discovery JSON."""
        return Reply("200 OK", "application/json", self.targets())

    def render(self, us: int, snap: MonitorSnapshot) -> bytes:
        """Return UltraServer ``us``'s per-entity series as exposition text (call with the state steady)."""
        topo, state = self._topo, self._core.state
        trackers = self._core.detector.trackers()
        nodes = np.arange(us * topo.nodes_per_ultraserver, (us + 1) * topo.nodes_per_ultraserver)
        nodes = nodes[topo.node_present[nodes]]
        chips = (nodes[:, None] * topo.chips_per_node + np.arange(topo.chips_per_node)).ravel()
        links = (nodes[:, None] * topo.links_per_node + np.arange(topo.links_per_node)).ravel()
        ports = (nodes[:, None] * topo.efa_ports_per_node + np.arange(topo.efa_ports_per_node)).ravel()
        site = int(topo.ultraserver_site[us])
        where = f'site="s{site}",ultraserver="u{us}"'
        names = topo.names
        out: list[str] = []

        # Each series names its entity twice: the index labels it always had, and its canonical ``id`` (docs/ids.md).
        chip_blocks = [f'chip="{c}",id="{chip_id(topo, c)}",node="n{n}",{where}{names.node_labels(n)}'
                       for c, n in zip(chips.tolist(), topo.chip_node[chips].tolist(), strict=True)]
        for figure in CHIP_FIGURES:
            self._figure(out, figure, blocks=chip_blocks, table=state.chips, ids=chips)
        effective = np.where(snap.throughput.chip_fresh[chips], snap.throughput.chip_effective[chips], np.nan)
        _family(out, "rainier_chip_fp8_effective_flops", "FP8 FLOP/s the chip executed.", kind="gauge",
                blocks=chip_blocks, values=effective)
        self._state(out, "chip", chip_blocks, trackers["chip"].state[chips])

        link_blocks = [
            f'link="{i}",id="{link_id(topo, i)}",kind="{LINK_KIND_NAMES[k]}",chip_a="{a}",chip_b="{b}",node="n{n}",'
            f'{where}'
            for i, k, a, b, n in zip(links.tolist(), topo.link_kind[links].tolist(), topo.link_a[links].tolist(),
                                     topo.link_b[links].tolist(), topo.link_node[links].tolist(), strict=True)
        ]
        for figure in LINK_FIGURES:
            self._figure(out, figure, blocks=link_blocks, table=state.links, ids=links)
        self._state(out, "neuronlink", link_blocks, trackers["neuronlink"].state[links])

        port_blocks = [f'port="{p}",id="{efa_id(topo, p)}",chip="{c}",node="n{n}",{where}'
                       for p, c, n in zip(ports.tolist(), topo.efa_chip[ports].tolist(), topo.efa_node[ports].tolist(),
                                          strict=True)]
        for figure in EFA_FIGURES:
            self._figure(out, figure, blocks=port_blocks, table=state.efa, ids=ports)
        self._state(out, "efa", port_blocks, trackers["efa"].state[ports])

        node_blocks = [f'node="n{n}",id="{node_id(topo, n)}",{where}{names.node_labels(n)}' for n in nodes.tolist()]
        for figure in NODE_FIGURES:
            self._figure(out, figure, blocks=node_blocks, table=state.cooling, ids=nodes)
        self._state(out, "node", node_blocks, trackers["node"].state[nodes])
        self._state(out, "ultraserver", [f'id="{ultraserver_id(topo, us)}",{where}'],
                    trackers["ultraserver"].state[[us]])
        return "".join(out).encode()

    @staticmethod
    def _figure(out: list[str], figure: Figure, *, blocks: list[str], table: Table,
                ids: npt.NDArray[np.int64]) -> None:
        values = live_values(table, figure.field, ids)
        _family(out, figure.metric, figure.help, kind=figure.kind, blocks=blocks, values=values * figure.scale)

    @staticmethod
    def _state(out: list[str], entity: str, blocks: list[str], states: npt.NDArray[np.integer[Any]]) -> None:
        metric = f"rainier_{'efa_port' if entity == 'efa' else entity}_health_state"
        _family(out, metric, f"Health state of the {entity}: {_STATE_HELP[entity]}.", kind="gauge", blocks=blocks,
                values=states.astype(np.float64))

    def targets(self) -> bytes:
        """Return the HTTP service-discovery JSON: the UltraServers with an unhealthy entity, worst first."""
        snap = self._snapshot()
        if snap is None or snap.health is None:
            return b"[]\n"
        topo = self._topo
        node_of = {"neuronlink": topo.link_node, "efa": topo.efa_node, "chip": topo.chip_node}
        counts = np.zeros(topo.n_ultraservers, np.int64)
        for entity, ids in snap.health.ids.items():
            if entity == "ultraserver":
                owners = ids
            else:
                owners = topo.node_ultraserver[node_of[entity][ids] if entity in node_of else ids]
            np.add.at(counts, owners, 1)
        bad = np.flatnonzero(counts)
        worst = bad[np.argsort(-counts[bad], kind="stable")][: self._max_targets]
        groups = [{"targets": [f"u{u}"], "labels": {"site": f"s{topo.ultraserver_site[u]}", "ultraserver": f"u{u}"}}
                  for u in worst.tolist()]
        return (json.dumps(groups) + "\n").encode()


def _family(out: list[str], metric: str, text: str, *, kind: str, blocks: list[str],
            values: npt.NDArray[np.float64]) -> None:
    """Append one family, a series per block whose value is known (not NaN)."""
    out.append(family_head(metric, text, kind))
    out.extend(f"{metric}{{{b}}} {v!r}\n" for b, v in zip(blocks, values.tolist(), strict=True)
               if not math.isnan(v))
