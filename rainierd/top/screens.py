"""The drill-down screens of ``rainierd top``: site -> UltraServer -> node ->
chip, NeuronLink or EFA port, and job -> its UltraServers and culprits.

Each screen shows one read-API document (``target``) and fetches it again
whenever the monitor's generation moves on, so a drill-down is as live as the
fleet screen.  Enter on a row opens the next level; Escape goes back.  A
screen whose document cannot be had says why in its title and keeps what it
showed last.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane
from textual.widgets.data_table import RowDoesNotExist

from rainierd.top.answers import BadAnswerError, path_of
from rainierd.top.model import Document, Health, View, cause_text, flops, percent
from rainierd.top.source import SourceError

if TYPE_CHECKING:
    from rainierd.top.app import TopApp

# The UltraServer document's lists, and the entity kind each holds (as the metrics and events name them).
KINDS: Final = {"nodes": "node", "chips": "chip", "links": "neuronlink", "ports": "efa"}
LISTS: Final = {kind: key for key, kind in KINDS.items()}
_BANNER_STYLE: Final = {"live": "bold white on #2e933c", "behind": "bold black on #f2c14e",
                        "stalled": "bold white on #f46036", "unreachable": "bold white on #d7263d",
                        "bad_answer": "bold white on #8e2c9c", "connecting": "bold black on #aaaaaa"}


class Banner(Static):
    """One line: where the monitor is and how far to trust the screen (``model.health``)."""

    DEFAULT_CSS = "Banner { height: 1; }"

    def show(self, where: str, health: Health, view: View, crumbs: str = "") -> None:
        """Draw the banner."""
        text = Text()
        text.append(f" {health.link.upper() if health.link == 'live' else health.text} ",
                    _BANNER_STYLE[health.link])
        fleet = view.fleet
        if fleet is not None:
            text.append(f"  {where}  generation {fleet['generation']}  tick {fleet['tick']}")
        else:
            text.append(f"  {where}")
        if crumbs:
            text.append(f"   {crumbs}", "bold")
        self.update(text)


def trouble_line(target: str, exc: SourceError | BadAnswerError) -> Health | None:
    """Return the banner line a failed fetch of ``target`` earns: BAD ANSWER for an answer refused, UNREACHABLE
    when nothing answered; None for an HTTP error (the monitor answered: a 404, a 503), which the screen's own
    text says."""
    if isinstance(exc, BadAnswerError):
        return Health("bad_answer", str(exc))
    if exc.status is None:
        return Health("unreachable", f"UNREACHABLE: {path_of(target)}: {exc}")
    return None


def fill(table: DataTable[Any], rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
    """Replace ``table``'s rows by ``rows`` (key, cells), keeping the cursor on the same key where it is still
    there.

    A text cell is drawn as the monitor spelled it: a DataTable reads a plain string as Rich markup, so a job
    named ``lab/[/x]`` would end the application and ``[link=…]`` would draw a link; escaped, it is text.
    (Escaped strings, not ``Text`` cells: those keep the table's column widths stale for a while under load.)
    A key seen twice (a monitor listing one UltraServer twice) is shown once: a table's row keys are unique.
    """
    held = None
    if table.row_count and 0 <= table.cursor_row < table.row_count:
        held = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    table.clear()
    shown: set[str] = set()
    for key, cells in rows:
        if key in shown:
            continue
        shown.add(key)
        table.add_row(*(escape(cell) if isinstance(cell, str) else cell for cell in cells), key=key)
    if held is not None:
        with contextlib.suppress(RowDoesNotExist):  # the row is gone: the cursor stays where clear() put it
            table.move_cursor(row=table.get_row_index(held), animate=False)


def ultraserver_row(row: Document) -> tuple[str, Sequence[Any]]:
    """A row of ``/api/v1/ultraservers`` as a table row keyed ``us:<id>``: id, site, effective share, lost, its
    first cause, unhealthy entities (the fleet screen's worst list and a job's UltraServers)."""
    return (f"us:{row['id']}", (row["id"], row.get("site"), percent(row.get("effective_share")),
                                flops(row.get("lost_flops")), cause_text(row.get("lost_by_cause"), top=1),
                                row.get("unhealthy_total", 0)))


def _state(entity: Document) -> Text:
    state = str(entity.get("state", "?"))
    return Text(state, "bold red" if state != "healthy" else "green")


def _reasons(entity: Document) -> str:
    return ",".join(entity.get("reasons") or ()) or "-"


def _number(value: Any, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _worst_first(entities: Sequence[Document]) -> list[Document]:
    return sorted(entities, key=lambda e: (e.get("state") == "healthy", e.get("onset_tick") or 0))


class DrillScreen(Screen[None]):
    """A screen of one document, fetched again at each new generation."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("backspace", "app.pop_screen", "Back", show=False),
    ]

    def __init__(self, target: str, crumbs: str) -> None:
        super().__init__()
        self.target = target
        self.crumbs = crumbs
        self.document: Document | None = None
        self.error: str | None = None
        self.trouble: Health | None = None  # the banner line its document's latest fetch earned, if any
        self.loaded_generation: int | None = None
        self.loads = 0  # documents shown so far (tests wait on it)
        self.ready = False  # mounted: its widgets can be drawn on

    @property
    def top(self) -> TopApp:
        """The application (typed)."""
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        """The banner, the title, the screen's own widgets, the keys."""
        yield Banner(id="banner")
        yield Static("loading...", id="title")
        yield from self.body()
        yield Footer()

    def body(self) -> Iterator[Any]:
        """The screen's own widgets."""
        yield from ()

    def on_mount(self) -> None:
        """Show what the application has and fetch the document."""
        self.ready = True
        self.follow(self.top.view, self.top.health)

    def on_screen_resume(self) -> None:
        """Back on top: catch up (a screen resumes once before it is mounted, too)."""
        if self.ready:
            self.follow(self.top.view, self.top.health)

    def follow(self, view: View, health: Health) -> None:
        """The application polled: redraw the banner, and fetch the document again if the generation moved."""
        self._banner(view, health)
        if view.generation is not None and view.generation != self.loaded_generation:
            self.loaded_generation = view.generation
            self.run_worker(self.load(), group="load", exclusive=True)

    def _banner(self, view: View, health: Health) -> None:
        # The fleet's own trouble first; then this screen's document's (no answer, or an answer refused).
        if self.trouble is not None and health.link in ("live", "behind", "stalled"):
            health = self.trouble
        self.query_one(Banner).show(self.top.source.where, health, view, self.crumbs)

    async def load(self) -> None:
        """Fetch the document and show it (or say why not, keeping what is shown)."""
        try:
            document = await self.top.source.get(self.target)
        except (SourceError, BadAnswerError) as exc:
            self.error = str(exc)
            self.trouble = trouble_line(self.target, exc)
            self.query_one("#title", Static).update(Text(f"{self.crumbs}: {exc}", "bold red"))
            self.loaded_generation = None  # try again at the next poll
            self._banner(self.top.view, self.top.health)
            return
        if self.trouble is not None:  # the banner said this document's trouble: it is over
            self.trouble = None
            self._banner(self.top.view, self.top.health)
        self.document, self.error = document, None
        self.show(document)
        self.loads += 1

    def show(self, document: Document) -> None:
        """Draw ``document``."""
        raise NotImplementedError


