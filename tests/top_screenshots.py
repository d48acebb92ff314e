"""The screenshots of ``rainierd top`` in the README and docs/top.md, made by driving the real application with
Textual's pilot over the real read API of a real monitor core (in-process: a ``ReadApi`` answers each request,
with no socket, so nothing on screen depends on a port or the wall clock).

The fleet: 3 sites of 40 UltraServers (7,680 chips), 15 jobs of 8 UltraServers, 45 one-second ticks of the
simulator with a NeuronLink at half its lanes in u5, an EFA port at 60 % in u47, a failed chip in u83 and a
chip throttled to 60 % in u100, all from tick 20.

``scripts/top-screenshots`` writes them to docs/; tests/unit/top/test_screenshots.py makes them again and fails
when the committed ones are not what the code draws now.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

import numpy as np

from rainierd.api import ReadApi
from rainierd.core.analysis import MonitorCore
from rainierd.core.jobs import NameIndex, resolve_jobs
from rainierd.fleet.topology import build_topology
from rainierd.monitor.events import EventLog
from rainierd.monitor.snapshot import MonitorSnapshot, MonitorStatus
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.top.answers import check
from rainierd.top.app import TopApp
from rainierd.top.source import SourceError
from rainierd.wire.jobs import JobDocument

__all__ = ["SHOTS", "render"]

TOPOLOGY: Final = "sites=3,ultraservers=40"
TICKS: Final = 45
SIZE: Final = (160, 46)
# (file, what it shows)
SHOTS: Final = (
    ("top-fleet.svg", "the fleet screen, the cursor on u5"),
    ("top-ultraserver.svg", "UltraServer u5 and its degraded NeuronLink"),
    ("top-link.svg", "the degraded NeuronLink's figures"),
    ("top-job.svg", "the costliest job, its culprits and UltraServers"),
)


def _faults() -> list[Fault]:
    return [Fault(FaultKind.NL_DEGRADED, 5 * 192 + 32, 0.5, 20, 1000),
            Fault(FaultKind.EFA_DEGRADED, 47 * 64 + 10, 0.6, 20, 1000),
            Fault(FaultKind.CHIP_FAILED, 83 * 64 + 5, 1.0, 20, 1000),
            Fault(FaultKind.CHIP_THROTTLE, 100 * 64 + 40, 0.6, 20, 1000)]


def monitor() -> ReadApi:
    """The read API over the fleet of the module docstring after its 45 ticks."""
    topo = build_topology(TOPOLOGY)
    model = FleetModel(topo, np.random.default_rng(7), tick_s=1.0, start_s=1.8e9, faults=_faults())
    documents = [JobDocument(v=1, id=f"lab/train-{k:02d}", name=f"train-{k:02d}", owner="lab", scheduler="slurm",
                             source="screenshots", ultraservers=[f"u{i}" for i in range(8 * k, 8 * k + 8)], start_s=0.0)
                 for k in range(topo.n_ultraservers // 8)]
    jobs = resolve_jobs(NameIndex.of(topo), documents)
    core = MonitorCore(topo)
    log = EventLog(topo, qos=1)
    analysis = None
    for tick in range(TICKS):
        analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="shots")], jobs=jobs)
        for event in analysis.events:
            log.announce(event)
    assert analysis is not None
    snap = MonitorSnapshot.of(analysis, generation=TICKS, chips_total=topo.n_present_chips, analysis_s=0.02,
                              analysed_ticks=TICKS, events=Counter(log.counts), lag_s=0.4,
                              status=MonitorStatus(connection=_connected()))
    return ReadApi(topo, lambda: snap, core=core, lock=asyncio.Lock(), events=lambda: log.recent)


def _connected() -> Any:
    from rainierd.mqtt.connection import Connection  # noqa: PLC0415

    return Connection(connected=True, broker="mqtts://broker:8883", connects=1)


class ApiSource:
    """The read API answered in-process: the real routing and documents, no socket; each answer checked as
    ``HttpSource`` checks it (``answers.check``)."""

    where = "https://monitor:9780"

    def __init__(self, api: ReadApi) -> None:
        self.api = api

    async def get(self, target: str) -> Any:
        path, _, query = target.partition("?")
        status, body = await self.api.answer(path, query)
        document = json.loads(body)
        if not status.startswith("200"):
            code = int(status.split()[0])
            raise SourceError(f"{code} {document.get('error', '')}", code)
        return check(target, document)


async def _until(pilot: Any, condition: Any) -> None:
    for _ in range(400):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("the screen never settled")


async def shots(api: ReadApi) -> dict[str, str]:
    """Drive the application and return each screenshot's SVG by file name."""
    from rainierd.top.screens import EntityScreen, JobScreen, UltraServerScreen  # noqa: PLC0415

    out: dict[str, str] = {}
    # A long interval: the application polls once, so every screen shows the same generation.
    app = TopApp(ApiSource(api), interval_s=3600.0)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: app.polls >= 1 and app.view.generation == TICKS)
        await pilot.pause(0.2)
        await pilot.press(*["right"] * 5)
        await pilot.pause(0.2)
        out["top-fleet.svg"] = app.export_screenshot(title="rainierd top: the fleet")
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, UltraServerScreen) and app.screen.loads > 0)
        await pilot.pause(0.2)
        out["top-ultraserver.svg"] = app.export_screenshot(title="rainierd top: an UltraServer")
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, EntityScreen) and app.screen.loads > 0)
        await pilot.pause(0.2)
        out["top-link.svg"] = app.export_screenshot(title="rainierd top: a NeuronLink")
        await pilot.press("escape")
        await pilot.pause(0.1)
        await pilot.press("escape")
        await pilot.pause(0.1)
        await pilot.press("j", "enter")
        await _until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.loads > 0)
        await pilot.pause(0.2)
        out["top-job.svg"] = app.export_screenshot(title="rainierd top: a job")
    return out


def render() -> dict[str, str]:
    """Every screenshot's SVG by file name."""
    return asyncio.run(shots(monitor()))


def main(argv: list[str]) -> int:
    """Write the screenshots to the directory ``argv[0]`` (default docs/)."""
    out = Path(argv[0] if argv else "docs")
    for name, svg in render().items():
        (out / name).write_text(svg, encoding="utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
