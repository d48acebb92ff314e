"""The screenshots of ``rainierd top`` in the README and docs/top.md are what the code draws now: made again
(tests/top_screenshots.py: the real application over the real read API of a simulated fleet, no socket, no
clock on screen) and compared byte for byte.  When the screens change on purpose, scripts/top-screenshots
writes the new ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.top_screenshots import SHOTS, render

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render()


@pytest.mark.parametrize(("name", "what"), SHOTS)
def test_committed_screenshot_is_current(rendered: dict[str, str], name: str, what: str) -> None:
    committed = (DOCS / name).read_text(encoding="utf-8")
    assert rendered[name] == committed, f"docs/{name} ({what}) is stale: run scripts/top-screenshots"


def test_the_shots_show_what_their_captions_say(rendered: dict[str, str]) -> None:
    """Not only current, but of the right screens: the fleet with its four faults, the link, the job."""
    def text(name: str) -> str:  # the SVG's text, its non-breaking spaces as spaces
        return rendered[name].replace("&#160;", " ")

    assert "u5 (site s0): keeps" in text("top-fleet.svg")  # the cursor's cell
    for event in ("neuronlink 992 (u5)", "efa 3018 (u47)", "chip 5317 (u83)", "chip 6440 (u100)"):
        assert event in text("top-fleet.svg")
    assert "neuronlink 992" in text("top-link.svg")
    assert "degraded" in text("top-link.svg")
    assert "Culprits" in text("top-job.svg")