class SiteScreen(DrillScreen):
    """One site's UltraServers, the lowest effective share first (at most 500: the worst of it)."""

    FIELDS: Final = "site,effective_share,lost_flops,lost_by_cause,unhealthy_total,chips_present,chips_reporting,state"

    def __init__(self, site: str) -> None:
        query = urllib.parse.urlencode({"site": site, "sort": "effective_share", "limit": 500,
                                        "fields": self.FIELDS})
        super().__init__(f"/api/v1/ultraservers?{query}", f"site {site}")
        self.site = site

    def body(self) -> Iterator[Any]:
        table: DataTable[Any] = DataTable(id="ultraservers", cursor_type="row")
        table.add_columns("UltraServer", "effective share", "lost", "by", "unhealthy", "chips reporting", "state")
        yield table

    def show(self, document: Document) -> None:
        rows = document["ultraservers"]
        self.query_one("#title", Static).update(Text(
            f"Site {self.site}: {document['total']:,} UltraServers, the {len(rows):,} lowest effective share first "
            "(Enter opens one)"))
        fill(self.query_one("#ultraservers", DataTable), (
            (f"us:{r['id']}", (r["id"], percent(r.get("effective_share")), flops(r.get("lost_flops")),
                               cause_text(r.get("lost_by_cause"), top=1), r.get("unhealthy_total", 0),
                               f"{r.get('chips_reporting', 0)}/{r.get('chips_present', 0)}", r.get("state", "-")))
            for r in rows))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the UltraServer."""
        self.top.open_key(str(event.row_key.value))


class UltraServerScreen(DrillScreen):
    """One UltraServer: its figures, its nodes, and every unhealthy entity in it."""

    def __init__(self, ultraserver: str) -> None:
        super().__init__(f"/api/v1/ultraservers/{urllib.parse.quote(ultraserver, safe='')}",
                         f"UltraServer {ultraserver}")
        self.ultraserver = ultraserver

    def body(self) -> Iterator[Any]:
        yield Static("Unhealthy here (Enter: its detail)", classes="label")
        unhealthy: DataTable[Any] = DataTable(id="unhealthy", cursor_type="row")
        unhealthy.add_columns("entity", "id", "node", "state", "reasons", "since tick")
        yield unhealthy
        yield Static("Nodes (Enter: its chips, NeuronLinks and EFA ports)", classes="label")
        nodes: DataTable[Any] = DataTable(id="nodes", cursor_type="row")
        nodes.add_columns("node", "hostname", "state", "reasons", "job", "unhealthy chips/links/ports",
                          "inlet C", "outlet C", "power W")
        yield nodes

    def show(self, document: Document) -> None:
        us = document["ultraserver"]
        title = Text()
        title.append(f"UltraServer {us['id']}", "bold")
        title.append(f" (site {us['site']}{', ' + us['name'] if us.get('name') else ''}): {us['state']}"
                     f"{' ' + _reasons(us) if us.get('reasons') else ''}\n")
        title.append(f"effective {flops(us.get('effective_flops'))} of {flops(us.get('peak_flops'))} peak "
                     f"({percent(us.get('effective_share'))}); lost {flops(us.get('lost_flops'))}: "
                     f"{cause_text(us.get('lost_by_cause'))}; chips reporting "
                     f"{us.get('chips_reporting')}/{us.get('chips_present')}")
        self.query_one("#title", Static).update(title)
        bad = [(kind, e) for key, kind in KINDS.items() for e in document[key] if e.get("state") != "healthy"]
        bad.sort(key=lambda pair: pair[1].get("onset_tick") or 0)
        fill(self.query_one("#unhealthy", DataTable), (
            (f"{kind}:{e['id']}", (kind, e["id"], e.get("node", e["id"] if kind == "node" else "-"), _state(e),
                                   _reasons(e), e.get("onset_tick")))
            for kind, e in bad))
        per_node: dict[str, list[int]] = {}
        for key, index in (("chips", 0), ("links", 1), ("ports", 2)):
            for e in document[key]:
                if e.get("state") != "healthy":
                    per_node.setdefault(str(e.get("node")), [0, 0, 0])[index] += 1
        fill(self.query_one("#nodes", DataTable), (
            (f"node:{n['id']}", (n["id"], n.get("hostname") or "-", _state(n), _reasons(n), n.get("job") or "-",
                                 "/".join(map(str, per_node.get(n["id"], [0, 0, 0]))), _number(n.get("inlet_c")),
                                 _number(n.get("outlet_c")), _number(n.get("power_w"), ".0f")))
            for n in document["nodes"]))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the node or the entity."""
        kind, _, ident = str(event.row_key.value).partition(":")
        if kind == "node":
            self.app.push_screen(NodeScreen(self.ultraserver, ident))
        else:
            self.app.push_screen(EntityScreen(self.ultraserver, kind, ident))


