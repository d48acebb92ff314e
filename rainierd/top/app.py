"""The ``rainierd top`` application: the fleet screen and the poll that
keeps every screen current.

Once an interval (default 1 s, about a monitor tick) it asks ``/api/v1/fleet``
(3 KB); only when the monitor's generation has moved on does it fetch the
rest the fleet screen shows: the heat map's page of every UltraServer (seven
small fields a row: 1.3 MB before gzip at ``rainier``), the sites, the worst
UltraServers, the jobs, the advisories and the recent events, concurrently.
The drill-down screen on top fetches its own document at the same moment
(``screens``).  Every answer is held against the read API's schema
(``answers``) by the source before anything draws from it; what comes back
is frozen into one ``View``, and a document that did not come or was
refused keeps its last good value.  The banner of every screen says how far
to trust it (``model.health``): live, behind (the monitor's newest sample is
old, it is overloaded, or its broker session is down), stalled (no new
analysis), unreachable (nothing answered within the timeout, and since when
the screen shows old figures) or a bad answer (what was refused, where, and
why).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Final

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, RichLog, Static, TabbedContent, TabPane

from rainierd.top.answers import BadAnswerError
from rainierd.top.heatmap import HeatMap
from rainierd.top.keys import FilterBar, HelpScreen
from rainierd.top.model import (
    COLOURS,
    UNKNOWN_COLOUR,
    Document,
    Health,
    Scale,
    View,
    cause_text,
    event_text,
    first_cause,
    fit,
    flops,
    health,
    percent,
    seconds,
)
from rainierd.top.screens import (
    Banner,
    DrillScreen,
    JobScreen,
    SiteScreen,
    UltraServerScreen,
    trouble_line,
    ultraserver_row,
)
from rainierd.top.source import Source, SourceError
from rainierd.top.tables import Rows, fill

# What the fleet screen fetches at each new generation (docs/top.md).
HEAT_FIELDS: Final = "site,effective_flops,effective_share,lost_flops,unhealthy_total,chips_present,chips_reporting"
TARGETS: Final = {
    "heat": f"/api/v1/ultraservers?limit=10000&fields={HEAT_FIELDS}",
    "sites": "/api/v1/sites",
    "worst": "/api/v1/ultraservers?sort=lost&limit=50",
    "jobs": "/api/v1/jobs?sort=lost&limit=100",
    "events": "/api/v1/events?limit=100",
    "actions": "/api/v1/actions?limit=100",
}
_ENTITY_LABELS: Final = {"neuronlink": "NeuronLink", "efa": "EFA", "chip": "chip", "node": "node",
                         "ultraserver": "UltraServer", "feed": "feed"}


def _unhealthy_parts(unhealthy: Mapping[str, Mapping[str, int]] | None) -> list[str]:
    return [f"{_ENTITY_LABELS.get(entity, entity)} {state} {count:,}"
            for entity, states in (unhealthy or {}).items() for state, count in states.items() if count]


def fleet_header(view: View, width: int = 120) -> Text:
    """The fleet screen's five header lines, each fitted to ``width`` columns (``fit``: nothing cut, what does
    not fit counted): FP8 and goodput, lost FP8 by cause, the entities costing most, the fleet's size and the
    monitor, unhealthy entities."""
    fleet = view.fleet
    text = Text(no_wrap=True, overflow="ellipsis")
    if fleet is None:
        return text
    chips = fleet.get("chips") or {}
    monitor = fleet.get("monitor") or {}
    lines: list[tuple[str, str, str]] = []  # (bold head, rest, head style)
    reporting = f"  chips {chips.get('reporting', 0):,}/{chips.get('total', 0):,} reporting"
    first = (f"{flops(fleet.get('effective_flops'))} of {flops(fleet.get('peak_flops'))} "
             f"({percent(fleet.get('effective_share'))})  goodput {percent(fleet.get('goodput_ratio'))}")
    lines.append(("FP8 ", first + (reporting if len(first) + len(reporting) + 4 <= width else ""), "bold"))
    lost_head = f"{flops(fleet.get('lost_flops'))}: "
    fallback = "  (no job known: priced per UltraServer)" if fleet.get("loss_model") == "per_ultraserver_fallback" \
        else ""
    causes = [part for part in cause_text(fleet.get("lost_by_cause"), top=6).split(", ") if part != "none"]
    lines.append(("lost ", fit(lost_head, causes, width - 5 - len(fallback)) + fallback,
                  "bold red" if fleet.get("lost_flops") else "bold"))
    lines.append(("costing most ", fit("", culprit_parts(fleet.get("culprits")), width - 13, empty="-"), "bold"))
    lag = monitor.get("lag_s")
    analysis = monitor.get("analysis_s")
    size = (f"{fleet.get('sites', 0)} sites, {fleet.get('ultraservers', 0):,} UltraServers, "
            f"{fleet.get('jobs', 0):,} jobs  ")
    state = (f"lag {seconds(lag) if isinstance(lag, (int, float)) else '-'}, analysis "
             f"{f'{analysis * 1000:.0f} ms' if isinstance(analysis, (int, float)) else '-'}"
             f"{', OVERLOADED' if monitor.get('overloaded') else ''}")
    if backlog := monitor.get("backlog_messages"):
        state += f", backlog {backlog:,}"
    lines.append(("fleet ", (size if len(size) + len(state) + 14 <= width else "") + "monitor " + state, "bold"))
    lines.append(("unhealthy ", fit("", _unhealthy_parts(fleet.get("unhealthy")), width - 10), "bold"))
    for n, (head, rest, style) in enumerate(lines):
        text.append(head, style)
        text.append(rest + ("\n" if n < len(lines) - 1 else ""))
    return text


def culprit_parts(culprits: object) -> list[str]:
    """The fleet's costliest entities, each as ``<kind> <id> <FLOP/s>`` (``NeuronLink s0/u5/n20/chip0/link2
    62.2 PF/s``), costliest first: the jobs tab and the entity's screen say which job each slows."""
    if not isinstance(culprits, list):
        return []
    return [f"{_ENTITY_LABELS.get(str(c.get('entity')), c.get('entity'))} {c.get('id')} {flops(c.get('flops'))}"
            for c in culprits if isinstance(c, dict)]


