"""The screenshots of ``rainierd top`` in the README and docs/top.md are what the code draws now: made again
(tests/top_screenshots.py: the real application over the real read API of a simulated fleet, no socket, no
clock on screen) and compared byte for byte.  When the screens change on purpose, scripts/top-screenshots
writes the new ones."""

from __future__ import annotations

import html
import re
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
    def text(name: str) -> str:  # the SVG's text runs, unescaped, its non-breaking spaces as spaces
        return html.unescape("".join(re.findall(r"<text[^>]*>(.*?)</text>", rendered[name]))).replace("\xa0", " ")

    assert "s0/u5 (site s0): keeps" in text("top-fleet.svg")  # the cursor's cell
    for event in ("neuronlink s0/u5/n20/chip0/link2  healthy", "efa s1/u47/n188/efa10  healthy",
                  "chip s2/u83/n332/chip5  healthy", "chip s2/u100/n402/chip8  healthy"):
        assert event in text("top-fleet.svg")
    assert "Culprits" in text("top-job.svg")
    assert "fleet > s0/u5 > n20" in text("top-node.svg")
    for name in ("top-link.svg", "top-link-80x24.svg"):  # the decisive screen, at both sizes
        shown = "".join(text(name).split())  # the export drops runs of blanks between styles: compare without
        for said in ("fleet > s0/u5 > n20/chip0/link2", "NeuronLink s0/u5/n20/chip0/link2 DEGRADED",
                     "4 / 8", "63.2 GB/s / 128 GB/s", "costs lab/train-00 59.2 PF/s", "advice reset_link n20",
                     "runbook docs/runbooks.md#neuronlink-degraded"):
            assert "".join(said.split()) in shown, (name, said)
