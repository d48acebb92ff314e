"""The product ships the product: no module of the ``rainierd`` package
imports the benchmarks or the process harness, ``rainierd.cli`` loads no
benchmark, and ``python -m benchmarks`` offers every benchmark it registers.

Results are not source: benchmarks/results/ holds one report per benchmark
(its current baseline), benchmarks/README.md gives each its section and cites
it, and a document citing a report names one that exists, or one in git
history as ``COMMIT:benchmarks/FILE``."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rainierd
from benchmarks.__main__ import BENCHMARKS, TOOLS
from benchmarks.__main__ import parser as benchmarks_parser

PACKAGE = Path(rainierd.__file__).parent
ROOT = PACKAGE.parent
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
README = BENCH / "README.md"
OUTSIDE = ("benchmarks", "harness")
# A report cited in the tree, unless git history's (``COMMIT:benchmarks/FILE``).
CITATION = re.compile(r"(?<![0-9a-f]:)\bbenchmarks/([\w.*{},/-]+\.json)")


def imported(path: Path) -> set[str]:
    """Return the top-level names of every module ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def scripts() -> set[str]:
    """Return the benchmarks run on their own: modules of benchmarks/ with a ``__main__`` block that are neither
    a registered benchmark or tool nor private."""
    registered = {module.__name__.rsplit(".", 1)[-1] for module in {**BENCHMARKS, **TOOLS}.values()}
    return {path.stem for path in BENCH.glob("*.py")
            if not path.stem.startswith("_") and path.stem not in registered
            and 'if __name__ == "__main__"' in path.read_text()}


def cited(text: str) -> list[str]:
    """Return the paths under benchmarks/ of every JSON report ``text`` cites in the tree (not git history's,
    nor a placeholder such as ``results/KIND.json``)."""
    return [name for name in CITATION.findall(text)
            if not any(part.split(".")[0].isupper() for part in name.split("/"))]


def citing() -> list[Path]:
    """Return the files that may cite a report: the READMEs, the docs, the plan's figures and every module."""
    return [ROOT / "README.md", README, BENCH / "plan-figures.json", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted(BENCH.rglob("*.py")), *sorted(PACKAGE.rglob("*.py"))]


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
        """``python -m benchmarks --help`` names each registered benchmark and tool with its help line."""
        out = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True,
                             check=True, cwd=PACKAGE.parent, timeout=60).stdout
        flat = " ".join(out.split())
        missing = [kind for kind, module in {**BENCHMARKS, **TOOLS}.items()
                   if f"{kind} {' '.join(module.HELP.split())}" not in flat]
        assert (missing, len(BENCHMARKS), sorted(TOOLS)) == ([], 21, ["compare"])


class TestEachBenchmarksOptions:
    @pytest.mark.parametrize("kind", [*BENCHMARKS, *TOOLS])
    def test_each_benchmark_owns_its_options(self, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
        """Each benchmark's and tool's ``--help`` is its own module's options (``--json`` for the benchmarks but
        none shared by accident): asking one for help exits 0. In this process, through the entry point's own
        parser (``--help`` above proves the entry point; twenty interpreters proved nothing more, in 44 s)."""
        with pytest.raises(SystemExit) as exited:
            benchmarks_parser().parse_args([kind, "--help"])
        assert (exited.value.code, f"usage: python -m benchmarks {kind}" in capsys.readouterr().out) == (0, True)


class TestTheResults:
    def test_one_report_per_benchmark(self) -> None:
        """benchmarks/results/ holds JSON files only, each named after a benchmark (``KIND.json``, or a script's
        ``NAME.json``) and, where the report names its benchmark, named after that one."""
        names = set(BENCHMARKS) | scripts()
        wrong = {}
        for path in sorted(RESULTS.iterdir()):
            named = path.is_file() and path.suffix == ".json" and path.stem in names
            report = json.loads(path.read_text()) if named else {}
            if not named or report.get("benchmark", path.stem) != path.stem:
                wrong[path.name] = report.get("benchmark")
        assert (wrong, len(list(RESULTS.iterdir())) > 0) == ({}, True)

    def test_no_report_outside_the_results(self) -> None:
        """The only JSON file under benchmarks/ outside results/ is the plan's input, its measured figures."""
        assert [str(path.relative_to(BENCH)) for path in sorted(BENCH.rglob("*.json"))
                if RESULTS not in path.parents] == ["plan-figures.json"]

    def test_the_readme_has_a_section_for_each_and_cites_each_baseline(self) -> None:
        """benchmarks/README.md has a section headed by each benchmark, tool and script with a baseline, and
        links every file of results/."""
        text = README.read_text()
        headings = set(re.findall(r"^#{2,3} (\S+)$", text, flags=re.MULTILINE))
        baselines = sorted(path.name for path in RESULTS.glob("*.json"))
        assert (sorted({*BENCHMARKS, *TOOLS, *(Path(b).stem for b in baselines)} - headings),
                [name for name in baselines if f"(results/{name})" not in text]) == ([], [])

    def test_every_cited_report_exists(self) -> None:
        """A report cited in the READMEs, the docs or the code is in the tree (a baseline in results/, or the
        plan's figures); an older one is cited from git history as ``COMMIT:benchmarks/FILE``."""
        missing = {str(path.relative_to(ROOT)): sorted({name for name in cited(path.read_text())
                                                        if not (BENCH / name).is_file()})
                   for path in citing()}
        relative = sorted({name for name in re.findall(r"\]\((results/[^)]+)\)", README.read_text())
                           if not (BENCH / name).is_file()})
        assert ({path: names for path, names in missing.items() if names}, relative) == ({}, [])

    def test_the_scan_sees_a_citation(self) -> None:
        """The citation scan finds reports in the tree, globbed or not, and passes over git history's (so the
        test above can fail)."""
        text = ("`benchmarks/results/core.json`, benchmarks/ingest-2026-12-01.json and `benchmarks/x-*.json`; "
                "git history: `18c7589:benchmarks/ingest-2026-12-01.json`; `benchmarks/results/KIND.json`")
        assert cited(text) == ["results/core.json", "ingest-2026-12-01.json", "x-*.json"]