def culprits_text(culprits: object, *, top: int = 5) -> str:
    """The fleet's ``top`` costliest entities as one line (``chip 6440 197 PF/s, NeuronLink 992 62.2 PF/s``)."""
    return ", ".join(culprit_parts(culprits)[:top]) or "-"


def cause_of(advisory: Document) -> str:
    """An advisory's first cause, within its node (``chip5 failed``, ``efa10 degraded +1``): the advisories tab
    names it; the whole reason is on the entity's screen (Enter: the node's UltraServer)."""
    causes = advisory.get("causes") or []
    if not causes:
        return "-"
    first = causes[0]
    ident = str(first.get("id"))
    match = re.search(r"(?:^|/)n[0-9]+/(.+)$", ident)
    part = match.group(1) if match else f"{first.get('entity')} {ident}"
    return f"{part} {first.get('state')}" + (f" +{len(causes) - 1}" if len(causes) > 1 else "")


def legend(scale: Scale, width: int = 200) -> Text:
    """The heat map's key: what each colour means on ``scale``, in ``width`` columns (the title and the ``c``
    hint give way first, never the colours)."""
    uppers = [*scale.floors[1:], None]
    keys = [(colour, f" <{upper:.0%}" if floor == 0 and upper is not None else f" >={floor:.0%}")
            for floor, colour, upper in zip(scale.floors, COLOURS, uppers, strict=True)]
    hint = f"  (c: colour by {'effective share' if scale.mode == 'kept' else 'FP8 kept'})"
    body = sum(3 + len(label) for _, label in keys) + len("    none ! unhealthy")
    title = f"{scale.title()}:" if len(scale.title()) + 1 + body + len(hint) <= width else (
        "FP8 kept:" if scale.mode == "kept" else "share vs healthy:")
    text = Text(title, no_wrap=True, overflow="ellipsis")
    for colour, label in keys:
        text.append(" ")
        text.append("  ", f"on {colour}")
        text.append(label)
    text.append(" ")
    text.append("  ", f"on {UNKNOWN_COLOUR}")
    text.append(" none ")
    text.append("!", "bold black on #a3c85a")
    text.append(" unhealthy")
    if len(text.plain) + len(hint) <= width:
        text.append(hint)
    return text


def site_titles(view: View) -> dict[str, str]:
    """Each site's title line over its cells, the most telling figures first (the map fits it to its width with
    ``model.fit``: what does not fit is counted, not cut)."""
    titles = {}
    for site in view.sites:
        name = f" {site['name']}" if site.get("name") else ""
        bad = sum((site.get("unhealthy") or {}).values())
        titles[str(site["id"])] = (f"{site['id']}{name}: lost {flops(site.get('lost_flops'))}, {bad:,} unhealthy, "
                                   f"effective {percent(site.get('effective_share'))}, "
                                   f"{site.get('ultraservers', 0):,} UltraServers")
    return titles


