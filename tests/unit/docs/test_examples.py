"""Every example in README.md and docs/*.md works as written (issue 22 item 7:
a publisher's first hour began with the inventory example refused).

Each fenced block with a language is an example, handled by what it is:
TOML inventories load through the real inventory loader, scenarios and job
files through theirs; JSON frames decode through the real decoder and job
documents through the job decoder; Python runs; YAML parses; shell and
console blocks are run by tests/integration/test_doc_commands.py.  A block
that cannot run here (it needs Docker, a Kubernetes cluster, a terminal) has
the visible marker line ``*Not run by the tests: <why>.*`` just above it;
the markers are counted, so the list cannot grow silently.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from rainierd.fleet.inventory import load_inventory
from rainierd.fleet.topology import build_topology
from rainierd.jobs.static import static_jobs
from rainierd.sim.scenarios import load_scenario
from rainierd.sim.workload import load_jobs
from rainierd.wire import FacilityFrame, NodeFrame, decode_json
from rainierd.wire.jobs import decode_job, job_topic

ROOT = Path(__file__).parents[3]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
MARKER = re.compile(r"^\*Not run by the tests: (.+)\.\*$")
SHELL = frozenset({"sh", "console"})

# The blocks marked not run, by document: a change here is a decision, seen in review.
NOT_RUN: dict[str, int] = {"README.md": 1, "deploy.md": 7, "exporter-security.md": 4, "jobs.md": 1, "metrics.md": 1,
                            "real-nodes.md": 4,
                            "top.md": 1}


@dataclass(frozen=True)
class Block:
    """One fenced example: where it is, its language, its text, and why it is not run (None: it is)."""

    doc: Path
    line: int
    lang: str
    text: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.doc.name}:{self.line}"


def blocks(*, langs: frozenset[str] | None = None) -> list[Block]:
    """Return every fenced block with a language in the docs (``langs``: only those)."""
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            opening = re.match(r"^\s*```(\S+)\s*$", lines[i])
            if not opening and re.match(r"^\s*```\s*$", lines[i]):  # a block without a language: text, skipped
                i += 1
                while not re.match(r"^\s*```\s*$", lines[i]):
                    i += 1
            elif opening:
                end = i + 1
                while not re.match(r"^\s*```\s*$", lines[end]):
                    end += 1
                above = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
                marker = MARKER.match(above)
                found.append(Block(doc, i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                                   marker.group(1) if marker else None))
                i = end
            i += 1
    return [b for b in found if langs is None or b.lang in langs]


def runnable(langs: frozenset[str]) -> list[Block]:
    return [b for b in blocks(langs=langs) if b.not_run is None]


def ids(items: list[Block]) -> list[str]:
    return [b.name for b in items]


class TestTheExamplesAreAccountedFor:
    def test_every_example_is_of_a_kind_the_tests_handle(self) -> None:
        """A new kind of block needs a way to run it here (or a marker saying why not)."""
        handled = {"toml", "json", "python", "yaml", *SHELL}
        assert {b.name: b.lang for b in blocks() if b.not_run is None and b.lang not in handled} == {}

    def test_the_blocks_not_run_are_the_ones_decided(self) -> None:
        """Markers, counted by document: one more is a visible change to this table."""
        counted: dict[str, int] = {}
        for b in blocks():
            if b.not_run is not None:
                counted[b.doc.name] = counted.get(b.doc.name, 0) + 1
        assert counted == NOT_RUN

    def test_the_marker_is_documented(self) -> None:
        """README.md says what the marker means, in the words the test looks for."""
        assert "*Not run by the tests: " in (ROOT / "README.md").read_text()


def _write(tmp_path: Path, block: Block, suffix: str) -> Path:
    path = tmp_path / f"example{suffix}"
    path.write_text(block.text)
    return path


class TestToml:
    @pytest.mark.parametrize("block", runnable(frozenset({"toml"})), ids=ids(runnable(frozenset({"toml"}))))
    def test_loads_through_its_real_loader(self, block: Block, tmp_path: Path) -> None:
        """An inventory loads as a topology; a scenario's faults and jobs and a static jobs file load against a
        fleet they fit (the docs' 6-UltraServer example sizes)."""
        document = tomllib.loads(block.text)
        path = _write(tmp_path, block, ".toml")
        if "site" in document:
            topology = load_inventory(path)
            assert topology.n_present_nodes == sum(len(u["node"]) for s in document["site"] for u in s["ultraserver"])
        elif "fault" in document:
            assert load_scenario(path, build_topology("sites=1,ultraservers=6"), tick_s=1.0,
                                 rng=np.random.default_rng(0))
        elif "job" in document and all("ultraservers" in job and "nodes" not in job for job in document["job"]):
            assert load_jobs(path, build_topology("sites=1,ultraservers=6"), tick_s=1.0)
        else:
            assert "job" in document, f"{block.name}: a TOML example of no known kind"
            assert static_jobs(path, source="docs") != []


class TestJson:
    @pytest.mark.parametrize("block", runnable(frozenset({"json"})), ids=ids(runnable(frozenset({"json"}))))
    def test_decodes_through_its_real_decoder(self, block: Block) -> None:
        """A frame decodes through the monitor's JSON decoder; a job document through the job decoder; an
        event or a truth-file excerpt (what rainierd writes, shown) parses as the JSON it is."""
        text = block.text.strip()
        document = json.loads(text if text.startswith("{") else "{" + text + "}")
        if document.get("kind") in ("node", "facility"):
            frame = decode_json(text.encode())
            assert isinstance(frame, NodeFrame | FacilityFrame)
        elif "scheduler" in document:
            job = decode_job(job_topic(document["id"]), text.encode())
            assert job is not None
            assert job.id == document["id"]
        else:
            assert {"entity", "before", "after"} <= document.keys() or "jobs" in document, block.name


class TestPython:
    @pytest.mark.parametrize("block", runnable(frozenset({"python"})), ids=ids(runnable(frozenset({"python"}))))
    def test_runs(self, block: Block) -> None:
        """The snippet runs as written, in a fresh namespace."""
        exec(compile(block.text, block.name, "exec"), {"__name__": "doc_example"})


class TestYaml:
    @pytest.mark.parametrize("block", runnable(frozenset({"yaml"})), ids=ids(runnable(frozenset({"yaml"}))))
    def test_parses(self, block: Block) -> None:
        """Prometheus's own configuration, as the docs show it, is one YAML mapping."""
        assert isinstance(yaml.safe_load(block.text), dict)
