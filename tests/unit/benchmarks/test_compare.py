"""``python -m benchmarks compare OLD.json NEW.json``: two reports of one benchmark flattened to dotted names,
each figure in both tabled with new/old, and files that cannot be compared refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import TOOLS, parser
from benchmarks.compare import Comparison, ReportError, compare, flatten

RESULTS = Path(__file__).parents[3] / "benchmarks" / "results"


def write(path: Path, document: Any) -> Path:
    """Write ``document`` as JSON to ``path``; return the path."""
    path.write_text(json.dumps(document))
    return path


def command(*argv: str) -> int:
    """Run ``python -m benchmarks compare ARGV`` in this process, through the real command line's parser."""
    args = parser().parse_args(["compare", *argv])
    return int(TOOLS["compare"].run(args))


class TestFlatten:
    def test_objects_join_with_dots(self) -> None:
        """Nested objects become dotted names, every leaf kept whatever its type."""
        assert flatten({"a": {"b": 1, "c": "text", "d": None}, "e": True}) == (
            {"a.b": 1, "a.c": "text", "a.d": None, "e": True}, [])

    def test_a_distribution_stands_for_its_median(self) -> None:
        """An object of statistics only reads as its median (or p50); with every_statistic, each statistic."""
        report = {"total": {"median": 0.3, "p99": 0.4}, "lag": {"p50": 1.5, "p99": 2.0}}
        assert (flatten(report), flatten(report, every_statistic=True)) == (
            ({"total": 0.3, "lag": 1.5}, []),
            ({"total.median": 0.3, "total.p99": 0.4, "lag.p50": 1.5, "lag.p99": 2.0}, []))

    def test_an_object_with_other_fields_is_not_a_distribution(self) -> None:
        """An object holding a count beside its statistics keeps every field."""
        assert flatten({"lag": {"p50": 1.0, "p99": 2.0, "probes": 7}}) == (
            {"lag.p50": 1.0, "lag.p99": 2.0, "lag.probes": 7}, [])

    def test_list_items_are_named_by_their_text_field(self) -> None:
        """A list of objects whose first field is text names each item by it, and leaves that field out."""
        report = {"results": [{"topology": "demo", "chips": 128}, {"topology": "rainier", "chips": 499_200}]}
        assert flatten(report) == ({"results[topology=demo].chips": 128,
                                    "results[topology=rainier].chips": 499_200}, [])

    def test_fields_are_added_until_the_items_differ(self) -> None:
        """Items sharing their first field are named by as many of the leading scalar fields as tell them
        apart."""
        report = {"rows": [{"kind": "nl_down", "severity": 0.0, "f1": 1.0},
                           {"kind": "efa_slow", "severity": 2.0, "f1": 0.9},
                           {"kind": "efa_slow", "severity": 1.5, "f1": 0.8}]}
        assert flatten(report) == ({"rows[kind=nl_down,severity=0.0].f1": 1.0,
                                    "rows[kind=efa_slow,severity=2.0].f1": 0.9,
                                    "rows[kind=efa_slow,severity=1.5].f1": 0.8}, [])

    def test_other_items_are_named_by_position(self) -> None:
        """Objects led by a number, and plain numbers, are named by their position in the list."""
        report = {"throughput": [{"bytes": 4000, "share": 0.5}], "cpu": [0.6, 0.3]}
        assert flatten(report) == ({"throughput[0].bytes": 4000, "throughput[0].share": 0.5,
                                    "cpu[0]": 0.6, "cpu[1]": 0.3}, [])

    def test_a_list_of_lists_is_left_out(self) -> None:
        """A raw series (a list of lists) is no figure: it is named among those left out."""
        assert flatten({"rss_series": [[67.5, 850], [73.2, 930]], "chips": 1}) == ({"chips": 1}, ["rss_series"])


