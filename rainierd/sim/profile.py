"""Named behaviours of the simulated fleet beyond ``FleetParams``: how far the
telemetry departs from identical, Gaussian, tick-aligned entities.

``FleetParams`` says how the fleet works (step shares, loads, trickles);
a ``Profile`` says how *real* its telemetry looks.  ``"ideal"`` is the
original model, value for value for a seed; detectors tuned only on it meet
per-entity baselines, heavy tails and skewed clocks for the first time in
production.  docs/simulator-profiles.md gives each figure's reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["PROFILES", "Profile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """How real the simulated telemetry looks; the defaults are the ideal fleet."""

    name: str


PROFILES: Final[dict[str, Profile]] = {
    "ideal": Profile(name="ideal"),
}