class NodeScreen(DrillScreen):
    """One node of an UltraServer: its chips, NeuronLinks and EFA ports, unhealthy ones first."""

    def __init__(self, ultraserver: str, node: str) -> None:
        super().__init__(f"/api/v1/ultraservers/{urllib.parse.quote(ultraserver, safe='')}",
                         f"UltraServer {ultraserver} > node {node}")
        self.ultraserver, self.node = ultraserver, node

    def body(self) -> Iterator[Any]:
        with TabbedContent(id="kinds"):
            with TabPane("Chips", id="tab-chips"):
                chips: DataTable[Any] = DataTable(id="chips", cursor_type="row")
                chips.add_columns("chip", "state", "reasons", "effective", "util", "clock", "temp C", "power W")
                yield chips
            with TabPane("NeuronLinks", id="tab-links"):
                links: DataTable[Any] = DataTable(id="links", cursor_type="row")
                links.add_columns("link", "kind", "chips", "state", "reasons", "GB/s", "lanes up", "latency us",
                                  "CRC errors")
                yield links
            with TabPane("EFA ports", id="tab-ports"):
                ports: DataTable[Any] = DataTable(id="ports", cursor_type="row")
                ports.add_columns("port", "chip", "state", "reasons", "retransmits", "latency us")
                yield ports

    def show(self, document: Document) -> None:
        node = next((n for n in document["nodes"] if n["id"] == self.node), None)
        if node is None:
            self.query_one("#title", Static).update(Text(f"node {self.node} is not in {self.ultraserver}", "red"))
            return
        mine = {key: _worst_first([e for e in document[key] if e.get("node") == self.node])
                for key in ("chips", "links", "ports")}
        counts = {key: sum(e.get("state") != "healthy" for e in rows) for key, rows in mine.items()}
        title = Text()
        title.append(f"Node {node['id']}", "bold")
        title.append(f" ({node.get('hostname') or 'no hostname'}, {node.get('instance_id') or 'no instance id'}) "
                     f"of UltraServer {self.ultraserver}: {node.get('state')} {_reasons(node)}; job "
                     f"{node.get('job') or '-'}\nunhealthy: {counts['chips']} chips, {counts['links']} NeuronLinks, "
                     f"{counts['ports']} EFA ports; inlet {_number(node.get('inlet_c'))} C, outlet "
                     f"{_number(node.get('outlet_c'))} C, fan {_number(node.get('fan_rpm'), '.0f')} rpm")
        self.query_one("#title", Static).update(title)
        fill(self.query_one("#chips", DataTable), (
            (f"chip:{c['id']}", (c["id"], _state(c), _reasons(c), flops(c.get("effective_flops")),
                                 percent(c.get("util")), _number(c.get("clock_ratio"), ".2f"),
                                 _number(c.get("temp_c")), _number(c.get("power_w"), ".0f")))
            for c in mine["chips"]))
        fill(self.query_one("#links", DataTable), (
            (f"neuronlink:{e['id']}", (e["id"], e.get("kind"), f"{e.get('chip_a')}-{e.get('chip_b')}", _state(e),
                                       _reasons(e), _number(None if e.get("bw_bytes_s") is None
                                                            else e["bw_bytes_s"] / 1e9, ".1f"),
                                       _number(e.get("lanes_up"), ".0f"), _number(e.get("latency_us"), ".2f"),
                                       _number(e.get("crc_errors_total"), ".0f")))
            for e in mine["links"]))
        fill(self.query_one("#ports", DataTable), (
            (f"efa:{p['id']}", (p["id"], p.get("chip"), _state(p), _reasons(p),
                                _number(p.get("retrans_pkts_total"), ".0f"), _number(p.get("latency_us"), ".1f")))
            for p in mine["ports"]))
        # Open on the tab of the first unhealthy kind, once.
        if self.loads == 0:
            first = next((key for key in ("links", "ports", "chips") if counts[key]), "chips")
            self.query_one("#kinds", TabbedContent).active = f"tab-{first}"

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the entity."""
        kind, _, ident = str(event.row_key.value).partition(":")
        self.app.push_screen(EntityScreen(self.ultraserver, kind, ident))


class EntityScreen(DrillScreen):
    """One chip, NeuronLink, EFA port or node: every figure the monitor has of it."""

    def __init__(self, ultraserver: str, kind: str, ident: str) -> None:
        super().__init__(f"/api/v1/ultraservers/{urllib.parse.quote(ultraserver, safe='')}",
                         f"UltraServer {ultraserver} > {kind} {ident}")
        self.ultraserver, self.kind, self.ident = ultraserver, kind, ident

    def body(self) -> Iterator[Any]:
        table: DataTable[Any] = DataTable(id="fields", cursor_type="row")
        table.add_columns("field", "value")
        yield table

    def entity(self, document: Document) -> Document | None:
        """This screen's entity in an UltraServer document."""
        return next((e for e in document.get(LISTS.get(self.kind, ""), ()) if str(e["id"]) == self.ident), None)

    def show(self, document: Document) -> None:
        entity = self.entity(document)
        if entity is None:
            self.query_one("#title", Static).update(Text(f"{self.kind} {self.ident} is not in {self.ultraserver}",
                                                         "red"))
            return
        title = Text()
        title.append(f"{self.kind} {self.ident}", "bold")
        title.append(" is ")
        title.append_text(_state(entity))
        if entity.get("state") != "healthy":
            title.append(f" ({_reasons(entity)}) since tick {entity.get('onset_tick')}")
        self.query_one("#title", Static).update(title)
        fill(self.query_one("#fields", DataTable), ((name, (name, _value(value))) for name, value in entity.items()))


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