class FleetScreen(Screen[None]):
    """The whole fleet: header, heat map, worst UltraServers, jobs, sites, advisories and the event feed."""

    ready = False  # mounted: its widgets can be drawn on

    def __init__(self) -> None:
        super().__init__()
        self._drawn: int | None = None  # the generation on screen
        self._shown: set[tuple[Any, ...]] = set()  # the events of the API's window already in the feed
        self._events_width = 0  # the width the feed was written at

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("h", "heat", "Map"),
        Binding("u", "tab('worst')", "UltraServers", show=False),
        Binding("j", "tab('jobs')", "Jobs"),
        Binding("s", "tab('sites')", "Sites", show=False),
        Binding("a", "tab('actions')", "Advisories"),
        Binding("c", "colour", "Colour by", show=False),
    ]

    def compose(self) -> ComposeResult:
        """Lay the fleet out."""
        yield Banner(id="banner")
        yield Static(id="header")
        with Horizontal(id="middle"):
            with Vertical(id="left"):
                yield Static(id="legend")
                yield HeatMap(id="heat")
                yield Static(id="cell")
            with TabbedContent(id="tabs", initial="tab-worst"):
                with TabPane("UltraServers", id="tab-worst"):
                    worst = Rows(id="worst")
                    worst.add_columns("UltraServer", "eff.", "lost", "by", "bad")
                    yield worst
                with TabPane("Jobs", id="tab-jobs"):
                    jobs = Rows(id="jobs")
                    jobs.add_columns("job", "goodput", "lost", "phase", "by", "chips")
                    yield jobs
                with TabPane("Sites", id="tab-sites"):
                    sites = Rows(id="sites")
                    sites.add_columns("site", "UltraServers", "reporting", "eff.", "lost", "bad")
                    yield sites
                with TabPane("Advisories", id="tab-actions"):
                    yield Static(id="actions-note")
                    actions = Rows(id="actions")
                    actions.add_columns("node", "action", "state", "protects", "cause")
                    yield actions
        yield RichLog(id="events", max_lines=500, wrap=True)
        yield Footer()

    @property
    def top(self) -> TopApp:
        """The application (typed)."""
        return self.app  # type: ignore[return-value]

    def on_resize(self) -> None:
        """Give the map, the tabs and the events what the terminal can spare: under 110 columns the map and the
        tabs take the whole width in turn (the map while it has the focus, the tabs while one of their tables
        does: ``h`` and ``u``/``j``/``s``/``a`` switch), so at 80 x 24 no table is cut."""
        with contextlib.suppress(NoMatches):  # the application quitting: its widgets are gone
            self._resized()

    def _resized(self) -> None:
        self.query_one("#events").styles.height = 5 if self.size.height < 32 else 9
        self._arrange()
        if self.size.width != self._events_width:  # the feed wraps at the width it is written in: write it again
            self._events_width = self.size.width
            self.query_one("#events", RichLog).clear()
            self._shown = set()
            self._show_events(self.top.view)
        heat = self.query_one(HeatMap)
        self.query_one("#legend", Static).update(legend(heat.scale, self.query_one("#left").size.width or 200))
        if self.top.view.fleet is not None:
            self.query_one("#header", Static).update(fleet_header(self.top.view, self.size.width))

    def on_descendant_focus(self) -> None:
        """In a narrow terminal, show the panel that has the focus."""
        with contextlib.suppress(NoMatches):  # the application quitting as the focus moves
            self._arrange()

    def _arrange(self) -> None:
        narrow = 0 < self.size.width < 110
        left, tabs = self.query_one("#left"), self.query_one("#tabs")
        focused = self.focused.table if isinstance(self.focused, FilterBar) else self.focused
        map_focused = not narrow or isinstance(focused, HeatMap) or focused is None
        tab_focused = not narrow or (focused is not None and tabs in focused.ancestors_with_self)
        left.display = map_focused or not tab_focused
        tabs.display = not narrow or tab_focused
        tabs.styles.width = "1fr"
        left.styles.width = "1fr" if narrow else "2fr"

    def on_mount(self) -> None:
        """Focus the heat map and show what there is (nothing when the application is already quitting: its
        widgets are gone)."""
        with contextlib.suppress(NoMatches):
            self.query_one(HeatMap).focus()
            self.query_one("#events", RichLog).border_title = "events (newest last)"
            self.ready = True
            self.follow(self.top.view, self.top.health)

    def on_screen_resume(self) -> None:
        """Back from a drill-down: catch up (a screen resumes once before it is mounted, too)."""
        if self.ready:
            self.follow(self.top.view, self.top.health)

    def action_heat(self) -> None:
        """Focus the heat map."""
        self.query_one(HeatMap).focus()

    def action_colour(self) -> None:
        """Colour the heat map by the other figure (FP8 kept, effective share)."""
        heat = self.query_one(HeatMap)
        heat.recolour("peak" if heat.mode == "kept" else "kept")
        self.query_one("#legend", Static).update(legend(heat.scale, self.query_one("#left").size.width or 200))

    def action_tab(self, tab: str) -> None:
        """Show a tab and focus its table."""
        self.query_one("#tabs", TabbedContent).active = f"tab-{tab}"
        self.query_one(f"#{tab}", DataTable).focus()

    def follow(self, view: View, health_: Health) -> None:
        """Draw ``view``."""
        self.query_one(Banner).show(self.top.source.where, health_, view)
        self.query_one("#header", Static).update(fleet_header(view, self.size.width or 120))
        if view.generation == self._drawn:
            return
        self._drawn = view.generation
        heat = self.query_one(HeatMap)
        heat.show(view.heat, site_titles(view))
        self.query_one("#legend", Static).update(legend(heat.scale, self.query_one("#left").size.width or 200))
        fill(self.query_one("#worst", DataTable), (ultraserver_row(r, site=False) for r in view.worst
                                                   if r.get("lost_flops") or r.get("unhealthy_total")))
        fill(self.query_one("#jobs", DataTable), (
            (f"job:{j['id']}", (j["id"], percent(j.get("goodput_ratio")), flops(j.get("lost_flops")),
                                j.get("phase") or "-", first_cause(j.get("lost_by_cause")), j.get("chips")))
            for j in view.jobs))
        fill(self.query_one("#sites", DataTable), (
            (f"site:{s['id']}", (f"{s['id']}{' ' + s['name'] if s.get('name') else ''}", s.get("ultraservers"),
                                 f"{s.get('chips_reporting', 0):,}/{s.get('chips_present', 0):,}",
                                 percent(s.get("effective_share")), flops(s.get("lost_flops")),
                                 sum((s.get("unhealthy") or {}).values())))
            for s in view.sites))
        self._show_actions(view)
        self._show_events(view)

    def _show_actions(self, view: View) -> None:
        note = self.query_one("#actions-note", Static)
        actions = view.actions
        if actions is None:
            note.update(Text(f"advisories: {view.errors.get('actions', 'none yet')}", "italic"))
            rows: list[Document] = []
        else:
            rows = list(actions.get("actions", ()))
            brake = actions.get("brake") or {}
            note.update(Text(f"{actions.get('total', 0):,} advisories{' (dry run)' if actions.get('dry_run') else ''}"
                             f"{'; BRAKE TRIPPED' if brake.get('tripped') else ''}",
                             "bold red" if brake.get("tripped") else ""))
        fill(self.query_one("#actions", DataTable), (
            (f"node:{a.get('node')}@{a.get('ultraserver')}",
             (a.get("node"), a.get("action"), a.get("state"), flops(a.get("protects_flops")), cause_of(a)))
            for a in rows))

    def _show_events(self, view: View) -> None:
        """Append the events not shown yet, oldest first.  The API gives the newest ones; an event that has left
        that window never comes back, so remembering the window's keys alone bounds what is kept."""
        log = self.query_one("#events", RichLog)
        window = {(e.get("t_s"), e.get("entity"), e.get("id"), e.get("after")): e for e in view.events}
        for key, event in reversed(window.items()):  # newest first from the API
            if key in self._shown:
                continue
            unhealthy = event.get("after") not in ("healthy", None)
            log.write(Text(event_text(event), "red" if unhealthy else "green"))
        self._shown = set(window)

    def on_heat_map_highlighted(self, message: HeatMap.Highlighted) -> None:
        """Say what the cell under the cursor is."""
        cell = message.cell
        scale = self.query_one(HeatMap).scale
        kept = Scale.of("kept", ()).value(cell)
        relative = f" ({scale.value(cell):.0%} of a healthy one)" if scale.mode == "peak" and scale.value(cell) else ""
        parts = [f"keeps {percent(kept)} of its FP8", f"lost {flops(cell.get('lost_flops'))}",
                 f"{cell.get('unhealthy_total', 0)} unhealthy",
                 f"effective {percent(cell.get('effective_share'))} of peak{relative}",
                 f"{cell.get('chips_reporting', 0)}/{cell.get('chips_present', 0)} chips reporting", "Enter opens it"]
        self.query_one("#cell", Static).update(Text(
            fit(f"{cell['id']} (site {cell.get('site')}): ", parts, max(20, self.query_one("#left").size.width))),
            layout=False)  # one line of fixed height: a layout pass a keypress is the map's largest cost

    def on_heat_map_selected(self, message: HeatMap.Selected) -> None:
        """Open the UltraServer under the cursor."""
        self.top.open_key(f"us:{message.ultraserver}")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the row's UltraServer, job, site or node."""
        self.top.open_key(str(event.row_key.value))


