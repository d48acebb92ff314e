"""The keys ``top`` shares with the tools SREs already live in: ``?`` for
help, ``/`` to filter the table in focus, ``<`` ``>`` to pick the column it
sorts by and ``I`` to turn the order round (htop's keys).

``HELP`` is the one list of keys: the help screen shows it and docs/top.md
quotes it (a unit test keeps them equal).
"""

from __future__ import annotations

from typing import ClassVar, Final

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from rainierd.top.tables import Rows

HELP: Final = """\
fleet screen
  arrows, PgUp/PgDn  move on the heat map; Enter opens the UltraServer
  u j s a            UltraServers / jobs / sites / advisories tab
  h                  back to the heat map
  c                  colour by FP8 kept / by effective share
any table
  /                  keep the rows holding a text (Enter keeps, Esc clears)
  < >                sort by the column to the left / to the right
  I                  turn the sort order round
any screen
  Enter              open the row (fleet > UltraServer > node > entity)
  Escape             back one screen (the breadcrumb, line 2, says where)
  Tab                next panel
  r                  poll now
  ?                  this help
  q                  quit"""


class HelpScreen(ModalScreen[None]):
    """Every key, over the screen it was asked from; any of Escape, ``?`` or ``q`` closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 82; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $primary; background: $surface; padding: 0 1; }
    HelpScreen #help { width: 100%; height: auto; }
    """

    def compose(self) -> ComposeResult:
        """The keys."""
        with VerticalScroll():
            yield Static("rainierd top: keys (Escape closes)\n\n" + HELP, markup=False, id="help")


class FilterBar(Input):
    """The ``/`` line under a table: what is typed filters the table as it is typed; Enter keeps the filter and
    goes back to the table (the line stays while a filter holds), Escape clears it and closes the line."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "clear", "Clear filter")]
    DEFAULT_CSS = """
    FilterBar { dock: bottom; height: 1 !important; border: none !important; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, table: Rows) -> None:
        super().__init__(value=table.query_text, placeholder="filter: type a text (Enter keeps, Escape clears)")
        self.table = table

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as it is typed."""
        event.stop()
        self.table.filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Keep the filter; back to the table."""
        event.stop()
        self.table.focus()
        if not event.value:
            self.remove()

    def action_clear(self) -> None:
        """Clear the filter and close the line."""
        self.table.filter("")
        self.table.focus()
        self.remove()
