"""Every table of ``top``, with what SREs expect of a table in ``top``/``htop``:
``/`` keeps the rows holding a text, ``<`` and ``>`` pick the column to sort
by and ``I`` turns the order round.

A screen refills its tables at each new generation (``fill``): the table
keeps the rows it was given, so a filter or a sort is applied again to every
refill, and changing either redraws from what it holds without asking the
monitor.  Sorting reads a cell as a person does: ``62.2 PF/s`` above
``19.9 PF/s``, ``56.4%`` above ``9.1%``, ``-`` (unknown) last whichever way.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist

_PREFIX: Final = {"E": 1e18, "P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "m": 1e-3, "µ": 1e-6, "n": 1e-9}
_NUMBER: Final = re.compile(r"^-?[0-9][0-9,]*(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?")
_SCALED: Final = re.compile(r"^\s*([EPTGMkmµn])?[A-Za-z/]")
_BRACKET: Final = re.compile(r"(\\*)\[")
_TAG_SHAPE: Final = re.compile(r"\[[a-z#/@][^[]*?]")  # what Rich reads as a tag (rich.markup.RE_TAGS)


def literal(text: str) -> str:
    """Return ``text`` as Rich markup that draws exactly ``text``.

    Rich reads ``[`` followed by a tag's shape (``[b]``, ``[/x]``, ``[link=…]``) as a tag, ``\\`` pairs before it
    as backslashes and an odd one as its escape; in plain text it reads ``\\[`` as ``[``.  So a tag-shaped ``[``
    gets its backslashes doubled and one more (``rich.markup.escape``'s rule), and any other ``[`` after a
    backslash one backslash more (``rich.markup.escape`` leaves that one, and ``\\[`` was drawn ``[``).
    """
    def one(match: re.Match[str]) -> str:
        slashes = match.group(1)
        if _TAG_SHAPE.match(text, match.end() - 1):
            return f"{slashes}{slashes}\\["
        return f"{slashes}\\[" if slashes else "["

    return _BRACKET.sub(one, text)


def sort_value(cell: object) -> tuple[int, float, str]:
    """Return how ``cell`` sorts: numbers (with their SI prefix, a ``%``, thousands commas) by value, then text;
    unknown (``-``, empty) is the largest key, so it goes last in an ascending sort."""
    text = str(cell.plain if isinstance(cell, Text) else cell).strip()
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return (0, float(cell), "")
    if text in ("", "-", "None"):
        return (2, 0.0, "")
    match = _NUMBER.match(text)
    if match is None:
        return (1, 0.0, text.lower())
    value = float(match.group(0).replace(",", ""))
    rest = text[match.end():]
    unit = _SCALED.match(rest)
    if unit and unit.group(1):
        value *= _PREFIX[unit.group(1)]
    return (0, value, text.lower())


class Rows(DataTable[Any]):
    """A table that keeps its rows, and shows those holding ``query``, sorted by column ``sort_column``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cursor_type", "row")
        super().__init__(**kwargs)
        self.query_text = ""
        self.sort_column: int | None = None
        self.descending = False
        self.rows_given: list[tuple[str, Sequence[Any]]] = []

    def shown(self) -> list[tuple[str, Sequence[Any]]]:
        """The rows given, filtered and sorted as the table says (a key given twice kept once)."""
        seen: set[str] = set()
        rows = []
        for key, cells in self.rows_given:
            if key in seen:
                continue
            seen.add(key)
            rows.append((key, cells))
        if self.query_text:
            wanted = self.query_text.lower()
            rows = [r for r in rows if any(wanted in str(c.plain if isinstance(c, Text) else c).lower()
                                           for c in r[1])]
        if self.sort_column is not None:
            column = self.sort_column
            known = [r for r in rows if sort_value(r[1][column])[0] < 2]
            unknown = [r for r in rows if sort_value(r[1][column])[0] == 2]
            known.sort(key=lambda r: sort_value(r[1][column]), reverse=self.descending)
            rows = known + unknown
        return rows

    def sort_by(self, step: int = 0, *, invert: bool = False) -> str:
        """Move the sort to the column ``step`` away (the first one when unsorted), or turn the order round;
        redraw; return what it sorts by now."""
        count = len(self.ordered_columns)
        if not count:
            return "nothing to sort"
        if invert:
            self.sort_column = 0 if self.sort_column is None else self.sort_column
            self.descending = not self.descending
        else:
            self.sort_column = 0 if self.sort_column is None else (self.sort_column + step) % count
        self.redraw()
        label = self.ordered_columns[self.sort_column].label.plain
        return f"sorted by {label}, {'descending' if self.descending else 'ascending'}"

    def filter(self, text: str) -> None:
        """Show only the rows holding ``text`` (any case; empty: every row)."""
        self.query_text = text
        self.redraw()

    def redraw(self) -> None:
        """Draw the rows given again, as filtered and sorted now, keeping the cursor on its row."""
        held = None
        if self.row_count and 0 <= self.cursor_row < self.row_count:
            held = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        self.clear()
        for key, cells in self.shown():
            self.add_row(*(literal(cell) if isinstance(cell, str) else cell for cell in cells), key=key)
        if held is not None:
            with contextlib.suppress(RowDoesNotExist):  # the row is gone: the cursor stays where clear() put it
                self.move_cursor(row=self.get_row_index(held), animate=False)
        self.border_subtitle = self.describe()

    def describe(self) -> str:
        """The filter and sort in force, for the table's border (empty when neither)."""
        parts = []
        if self.query_text:
            parts.append(f"/{self.query_text} ({self.row_count} of {len(self.rows_given)})")
        if self.sort_column is not None and self.ordered_columns:
            parts.append(f"by {self.ordered_columns[self.sort_column].label.plain} "
                         f"{'desc' if self.descending else 'asc'}")
        return "  ".join(parts)


def fill(table: DataTable[Any], rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
    """Replace ``table``'s rows by ``rows`` (key, cells), keeping the cursor on the same key where it is still
    there; a ``Rows`` table applies its filter and sort to them.

    A text cell is drawn as the monitor spelled it: a DataTable reads a plain string as Rich markup, so a job
    named ``lab/[/x]`` would end the application and ``[link=…]`` would draw a link; escaped, it is text.
    (Escaped strings, not ``Text`` cells: those keep the table's column widths stale for a while under load.)
    A key seen twice (a monitor listing one UltraServer twice) is shown once: a table's row keys are unique.
    """
    if isinstance(table, Rows):
        table.rows_given = list(rows)
        table.redraw()
        return
    held = None
    if table.row_count and 0 <= table.cursor_row < table.row_count:
        held = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    table.clear()
    shown: set[str] = set()
    for key, cells in rows:
        if key in shown:
            continue
        shown.add(key)
        table.add_row(*(literal(cell) if isinstance(cell, str) else cell for cell in cells), key=key)
    if held is not None:
        with contextlib.suppress(RowDoesNotExist):
            table.move_cursor(row=table.get_row_index(held), animate=False)