class TopApp(App[None]):
    """``rainierd top``: follows the monitor behind ``source``."""

    TITLE = "rainierd top"
    ENABLE_COMMAND_PALETTE = False  # its key would take room in the footer; ``?`` lists every key
    CSS = """
    #header { height: 5; }
    #middle { height: 1fr; }
    #left { width: 2fr; }
    #legend, #cell { height: 1; }
    #tabs { width: 1fr; min-width: 50; }
    #events { height: 9; border-top: solid $primary; }
    .label { text-style: bold; margin-top: 1; }
    #title { height: auto; max-height: 4; }
    DataTable { height: 1fr; }
    #unhealthy, #culprits { height: auto; max-height: 45%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("slash", "filter", "Filter"),
        Binding("less_than_sign", "sort(-1)", "Sort <", show=False),
        Binding("greater_than_sign", "sort(1)", "Sort >", show=False),
        Binding("I", "invert", "Invert order", show=False),
        Binding("r", "refresh", "Refresh now", show=False),
    ]

    def __init__(self, source: Source, *, interval_s: float = 1.0, behind_after_s: float = 10.0,
                 stalled_after_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 stop_when: Callable[[], str | None] | None = None) -> None:
        super().__init__()
        # Asked before every poll; a line returned ends the application with exit code 1 and keeps the line
        # (``stopped_because``): ``run --top`` quits when the monitor it started is gone.
        self.stop_when = stop_when
        self.stopped_because: str | None = None
        self.source = source
        self.interval_s = interval_s
        self.behind_after_s = behind_after_s
        # No new analysis for five polls (at least 10 s): the monitor has stopped analysing.
        self.stalled_after_s = stalled_after_s if stalled_after_s is not None else max(10.0, 5 * interval_s)
        self.clock = clock
        self.view = View()
        self.health = Health("connecting", "connecting...")
        self.polls = 0  # polls completed (tests wait on it)
        self._last_ok_s: float | None = None
        self._last_error: str | None = None
        self._refused: str | None = None  # the fleet's latest answer, refused
        self._generation_since_s: float | None = None
        self._wake = asyncio.Event()

    def on_mount(self) -> None:
        """Show the fleet and start following the monitor; SIGTERM quits as q does."""
        self.push_screen(FleetScreen())
        if self.stop_when is not None:
            self.set_interval(0.25, self._stopped, name="stop-when")
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no loop
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.exit)
        self.run_worker(self._follow(), name="follow", group="follow", exclusive=True)

    async def _follow(self) -> None:
        while True:
            await self.poll()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await self._wake.wait()
            self._wake.clear()

    def _stopped(self) -> bool:
        """Ask ``stop_when``; on a line, keep it and quit (exit code 1).  Asked before each poll and four times a
        second besides, so a request waiting out ``--timeout`` on whatever holds the port does not hold the UI."""
        if self.stopped_because is None and self.stop_when is not None and (why := self.stop_when()) is not None:
            self.stopped_because = why
            self.exit(return_code=1)
        return self.stopped_because is not None

    def action_refresh(self) -> None:
        """Poll now."""
        self._wake.set()

    def action_help(self) -> None:
        """Show every key."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def _table(self) -> Rows | None:
        """The table in focus (or the screen's first table showing, when the focus is elsewhere)."""
        focused = self.focused
        if isinstance(focused, Rows):
            return focused
        if isinstance(focused, FilterBar):
            return focused.table
        return next((t for t in self.screen.query(Rows) if t.display and t.is_on_screen), None)

    def action_filter(self) -> None:
        """Open the filter line under the table in focus."""
        table = self._table()
        if table is None:
            self.notify("no table here to filter", timeout=3)
            return
        for bar in self.screen.query(FilterBar):
            bar.remove()
        bar = FilterBar(table)
        self.screen.mount(bar)
        bar.focus()

    def action_sort(self, step: int) -> None:
        """Sort the table in focus by the column ``step`` away."""
        if (table := self._table()) is not None:
            self.notify(table.sort_by(step), timeout=3)

    def action_invert(self) -> None:
        """Turn the sort of the table in focus round."""
        if (table := self._table()) is not None:
            self.notify(table.sort_by(invert=True), timeout=3)

    async def poll(self) -> None:
        """Ask the monitor once; at a new generation fetch the rest; tell the screens."""
        if self._stopped():
            return
        now = self.clock()
        try:
            fleet = await self.source.get("/api/v1/fleet")
        except SourceError as exc:
            self._last_error, self._refused = str(exc), None
        except BadAnswerError as exc:
            self._last_error, self._refused = None, str(exc)
        else:
            self._last_error, self._refused, self._last_ok_s = None, None, now
            if fleet.get("generation") != self.view.generation or self._generation_since_s is None:
                self._generation_since_s = now
                self.view = await self._fetch(fleet)
            else:
                self.view = replace(self.view, fleet=fleet)
        self.health = health(self.view, now_s=now, last_ok_s=self._last_ok_s, last_error=self._last_error,
                             refused=self._refused, generation_since_s=self._generation_since_s,
                             behind_after_s=self.behind_after_s, stalled_after_s=self.stalled_after_s)
        self.polls += 1
        # A poll that was waiting on the monitor when the application began to shut down finds its screens
        # popped: ``self.screen`` then raises ScreenStackError (seen once in the unit tier, 2026-12-06), so the
        # top of the stack is read from a snapshot of it, and an empty stack draws nothing.
        stack = self.screen_stack
        screen = stack[-1] if stack else None
        if isinstance(screen, (FleetScreen, DrillScreen)) and screen.ready:
            # While the application shuts down a screen loses its widgets before it stops being current.
            with contextlib.suppress(NoMatches):
                screen.follow(self.view, self.health)

    async def _fetch(self, fleet: Document) -> View:
        """Fetch the rest of the fleet screen; what fails keeps its last good value, and says why (``errors``)
        and, when nothing answered or the answer was refused, on the banner (``trouble``)."""
        names = list(TARGETS)
        answers = await asyncio.gather(*(self.source.get(TARGETS[name]) for name in names), return_exceptions=True)
        got: dict[str, Any] = {}
        errors: dict[str, str] = {}
        trouble: dict[str, Health] = {}
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, (SourceError, BadAnswerError)):
                errors[name] = str(answer)
                if (line := trouble_line(TARGETS[name], answer)) is not None:
                    trouble[name] = line
            elif isinstance(answer, BaseException):
                raise answer
            else:
                got[name] = answer
        old = self.view
        # Advisories that could not be had are not shown (a 503 means no policy runs); refused ones stay.
        refused = "actions" in trouble and trouble["actions"].link == "bad_answer"
        actions = got.get("actions", old.actions if refused else None)
        return View(
            fleet=fleet,
            heat=got["heat"]["ultraservers"] if "heat" in got else old.heat,
            sites=got["sites"]["sites"] if "sites" in got else old.sites,
            worst=got["worst"]["ultraservers"] if "worst" in got else old.worst,
            jobs=got["jobs"]["jobs"] if "jobs" in got else old.jobs,
            jobs_total=got["jobs"]["total"] if "jobs" in got else old.jobs_total,
            events=got["events"]["events"] if "events" in got else old.events,
            actions=actions,
            errors=errors,
            trouble=trouble,
        )

    def open_key(self, key: str) -> None:
        """Open what a row key names: ``us:<id>``, ``job:<id>``, ``site:<id>``, ``node:<name>@<ultraserver>``."""
        kind, _, ident = key.partition(":")
        if kind == "us":
            self.push_screen(UltraServerScreen(ident))
        elif kind == "job":
            self.push_screen(JobScreen(ident))
        elif kind == "site":
            self.push_screen(SiteScreen(ident))
        elif kind == "node":
            _node, _, ultraserver = ident.partition("@")
            if ultraserver not in ("", "None"):
                self.push_screen(UltraServerScreen(f"u{ultraserver}" if ultraserver.isdigit() else ultraserver))
