"""The heat map: every UltraServer of the fleet as one character cell,
coloured by the share of its FP8 it keeps (or by its effective share: the
``c`` key, ``model.Scale``), grouped under a title line per site.

At ``rainier`` that is 7,800 cells: 60 lines of 130 at a common terminal
width, so the map scrolls and draws only the lines on screen (Textual's line
API: ``render_line`` builds one ``Strip`` a visible line, whatever the fleet's
size).  ``HeatLayout`` is the pure part (which cell is on which line, where
the cursor goes), tested without a terminal; ``HeatMap`` is the widget.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from rainierd.top.model import Document, Scale, ScaleMode, fit
from rainierd.top.names import number

_TITLE: Final = Style(bold=True)
_CURSOR: Final = Style(bgcolor="#ffffff", color="#000000", bold=True)
_MARK: Final = "!"  # a cell with an unhealthy entity


def _number(ident: str) -> int:
    """The number a site's or UltraServer's id ends in (``u5``, ``s0/u5`` -> 5), 0 for none."""
    found = number(ident)
    return 0 if found is None else found


def ordered(cells: Sequence[Document]) -> list[Document]:
    """Return ``cells`` (rows of ``/api/v1/ultraservers``) by site, then by UltraServer number."""
    return sorted(cells, key=lambda c: (_number(str(c.get("site") or "")), _number(str(c["id"]))))


def _label(cell: Document) -> str:
    """A cell's name on the map: its UltraServer without the site (``u5`` of ``s0/u5``: the title line above
    names the site)."""
    return str(cell["id"]).rsplit("/", 1)[-1]


def labelled_width(cells: Sequence[Document], width: int, height: int) -> int:
    """Return how wide a cell is drawn: wide enough for its UltraServer's name (``!u5`` and a gap) when every
    cell so drawn fits in ``width`` x ``height`` (a small fleet, the demo's: a map of one-character cells of
    two UltraServers says nothing a reader can find), else 1 (a large fleet: one character an UltraServer)."""
    if not cells:
        return 1
    wide = max(len(_label(c)) for c in cells) + 2
    per_line = width // wide
    if per_line < 1:
        return 1
    sites: dict[str, int] = {}
    for cell in cells:
        site = str(cell.get("site") or "?")
        sites[site] = sites.get(site, 0) + 1
    lines = sum(1 + -(-count // per_line) for count in sites.values())
    return wide if lines <= height else 1


class HeatLayout:
    """Where each cell goes: a title line per site, then its cells, ``width`` a line.

    ``rows[i]`` is ``(site, start, stop)``: a title when ``start == -1``, else cells ``start:stop``.
    """

    def __init__(self, cells: Sequence[Document], width: int, cell_width: int = 1) -> None:
        self.cells = ordered(cells)
        self.cell_width = max(1, cell_width)  # characters a cell takes: 1, or room for its name (``labelled``)
        self.width = max(1, width // self.cell_width)
        self.rows: list[tuple[str, int, int]] = []
        self.place: list[tuple[int, int]] = []  # cell index -> (row, column)
        start = 0
        for site, group in itertools.groupby(self.cells, key=lambda c: str(c.get("site") or "?")):
            stop = start + sum(1 for _ in group)
            self.rows.append((site, -1, -1))
            for first in range(start, stop, self.width):
                row = len(self.rows)
                last = min(first + self.width, stop)
                self.rows.append((site, first, last))
                self.place.extend((row, i - first) for i in range(first, last))
            start = stop

    def index(self, ident: str) -> int | None:
        """Return the index of the cell of UltraServer ``ident``."""
        return next((i for i, cell in enumerate(self.cells) if cell["id"] == ident), None)

    def move(self, index: int, dx: int, dy: int) -> int:
        """Return the cell reached from ``index`` by ``dx`` cells along, or ``dy`` lines of cells up or down
        (a site's title is stepped over; the column is kept where the line is long enough)."""
        if not self.cells:
            return 0
        if dx:
            return min(max(index + dx, 0), len(self.cells) - 1)
        row, column = self.place[index]
        step = 1 if dy > 0 else -1
        for _ in range(abs(dy)):
            target = row + step
            while 0 <= target < len(self.rows) and self.rows[target][1] == -1:
                target += step
            if not 0 <= target < len(self.rows):
                break
            row = target
        _site, start, stop = self.rows[row]
        return min(start + column, stop - 1)


class HeatMap(ScrollView, can_focus=True):
    """The scrolling heat map: arrows move the cursor, Enter opens the UltraServer under it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "step(-1, 0)", "Left", show=False),
        Binding("right", "step(1, 0)", "Right", show=False),
        Binding("up", "step(0, -1)", "Up", show=False),
        Binding("down", "step(0, 1)", "Down", show=False),
        Binding("pageup", "step(0, -10)", "Page up", show=False),
        Binding("pagedown", "step(0, 10)", "Page down", show=False),
        Binding("enter", "open", "Open UltraServer"),
    ]
    DEFAULT_CSS = """
    HeatMap { height: 1fr; }
    """

    class Highlighted(Message):
        """The cursor is on ``cell`` (a row of ``/api/v1/ultraservers``)."""

        def __init__(self, cell: Document) -> None:
            super().__init__()
            self.cell = cell

    class Selected(Message):
        """Enter on the cell of UltraServer ``ultraserver``."""

        def __init__(self, ultraserver: str) -> None:
            super().__init__()
            self.ultraserver = ultraserver

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._cells: Sequence[Document] = ()
        self._titles: Mapping[str, str] = {}
        self.mode: ScaleMode = "kept"
        self.scale = Scale.of(self.mode, ())
        self._layout = HeatLayout((), 1)
        self.cursor = 0
        # Lines already drawn, by layout row, without the cursor: moving the cursor redraws two lines, not the
        # screen (at rainier a screenful is ~5,000 cells).  Emptied whenever the cells, colours or width change.
        self._lines: dict[int, Strip] = {}
        self._styles: dict[tuple[str, bool], Style] = {}

    @property
    def layout_(self) -> HeatLayout:
        """The current layout (tests read which cell is where)."""
        return self._layout

    @property
    def current(self) -> Document | None:
        """The cell under the cursor."""
        cells = self._layout.cells
        return cells[self.cursor] if 0 <= self.cursor < len(cells) else None

    def show(self, cells: Sequence[Document], titles: Mapping[str, str]) -> None:
        """Draw ``cells`` (keeping the cursor on the same UltraServer) under each site's title."""
        held = self.current
        self._cells, self._titles = cells, titles
        self.scale = Scale.of(self.mode, cells)
        self._relayout()
        if held is not None and (index := self._layout.index(str(held["id"]))) is not None:
            self.cursor = index
        self.cursor = min(self.cursor, max(0, len(self._layout.cells) - 1))
        self._announce()

    def recolour(self, mode: ScaleMode) -> None:
        """Colour the cells by ``mode`` (``model.Scale``)."""
        self.mode = mode
        self.scale = Scale.of(mode, self._cells)
        self._lines.clear()
        self.refresh()

    def _relayout(self) -> None:
        width = max(8, self.scrollable_content_region.width or self.size.width or 80)
        height = self.scrollable_content_region.height or self.size.height or 10
        self._layout = HeatLayout(self._cells, width, labelled_width(self._cells, width, height))
        self._lines.clear()
        self.virtual_size = Size(width, len(self._layout.rows))
        self.refresh()

    def on_resize(self) -> None:
        """Reflow the cells to the new width, and say again what is under the cursor (in the new width)."""
        self._relayout()
        self._scroll_to_cursor()
        self._announce()

    def render_line(self, y: int) -> Strip:
        """Draw line ``y`` of the visible region."""
        row = y + int(self.scroll_offset.y)
        if not 0 <= row < len(self._layout.rows):
            return Strip.blank(self.size.width)
        site, start, stop = self._layout.rows[row]
        if start == -1:
            title = self._titles.get(site, site)
            head, _, rest = title.partition(": ")
            text = fit(f"{head}: ", rest.split(", "), self.size.width) if rest else title
            text = text[: self.size.width]  # a site's name alone longer than the map
            return Strip([Segment(text, _TITLE)], len(text))
        if not (self.has_focus and start <= self.cursor < stop):
            if (strip := self._lines.get(row)) is None:
                strip = self._lines[row] = self._draw(start, stop, None)
            return strip
        return self._draw(start, stop, self.cursor)

    def _draw(self, start: int, stop: int, cursor: int | None) -> Strip:
        cells = self._layout.cells
        wide = self._layout.cell_width
        segments = []
        for i in range(start, stop):
            cell = cells[i]
            marked = bool(cell.get("unhealthy_total"))
            if wide > 1:  # the cell's name on its colour, the mark before it, a gap after it
                text = f"{_MARK if marked else ' '}{_label(cell)}"[: wide - 1].ljust(wide - 1)
            else:
                text = _MARK if marked else ("@" if i == cursor else " ")
            if i == cursor:
                segments.append(Segment(text, _CURSOR))
            else:
                key = (self.scale.colour(cell), marked)
                if (style := self._styles.get(key)) is None:
                    style = self._styles[key] = Style(bgcolor=key[0], color="#000000", bold=marked)
                segments.append(Segment(text, style))
            if wide > 1:
                segments.append(Segment(" "))
        return Strip(segments, (stop - start) * wide)

    def action_step(self, dx: int, dy: int) -> None:
        """Move the cursor: redraw the line it leaves and the line it reaches."""
        before = self.cursor
        self.cursor = self._layout.move(self.cursor, dx, dy)
        self._scroll_to_cursor()
        for index in {before, self.cursor}:
            if self._layout.place:
                row = self._layout.place[min(index, len(self._layout.place) - 1)][0]
                self.refresh(Region(0, row - int(self.scroll_offset.y), self.size.width, 1))
        self._announce()

    def action_open(self) -> None:
        """Open the UltraServer under the cursor."""
        if (cell := self.current) is not None:
            self.post_message(self.Selected(str(cell["id"])))

    def on_focus(self) -> None:
        """Show the cursor."""
        self.refresh()

    def on_blur(self) -> None:
        """Hide the cursor."""
        self.refresh()

    def _scroll_to_cursor(self) -> None:
        if self._layout.place:
            row, column = self._layout.place[min(self.cursor, len(self._layout.place) - 1)]
            wide = self._layout.cell_width
            self.scroll_to_region(Region(column * wide, row, wide, 1), animate=False, immediate=True)

    def _announce(self) -> None:
        if (cell := self.current) is not None:
            self.post_message(self.Highlighted(cell))

    def cells_by_colour(self) -> dict[str, list[Any]]:
        """Return the UltraServer ids of each colour on the map (what a reader of the map sees, for tests)."""
        by: dict[str, list[Any]] = {}
        for cell in self._layout.cells:
            by.setdefault(self.scale.colour(cell), []).append(cell["id"])
        return by