class TestCompare:
    def test_the_table_of_figures_in_both(self) -> None:
        """Figures numeric in both reports come with new/old in the old report's order; names in one report
        only and other values that differ are listed apart."""
        old = {"benchmark": "core", "total": {"median": 0.4, "p99": 0.5}, "ticks": 10, "passed": False, "gone": 1}
        new = {"benchmark": "core", "ticks": 10, "total": {"median": 0.3, "p99": 0.5}, "passed": True, "added": 2}
        assert compare(old, new) == Comparison(
            rows=(("total", 0.4, 0.3, pytest.approx(0.75)), ("ticks", 10.0, 10.0, 1.0)),
            only_old=("gone",), only_new=("added",), changed=(("passed", False, True),), series=())

    def test_a_figure_that_was_zero(self) -> None:
        """Zero then zero is unchanged (1.0); zero then anything else has no ratio (None)."""
        rows = compare({"lost": 0, "late": 0}, {"lost": 0, "late": 3}).rows
        assert rows == (("lost", 0.0, 0.0, 1.0), ("late", 0.0, 3.0, None))

    def test_only_keeps_the_names_holding_a_part(self) -> None:
        """``only`` keeps the figures whose name holds one of its parts, and the lists apart likewise."""
        old = {"per_tick_s": {"total": 2.0, "detect": 1.0}, "max_rss_bytes": 10, "note": "a"}
        new = {"per_tick_s": {"total": 1.0, "detect": 1.0}, "max_rss_bytes": 20, "note": "b"}
        assert compare(old, new, only=["total", "rss"]) == Comparison(
            rows=(("per_tick_s.total", 2.0, 1.0, 0.5), ("max_rss_bytes", 10.0, 20.0, 2.0)),
            only_old=(), only_new=(), changed=(), series=())

    def test_reports_of_different_benchmarks_are_refused(self) -> None:
        """Two reports whose ``benchmark`` fields differ are not compared."""
        with pytest.raises(ReportError, match="OLD is a report of 'core' and NEW of 'ingest'"):
            compare({"benchmark": "core", "chips": 1}, {"benchmark": "ingest", "chips": 1})

    def test_reports_with_no_figure_in_common_are_refused(self) -> None:
        """Two reports sharing no numeric figure (one without a ``benchmark`` field) are not compared."""
        with pytest.raises(ReportError, match="no figure in common"):
            compare({"rows": [1.0]}, {"benchmark": "core", "results": []})


class TestCommandLine:
    def test_the_ratio_table(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The command prints a Markdown table of each figure's old, new and new/old, then what it left out,
        and exits 0."""
        old = write(tmp_path / "old.json", {"benchmark": "scrape", "results": [
            {"topology": "rainier", "series": 34_666, "scrape_latency_s": {"median": 0.002, "p99": 0.005}}]})
        new = write(tmp_path / "new.json", {"benchmark": "scrape", "results": [
            {"topology": "rainier", "series": 150_374, "scrape_latency_s": {"median": 0.003, "p99": 0.02},
             "gzip_bytes": 1_051_893}]})
        assert command(str(old), str(new)) == 0
        assert capsys.readouterr().out == (
            "| figure | old | new | new/old |\n"
            "|---|---|---|---|\n"
            "| results[topology=rainier].series | 34,666 | 150,374 | 4.338 |\n"
            "| results[topology=rainier].scrape_latency_s | 0.002 | 0.003 | 1.500 |\n"
            f"\nonly in {new}: results[topology=rainier].gzip_bytes\n")

    def test_every_statistic(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """``--all`` tables each statistic of a distribution."""
        old = write(tmp_path / "old.json", {"lag_s": {"p50": 1.0, "p99": 2.0}})
        new = write(tmp_path / "new.json", {"lag_s": {"p50": 1.0, "p99": 3.0}})
        assert command(str(old), str(new), "--all") == 0
        assert capsys.readouterr().out.splitlines()[2:] == ["| lag_s.p50 | 1 | 1 | 1.000 |",
                                                            "| lag_s.p99 | 2 | 3 | 1.500 |"]

    @pytest.mark.parametrize("baseline", sorted(p.name for p in RESULTS.glob("*.json")))
    def test_a_baseline_against_itself(self, baseline: str, capsys: pytest.CaptureFixture[str]) -> None:
        """Each committed baseline compared with itself: every figure's ratio 1.000, nothing apart but the
        series left out."""
        assert command(str(RESULTS / baseline), str(RESULTS / baseline)) == 0
        out = capsys.readouterr().out
        table, _, rest = out.partition("\n\n")
        rows = table.splitlines()[2:]
        assert (len(rows) > 0, [row for row in rows if not row.endswith("| 1.000 |")],
                [line for line in rest.splitlines() if line and not line.startswith("series left out: ")]) == (
            True, [], [])

    @pytest.mark.parametrize(("old", "new", "error"), [
        ("missing.json", "core.json", "benchmarks compare: cannot read {tmp}/missing.json: No such file or directory"),
        ("text.json", "core.json", "benchmarks compare: {tmp}/text.json is not JSON: Expecting value: line 1 column 1 "
                                   "(char 0)"),
        ("list.json", "core.json", "benchmarks compare: {tmp}/list.json holds a JSON list, not a benchmark's report "
                                   "(an object)"),
        ("core.json", "ingest.json", "benchmarks compare: OLD is a report of 'core' and NEW of 'ingest'"),
    ], ids=["missing", "not-json", "not-an-object", "another-benchmark"])
    def test_what_cannot_be_compared_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str,
                                             new: str, error: str) -> None:
        """A file that cannot be read as a JSON object, or two benchmarks' reports: exit 2, one line on stderr,
        nothing on stdout."""
        (tmp_path / "text.json").write_text("not json\n")
        write(tmp_path / "list.json", [1, 2])
        paths = {name: RESULTS / name if (RESULTS / name).exists() else tmp_path / name for name in (old, new)}
        assert command(str(paths[old]), str(paths[new])) == 2
        assert capsys.readouterr() == ("", error.format(tmp=tmp_path) + "\n")
