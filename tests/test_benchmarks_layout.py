"""The product ships the product: no module of the ``rainierd`` package
imports the benchmarks or the process harness, ``rainierd.cli`` loads no
benchmark, and ``python -m benchmarks`` offers every benchmark it registers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rainierd
from benchmarks.__main__ import BENCHMARKS

PACKAGE = Path(rainierd.__file__).parent
OUTSIDE = ("benchmarks", "harness")


def imported(path: Path) -> set[str]:
    """Return the top-level names of every module ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


class TestThePackage:
    def test_no_module_imports_benchmarks_or_harness(self) -> None:
        """No file under rainierd/ imports ``benchmarks`` or ``harness``."""
        offenders = {str(path.relative_to(PACKAGE)): sorted(imported(path) & set(OUTSIDE))
                     for path in PACKAGE.rglob("*.py") if imported(path) & set(OUTSIDE)}
        assert offenders == {}

    def test_the_scan_sees_an_import(self, tmp_path: Path) -> None:
        """The import scan finds ``from benchmarks... import`` and ``import harness...`` (so the test above can
        fail)."""
        module = tmp_path / "m.py"
        module.write_text("import harness.procs\nfrom benchmarks.core import run\nfrom . import sibling\n")
        assert imported(module) & set(OUTSIDE) == {"benchmarks", "harness"}

    @pytest.mark.integration  # starts a Python process, to see a fresh interpreter's imports
    def test_the_command_line_loads_no_benchmark(self) -> None:
        """Importing ``rainierd.cli`` (every daemon and HEALTHCHECK does) loads no benchmark or harness module."""
        code = ("import sys, rainierd.cli; "
                "print(sorted(m for m in sys.modules if m.split('.')[0] in ('benchmarks', 'harness')))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=PACKAGE.parent, timeout=60).stdout
        assert out == "[]\n"


    @pytest.mark.integration  # starts `python -X importtime -m rainierd`
    @pytest.mark.parametrize("argv", [("monitor", "--help"), ("healthcheck", "--metrics-addr", "127.0.0.1:1")],
                             ids=["monitor-help", "healthcheck"])
    def test_the_daemon_and_its_healthcheck_import_no_benchmark(self, argv: tuple[str, ...]) -> None:
        """``rainierd monitor --help`` and ``rainierd healthcheck`` (here against a closed port: it exits 1)
        import no module of ``benchmarks`` or ``harness``, as ``python -X importtime`` lists them."""
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "rainierd", *argv], capture_output=True,
                                text=True, check=False, cwd=PACKAGE.parent, timeout=60)
        modules = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                   if line.startswith("import time:")]
        assert "rainierd.cli" in modules  # the listing is real: it shows the command line's own import
        assert (result.returncode, [m for m in modules if m.split(".")[0] in OUTSIDE]) == (
            0 if argv[-1] == "--help" else 1, [])


@pytest.mark.integration  # starts `python -m benchmarks`
class TestTheEntryPoint:
    def test_help_lists_every_benchmark(self) -> None:
        """``python -m benchmarks --help`` names each registered benchmark with its help line."""
        out = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True,
                             check=True, cwd=PACKAGE.parent, timeout=60).stdout
        flat = " ".join(out.split())
        missing = [kind for kind, module in BENCHMARKS.items()
                   if f"{kind} {' '.join(module.HELP.split())}" not in flat]
        assert (missing, len(BENCHMARKS)) == ([], 18)

    def test_each_benchmark_owns_its_options(self) -> None:
        """Each benchmark's ``--help`` is its own module's options (``--json`` for all but none shared by
        accident): asking one for help exits 0."""
        for kind in BENCHMARKS:
            result = subprocess.run([sys.executable, "-m", "benchmarks", kind, "--help"], capture_output=True,
                                    text=True, check=False, cwd=PACKAGE.parent, timeout=60)
            assert (kind, result.returncode, f"usage: python -m benchmarks {kind}" in result.stdout) == (
                kind, 0, True)
