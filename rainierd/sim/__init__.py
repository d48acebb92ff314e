"""The fleet simulator: a vectorised model of a healthy Trainium2 fleet, the
cutting of its ticks into frames, and the role that publishes them.
"""

from __future__ import annotations

from rainierd.sim.faults import Fault
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.params import FleetParams
from rainierd.sim.profile import PROFILES, Profile
from rainierd.sim.publisher import Simulator, truth_payload
from rainierd.sim.sample import TickSample, TickTruth
from rainierd.sim.scenarios import load_scenario
from rainierd.sim.workload import JobSpec, load_jobs

__all__ = [
    "PROFILES",
    "Fault",
    "FleetModel",
    "FleetParams",
    "JobSpec",
    "Profile",
    "Simulator",
    "TickSample",
    "TickTruth",
    "load_jobs",
    "load_scenario",
    "tick_frames",
    "truth_payload",
]
