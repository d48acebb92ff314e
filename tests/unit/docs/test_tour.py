"""The tour's scenario tells the whole story under production's settings (docs/tour.md, issue 37 item 4): each
fault outlasts the advisory hold, so its advisory is proposed, and ends within the tour's eight minutes, so it
clears; the tour names the command and what it shows.  tests/integration/test_tour.py runs it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from rainierd.actions.config import ActionConfig
from rainierd.fleet.topology import build_topology
from rainierd.settings import Settings
from rainierd.sim.scenarios import load_scenario

ROOT = Path(__file__).parents[3]
TOUR = ROOT / "scenarios" / "demo-tour.toml"
TOUR_S = 480.0  # the tour's "about eight minutes"


class TestTourScenario:
    """scenarios/demo-tour.toml, as the simulator loads it."""

    def test_it_loads_on_the_demo_fleet(self) -> None:
        """The simulator takes every fault of the tour on the demo fleet (two UltraServers)."""
        faults = load_scenario(TOUR, build_topology("demo"), tick_s=1.0, rng=np.random.default_rng(0))
        assert len(faults) == 2

    def test_each_fault_outlasts_the_hold_and_clears_within_the_tour(self) -> None:
        """Every fault stands a minute past the default hold (the monitor's production setting, which the
        scenario does not change) and is over before the eighth minute."""
        hold = Settings.model_fields["actions_hold_s"].default
        assert hold == ActionConfig().hold_s
        faults = tomllib.loads(TOUR.read_text())["fault"]
        assert all(f["for_s"] >= hold + 60 for f in faults)
        assert all(f["at_s"] + f["for_s"] <= TOUR_S - 30 for f in faults)

    def test_the_tour_page_names_the_command_and_the_screens(self) -> None:
        """docs/tour.md gives the command, the API reads and the top screens it walks through."""
        text = (ROOT / "docs" / "tour.md").read_text()
        for needed in ("rainierd run --scenario scenarios/demo-tour.toml", "rainierd top",
                       "curl -s localhost:9780/api/v1/actions", "--actions-hold"):
            assert needed in text, needed
