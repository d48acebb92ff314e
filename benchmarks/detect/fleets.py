"""The fleets the in-process benchmarks watch: a simulator profile's fleet, the
model that simulates it and the monitor core that watches it, built alike for
every benchmark that drives the core faster than real time (``detect``'s fault
and control runs, ``control``'s campaign), and the frames one tick becomes.

Why one room: the detection benchmark and the control campaign must watch the
same fleets with the same monitor, or their figures do not compare.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

import numpy as np

from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import Topology, build_fleet
from rainierd.sim import FleetModel, FleetParams
from rainierd.sim.faults import Fault
from rainierd.sim.frames import tick_batches
from rainierd.sim.profile import Profile
from rainierd.sim.sample import TickSample
from rainierd.wire import Frame

__all__ = [
    "NODES_PER_BATCH", "available_profiles", "fleet_of", "frames_of", "monitor_of", "present_chips",
    "profile_job_mix", "profile_kwargs", "simulator_of",
]

NODES_PER_BATCH: Final = 128  # batches, as the simulator publishes by default


def available_profiles() -> dict[str, Any]:
    """Return the simulator's profiles by name: ``rainierd.sim.profile.PROFILES`` where the fleet
    model takes one, else only ``"ideal"`` (the model as it is), standing for ``None``.
    """
    try:
        module = importlib.import_module("rainierd.sim.profile")
    except ImportError:
        return {"ideal": None}
    profiles = getattr(module, "PROFILES", None)
    if not isinstance(profiles, dict) or "profile" not in inspect.signature(FleetModel).parameters:
        return {"ideal": None}
    return dict(profiles)


def profile_kwargs(name: str) -> dict[str, Any]:
    """Return the keyword arguments that give a ``FleetModel`` the profile ``name``.

    Raises KeyError for a profile this simulator does not have.
    """
    profile = available_profiles()[name]
    return {} if profile is None else {"profile": profile}


def fleet_of(profile: str, ultraservers: int) -> Topology:
    """Return the fleet a run of ``profile`` watches: the profile's shape (sites, partial UltraServers, EFA
    ports), or one site of whole UltraServers for a simulator without profiles.
    """
    prof = available_profiles().get(profile)
    name = f"bench-{ultraservers}"
    return prof.fleet(ultraservers, name=name) if isinstance(prof, Profile) else build_fleet(1, ultraservers, name=name)


def present_chips(profile: str, ultraservers: int) -> int:
    """Return the chips that exist in a fleet of ``ultraservers`` in ``profile``'s shape."""
    return fleet_of(profile, ultraservers).n_present_chips


def profile_job_mix(profile: str) -> bool:
    """Return True if ``profile`` runs the simulator's job mix of its own."""
    prof = available_profiles().get(profile)
    return isinstance(prof, Profile) and prof.job_mix


def simulator_of(
    topo: Topology, profile: str, *, seed: int, tick_s: float, params: FleetParams, faults: Sequence[Fault] = (),
    job_mix: bool | None = None,
) -> FleetModel:
    """Return the model simulating ``topo`` as ``profile`` makes its telemetry, from tick 0 at time 0.

    ``job_mix`` False keeps a profile that runs the job mix on fixed groups (None: as the profile says).  Raises
    KeyError for a profile the simulator does not have.
    """
    kwargs = profile_kwargs(profile)
    if job_mix is False and "profile" in kwargs:
        kwargs["profile"] = replace(kwargs["profile"], job_mix=False)
    return FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=0.0, params=params,
                      faults=list(faults), **kwargs)


def monitor_of(topo: Topology, *, tick_s: float) -> MonitorCore:
    """Return a monitor core for ``topo`` at ``tick_s``, as the daemon configures one by default."""
    return MonitorCore(topo, MonitorConfig(tick_s=tick_s,
                                           hardware=replace(TRN2, efa_ports_per_node=topo.efa_ports_per_node)))


def frames_of(topo: Topology, sample: TickSample, *, publisher: str = "bench") -> list[Frame]:
    """Return the frames one tick of ``sample`` is published as: batches of ``NODES_PER_BATCH`` nodes (the
    frames are the same as node frames; only the transport differs)."""
    return [frame for _topic, frame in tick_batches(topo, sample, publisher=publisher,
                                                    nodes_per_batch=NODES_PER_BATCH)]
