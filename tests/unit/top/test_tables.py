"""Specification of top's tables (rainierd/top/tables.py): ``/`` filters, ``<`` ``>`` and ``I`` sort as a person
reads the cells, and a refill keeps both."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult

from rainierd.top.tables import Rows, fill, sort_value


class TestSortValue:
    def test_figures_sort_by_what_they_mean(self) -> None:
        """SI prefixes, percentages and thousands commas sort by value; text after numbers; unknown last."""
        cells = ["62.2 PF/s", "197 PF/s", "0", "-", "1.5 EF/s", "9.1%", "1,024", "lab/x"]
        assert sorted(cells, key=sort_value) == ["0", "9.1%", "1,024", "62.2 PF/s", "197 PF/s", "1.5 EF/s", "lab/x",
                                                 "-"]


class _Tables(App[None]):
    def compose(self) -> ComposeResult:
        table = Rows(id="t")
        table.add_columns("job", "lost")
        yield table


def _shown(table: Rows) -> list[list[Any]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


class TestRows:
    async def test_filter_and_sort_survive_a_refill(self) -> None:
        """A filter keeps the rows holding its text, any case; a sort by ``lost`` descending holds through the
        next generation's refill; unknown stays last."""
        app = _Tables()
        async with app.run_test() as pilot:
            table = app.query_one(Rows)
            rows = [("a", ("lab/a", "62.2 PF/s")), ("b", ("lab/b", "197 PF/s")), ("c", ("ops/c", "-")),
                    ("d", ("lab/d", "1 EF/s"))]
            fill(table, rows)
            assert table.sort_by(1) == "sorted by job, ascending"  # the first > sorts by the first column
            assert table.sort_by(1) == "sorted by lost, ascending"
            table.sort_by(invert=True)
            assert _shown(table) == [["lab/d", "1 EF/s"], ["lab/b", "197 PF/s"], ["lab/a", "62.2 PF/s"],
                                     ["ops/c", "-"]]
            table.filter("LAB/")
            fill(table, rows[:3])
            await pilot.pause()
            assert _shown(table) == [["lab/b", "197 PF/s"], ["lab/a", "62.2 PF/s"]]
            assert table.describe() == "/LAB/ (2 of 3)  by lost desc"
