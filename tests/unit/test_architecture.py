"""Specification of the package's layering, read from the source's import
statements (every one: at module level, inside functions, under
``TYPE_CHECKING``): the simulator (the world) and the monitor's core (the
observer) share only the wire, the hardware, the topology and the neutral
``rainierd/fleet/pace.py``; the core is pure (no asyncio, no MQTT).

A new rule is one line in ``FORBIDDEN``: the modules it covers, and the
modules they must not import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# (importers, the modules they must not import): a name covers itself and everything below it.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "rainierd.sim": ("rainierd.core", "rainierd.monitor", "rainierd.exporter"),
    "rainierd.core": ("rainierd.sim", "rainierd.monitor", "rainierd.exporter", "asyncio", "aiomqtt"),
    # The monitor publishes its snapshot; the exporter reads it. Never the other way round.
    "rainierd.monitor": ("rainierd.exporter", "rainierd.daemon", "rainierd.cli"),
    "rainierd.exporter": ("rainierd.daemon", "rainierd.cli", "rainierd.mqtt", "rainierd.monitor.loop",
                          "rainierd.api", "aiomqtt"),
    # The HTTP edge serves what the roles register on it and knows none of it: no metrics, no API, no monitor,
    # no core, and its configuration handed in (never the settings).
    "rainierd.http": ("rainierd.exporter", "rainierd.api", "rainierd.monitor", "rainierd.core", "rainierd.settings",
                      "rainierd.daemon", "rainierd.cli"),
    # Admission before decoding is shared by every receiver (the monitor's inbox, an aggregator): pure, O(1) a
    # message, knowing the wire alone; each receiver hands it what its own accounting knows of the streams.
    "rainierd.admission": ("rainierd.core", "rainierd.monitor", "rainierd.aggregate", "rainierd.sim",
                           "rainierd.exporter", "rainierd.mqtt", "asyncio", "aiomqtt"),
    # The compiled passes are a leaf: arrays in, arrays out, knowing nothing of the fleet, the wire or a loop.
    "rainierd.native": ("rainierd.core", "rainierd.wire", "rainierd.sim", "rainierd.monitor", "rainierd.exporter",
                        "rainierd.mqtt", "rainierd.fleet", "asyncio", "aiomqtt"),
    # The wire format is a leaf both sides speak.
    "rainierd.wire": ("rainierd.core", "rainierd.sim", "rainierd.monitor", "rainierd.exporter", "rainierd.mqtt"),
    # The aggregation tier speaks the wire and MQTT, and serves its own metrics: it is neither the world nor the
    # observer, and the monitor's core, the simulator and the exporter's monitor families are none of its business.
    "rainierd.aggregate": ("rainierd.core", "rainierd.monitor", "rainierd.sim", "rainierd.exporter",
                           "rainierd.daemon", "rainierd.cli"),
    # The scheduler adapters turn a scheduler's output into job documents (the wire) named against the inventory
    # (the core's pure resolution): edges, which the monitor, the exporter and the simulator never need.
    "rainierd.jobs": ("rainierd.monitor", "rainierd.exporter", "rainierd.sim", "rainierd.aggregate",
                      "rainierd.daemon", "rainierd.cli", "rainierd.settings"),
    # The advisory policy is pure like the core (its clock is the analysis' time, handed in); its sinks
    # (rainierd.sinks: webhook, node-problem-detector) and the HTTP route read its frozen view, never the reverse.
    "rainierd.actions": ("rainierd.monitor", "rainierd.exporter", "rainierd.sinks", "rainierd.sim", "rainierd.daemon",
                         "rainierd.cli", "asyncio", "aiomqtt"),
    # The neuron-monitor bridge is a node's agent: it speaks the wire and MQTT and serves its own metrics; the
    # monitor, its core, the simulator and the aggregator are none of its business.  Its pure part (reports and
    # snapshots in, frames out) does no I/O of its own and runs no event loop.
    "rainierd.bridge": ("rainierd.core", "rainierd.monitor", "rainierd.sim", "rainierd.aggregate",
                        "rainierd.daemon", "rainierd.cli", "rainierd.settings"),
    **{f"rainierd.bridge.{module}": ("asyncio", "aiomqtt", "rainierd.mqtt", "rainierd.exporter",
                                     "rainierd.settings",
                                     "rainierd.bridge._efa", "rainierd.bridge.run", "pathlib", "os", "time")
       for module in ("_values", "_cores", "_report", "_devices", "_clock", "_totals", "_config", "_ports", "_node",
                      "_hold")},
    # Each edge takes its own frozen config, built by a Settings method (webhook_config, healthcheck_config,
    # bridge_role_config, jobs_config): an edge that imported the whole Settings would know every other edge's
    # options.  (The bridge's and the jobs runner's rules above say the same.)
    "rainierd.healthcheck": ("rainierd.settings",),
    "rainierd.sinks": ("rainierd.settings",),
    "rainierd.top": ("rainierd.settings",),
    # The MQTT edge takes its own frozen config (``Settings.mqtt_config`` builds it) and knows no role.
    "rainierd.mqtt": ("rainierd.settings", "rainierd.daemon", "rainierd.cli", "rainierd.monitor", "rainierd.core",
                      "rainierd.exporter", "rainierd.sim", "rainierd.aggregate", "rainierd.bridge", "rainierd.jobs"),
    # The product ships the product: the command line and every role load no benchmark or test harness.
    "rainierd": ("benchmarks", "harness"),
}

# What the simulator may import from the package: the wire and the hardware, and the leaves both sides share.
SIM_MAY_IMPORT = ("rainierd.sim", "rainierd.wire",
                  "rainierd.fleet",  # the hardware, the topology, the pace model: the vocabulary both sides share
                  "rainierd._types", "rainierd.errors",
                  "rainierd.runtime",  # the drop-oldest outbox and the tick schedule every ticking role keeps
                  "rainierd.mqtt")  # how a publisher queues many messages at once (publish_many)


def covers(prefix: str, module: str) -> bool:
    """Return True if ``module`` is ``prefix`` or a module below it."""
    return module == prefix or module.startswith(prefix + ".")


def module_name(path: Path, root: Path) -> str:
    """Return the dotted name of the module at ``path`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str) -> set[str]:
    """Return every module the source at ``path`` imports, relative imports resolved.

    ``from a import b`` counts as importing both ``a`` and ``a.b`` (``b`` may be a module).
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Return each module of ``package`` (under ``root``) and the modules it imports."""
    top = root / Path(*package.split("."))
    return {module_name(path, root): imports_of(path, module_name(path, root)) for path in sorted(top.rglob("*.py"))}


def violations(graph: dict[str, set[str]], rules: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """Return the (importer, imported) edges of ``graph`` that ``rules`` forbid, sorted."""
    return sorted(
        (importer, imported)
        for importer, imported_set in graph.items()
        for scope, banned in rules.items() if covers(scope, importer)
        for imported in imported_set if any(covers(b, imported) for b in banned)
    )


class TestTheScanner:
    def test_it_finds_a_forbidden_edge_in_any_form_of_import(self, tmp_path: Path) -> None:
        """Absolute, relative, function-level and ``from package import module`` imports are all edges."""
        pkg = tmp_path / "pkg"
        (pkg / "low").mkdir(parents=True)
        (pkg / "high").mkdir()
        for init in (pkg / "__init__.py", pkg / "low" / "__init__.py", pkg / "high" / "__init__.py"):
            init.write_text("")
        (pkg / "high" / "api.py").write_text("")
        (pkg / "low" / "a.py").write_text("import pkg.high.api\n")
        (pkg / "low" / "b.py").write_text("from ..high import api\n")
        (pkg / "low" / "c.py").write_text("def f():\n    from pkg import high\n")
        (pkg / "low" / "d.py").write_text("from pkg.lowly import x\nimport pkg.highway\n")
        found = violations(import_graph("pkg", tmp_path), {"pkg.low": ("pkg.high",)})
        assert found == [("pkg.low.a", "pkg.high.api"), ("pkg.low.b", "pkg.high"), ("pkg.low.b", "pkg.high.api"),
                         ("pkg.low.c", "pkg.high")]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph("rainierd")


class TestLayers:
    def test_the_package_is_scanned(self, graph: dict[str, set[str]]) -> None:
        """The graph holds the simulator and the core, so the rules below have something to judge."""
        assert {"rainierd.sim.fleet", "rainierd.core.model", "rainierd.fleet.pace"} <= graph.keys()
        assert {"rainierd.fleet", "rainierd.fleet.SHARES"} <= graph["rainierd.sim.params"]
        assert "rainierd.fleet" in graph["rainierd.core.model"]

    def test_no_module_imports_what_a_rule_forbids(self, graph: dict[str, set[str]]) -> None:
        """No simulator module imports the core, the monitor or the exporter; the core imports none of
        the simulator, the monitor, the exporter, asyncio or aiomqtt; the monitor imports no exporter and the
        exporter no monitor loop, MQTT, API or daemon; the HTTP edge imports none of the applications it serves;
        the wire imports neither side; nothing of the package imports the benchmarks or the harness."""
        assert violations(graph, FORBIDDEN) == []

    def test_the_simulator_imports_only_the_wire_the_hardware_and_shared_leaves(
        self, graph: dict[str, set[str]],
    ) -> None:
        """Of the package, the simulator imports only itself, the wire, the fleet's vocabulary (the hardware,
        the topology, the pace model), the runtime, the MQTT edge and the shared type and error modules: never
        the core, the monitor, the exporter or the API."""
        used = {imported for module, imported_set in graph.items() if covers("rainierd.sim", module)
                for imported in imported_set if covers("rainierd", imported) and imported != "rainierd"}
        assert sorted(m for m in used if not any(covers(allowed, m) for allowed in SIM_MAY_IMPORT)) == []


# The floors below everything (issue 36): the fleet's vocabulary and the runtime every process runs on import
# nothing of rainierd but each other's leaves, the shared types and errors, and the first code a process runs.
FLOOR_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "rainierd.fleet": ("rainierd.fleet", "rainierd._types", "rainierd.errors"),
    "rainierd.runtime": ("rainierd.runtime", "rainierd._types", "rainierd.errors", "rainierd._start"),
}


def private_module(module: str) -> str | None:
    """Return the package whose private module ``module`` is (``a.b._c`` is ``a.b``'s), or None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


class TestFloorsAndFaces:
    def test_the_floors_import_nothing_above_them(self, graph: dict[str, set[str]]) -> None:
        """rainierd.fleet and rainierd.runtime import, of the package, only themselves and the shared leaves."""
        above = sorted((module, imported) for module, imported_set in graph.items()
                       for floor, allowed in FLOOR_MAY_IMPORT.items() if covers(floor, module)
                       for imported in imported_set
                       if covers("rainierd", imported) and imported != "rainierd"
                       and not any(covers(a, imported) for a in allowed))
        assert above == []

    def test_no_module_reaches_into_another_package_s_private_modules(self, graph: dict[str, set[str]]) -> None:
        """A module whose name starts with ``_`` (``core/detect/_common.py``) is its package's business: what
        another package needs of it is on the package's face (``rainierd.core.detect.reason_names``)."""
        reaching = sorted((module, imported) for module, imported_set in graph.items() for imported in imported_set
                          if (owner := private_module(imported)) is not None and covers("rainierd", imported)
                          and owner not in ("", "rainierd") and not covers(owner, module))
        assert reaching == []

    def test_the_private_scan_sees_a_private_module(self) -> None:
        """The test above can fail: ``a.b._c`` belongs to ``a.b``, ``a.b.c`` to nobody."""
        assert private_module("rainierd.core.detect._common") == "rainierd.core.detect"
        assert private_module("rainierd.core.detect.chips") is None
        assert private_module("rainierd.__main__") is None


def drawn_rooms(doc: str) -> dict[str, set[str]]:
    """Return docs/architecture.md's house table: each room and the rooms it says the room may import (what a
    row's last column names before any "never")."""
    rooms: dict[str, set[str]] = {}
    for line in doc.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`") or "/`" not in cells[0]:
            continue
        names = [name.split("/")[0] for name in re.findall(r"`([a-z_]+)/?", cells[0].split("(")[0])]
        allowed = {name.split("/")[0] for name in re.findall(r"`([a-z_/]+)`", cells[2].split("never")[0])}
        for name in names:
            rooms[name] = allowed
    return rooms


class TestTheHouseAsDrawn:
    def test_each_room_imports_only_what_the_drawing_says(self, graph: dict[str, set[str]]) -> None:
        """docs/architecture.md's table of rooms is the code's: every import from one room into another is
        one its row names (so the drawing is redrawn when the house changes)."""
        rooms = drawn_rooms((ROOT / "docs" / "architecture.md").read_text())
        assert {"fleet", "runtime", "wire", "core", "mqtt", "http", "monitor", "exporter", "api", "top"} <= rooms.keys()
        units = {module.split(".")[1] for module in graph if module.count(".")}  # rooms and root modules
        undrawn = sorted(
            (room, imported.split(".")[1])
            for module, imported_set in graph.items()
            if (room := module.split(".")[1] if module.count(".") else "") in rooms
            for imported in imported_set
            if imported.startswith("rainierd.") and imported.split(".")[1] in units
            and imported.split(".")[1] not in (room, "errors", "_types", *rooms[room])
        )
        assert sorted(set(undrawn)) == []

    def test_the_drawing_is_read(self) -> None:
        """The table reader finds a room's row and stops at "never"."""
        rooms = drawn_rooms("| `http/` | the edge | `runtime`; never `exporter` |\n"
                            "| `aggregate/`, `jobs/` | roles | `wire`, `mqtt/burst` |\n| a | b | c |\n")
        assert rooms == {"http": {"runtime"}, "aggregate": {"wire", "mqtt"}, "jobs": {"wire", "mqtt"}}