class JobScreen(DrillScreen):
    """One job: what it delivers and loses, the entities costing it most, the UltraServers it holds."""

    def __init__(self, job: str) -> None:
        super().__init__(f"/api/v1/jobs/{urllib.parse.quote(job, safe='')}", f"job {job}")
        self.job = job

    def body(self) -> Iterator[Any]:
        yield Static("Culprits, costliest first (Enter: the entity)", classes="label")
        culprits: DataTable[Any] = DataTable(id="culprits", cursor_type="row")
        culprits.add_columns("entity", "id", "UltraServer", "costs the job")
        yield culprits
        yield Static("Its UltraServers (Enter: open)", classes="label")
        held: DataTable[Any] = DataTable(id="held", cursor_type="row")
        held.add_columns("UltraServer", "site", "effective share", "lost", "by", "unhealthy")
        yield held

    def show(self, document: Document) -> None:
        job = document["job"]
        title = Text()
        title.append(f"Job {job['id']}", "bold")
        title.append(f" ({job.get('owner') or '-'}, {job.get('scheduler') or '-'}): {job.get('phase')}, "
                     f"{job.get('chips'):,} chips on {job.get('ultraservers')} UltraServers\n"
                     f"goodput {percent(job.get('goodput_ratio'))}; effective {flops(job.get('effective_flops'))} of "
                     f"{flops(job.get('peak_flops'))}; lost {flops(job.get('lost_flops'))}: "
                     f"{cause_text(job.get('lost_by_cause'))}")
        self.query_one("#title", Static).update(title)
        fill(self.query_one("#culprits", DataTable), (
            (f"{c['entity']}:{c['id']}@{c.get('ultraserver')}",
             (c["entity"], c["id"], c.get("ultraserver") or "-", flops(c.get("flops"))))
            for c in document.get("culprits", ())))
        fill(self.query_one("#held", DataTable), (ultraserver_row(r) for r in document.get("ultraservers", ())))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the culprit (in its UltraServer) or the UltraServer."""
        key = str(event.row_key.value)
        if key.startswith("us:"):
            self.top.open_key(key)
            return
        what, _, ultraserver = key.partition("@")
        kind, _, ident = what.partition(":")
        if ultraserver in ("", "None"):
            return
        if kind == "node":
            self.app.push_screen(NodeScreen(ultraserver, ident if ident.startswith("n") else f"n{ident}"))
        elif kind in LISTS:
            self.app.push_screen(EntityScreen(ultraserver, kind, ident))
        else:
            self.top.open_key(f"us:{ultraserver}")
