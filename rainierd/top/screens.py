"""The drill-down screens of ``rainierd top``: site -> UltraServer -> node ->
chip, NeuronLink or EFA port, and job -> its UltraServers and culprits.

Each screen shows one read-API document (``target``) and fetches it again
whenever the monitor's generation moves on, so a drill-down is as live as the
fleet screen.  Enter on a row opens the next level; Escape goes back.  A
screen whose document cannot be had says why in its title and keeps what it
showed last.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from rainierd.top.answers import BadAnswerError, path_of
from rainierd.top.entity import card, entity_in, node_job, node_key
from rainierd.top.model import Document, Health, View, cause_text, first_cause, flops, percent, state_word
from rainierd.top.names import Namer, index_of, within
from rainierd.top.source import SourceError
from rainierd.top.tables import Rows, fill

if TYPE_CHECKING:
    from rainierd.top.app import TopApp

# The UltraServer document's lists, and the entity kind each holds (as the metrics and events name them).
KINDS: Final = {"nodes": "node", "chips": "chip", "links": "neuronlink", "ports": "efa"}
LISTS: Final = {kind: key for key, kind in KINDS.items()}
_KIND_LABELS: Final = {"node": "node", "chip": "chip", "neuronlink": "NeuronLink", "efa": "EFA port"}
_BANNER_STYLE: Final = {"live": "bold white on #2e933c", "behind": "bold black on #f2c14e",
                        "stalled": "bold white on #f46036", "unreachable": "bold white on #d7263d",
                        "bad_answer": "bold white on #8e2c9c", "connecting": "bold black on #aaaaaa"}


class Banner(Static):
    """One line: where the monitor is and how far to trust the screen (``model.health``).  Docked at the top of
    every screen with the breadcrumb under it, so no table's length scrolls them away."""

    DEFAULT_CSS = "Banner { height: 1; }"

    def show(self, where: str, health: Health, view: View, crumbs: str = "") -> None:
        """Draw the banner (and ``crumbs`` after it: only where a screen has no breadcrumb line of its own)."""
        text = Text(no_wrap=True, overflow="ellipsis")
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


def ultraserver_row(row: Document, *, site: bool = True) -> tuple[str, Sequence[Any]]:
    """A row of ``/api/v1/ultraservers`` as a table row keyed ``us:<id>``: id, site (unless not ``site``),
    effective share, lost, its first cause, unhealthy entities (the fleet screen's worst list and a job's
    UltraServers)."""
    where = (row.get("site"),) if site else ()
    return (f"us:{row['id']}", (row["id"], *where, percent(row.get("effective_share")),
                                flops(row.get("lost_flops")), first_cause(row.get("lost_by_cause")),
                                row.get("unhealthy_total", 0)))


def _state(entity: Document, word: str | None = None) -> Text:
    state = str(entity.get("state", "?"))
    return Text(word or state, "bold red" if state != "healthy" else "yellow" if word not in (None, state) else "green")


def _reasons(entity: Document) -> str:
    return ",".join(entity.get("reasons") or ()) or "-"


def _number(value: Any, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _near(ident: str, node: str, ultraserver: str) -> str:
    """``ident`` as short as it reads unambiguously on ``node``'s screen: within the node, else the UltraServer."""
    return within(ident, node) if ident.startswith(node + "/") else within(ident, ultraserver)


def _worst_first(entities: Sequence[Document]) -> list[Document]:
    return sorted(entities, key=lambda e: (e.get("state") == "healthy", e.get("onset_tick") or 0))


class DrillScreen(Screen[None]):
    """A screen of one document, fetched again at each new generation.

    Its first two lines, the banner and the breadcrumb (where this screen sits, from the fleet), are docked:
    the screen never scrolls them away, whatever the length of its tables."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("backspace", "app.pop_screen", "Back", show=False),
    ]
    DEFAULT_CSS = """
    DrillScreen { overflow: hidden; }
    DrillScreen #head { dock: top; height: 2; }
    DrillScreen #crumbs { height: 1; }
    DrillScreen #body { height: 1fr; }
    """

    def __init__(self, target: str, crumb: str) -> None:
        super().__init__()
        self.target = target
        self.crumb = crumb  # this screen's step of the breadcrumb
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

    @property
    def crumbs(self) -> str:
        """The breadcrumb: every screen from the fleet to this one."""
        steps = ["fleet", *(s.crumb for s in self.app.screen_stack if isinstance(s, DrillScreen))]
        if self not in self.app.screen_stack:
            steps.append(self.crumb)
        return " > ".join(steps)

    def compose(self) -> ComposeResult:
        """The banner and the breadcrumb (docked), the title, the screen's own widgets, the keys."""
        with Vertical(id="head"):
            yield Banner(id="banner")
            yield Static(id="crumbs", markup=False)
        with Vertical(id="body"):
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
        self.query_one(Banner).show(self.top.source.where, health, view)
        self.query_one("#crumbs", Static).update(Text(self.crumbs, "bold", no_wrap=True, overflow="ellipsis"))

    async def load(self) -> None:
        """Fetch the document and show it (or say why not, keeping what is shown)."""
        try:
            document = await self.top.source.get(self.target)
        except (SourceError, BadAnswerError) as exc:
            self.error = str(exc)
            self.trouble = trouble_line(self.target, exc)
            self.query_one("#title", Static).update(Text(f"{self.crumb}: {exc}", "bold red"))
            self.loaded_generation = None  # try again at the next poll
            self._banner(self.top.view, self.top.health)
            return
        if self.trouble is not None:  # the banner said this document's trouble: it is over
            self.trouble = None
        self.document, self.error = document, None
        await self.shown(document)
        self._banner(self.top.view, self.top.health)
        self.loads += 1

    async def shown(self, document: Document) -> None:
        """Draw ``document`` (a screen that needs more documents than its own fetches them here)."""
        self.show(document)

    def show(self, document: Document) -> None:
        """Draw ``document``."""
        raise NotImplementedError


class SiteScreen(DrillScreen):
    """One site's UltraServers, the lowest effective share first (at most 500: the worst of it)."""

    FIELDS: Final = ("site,effective_flops,effective_share,lost_flops,lost_by_cause,unhealthy_total,chips_present,"
                     "chips_reporting,state")

    def __init__(self, site: str) -> None:
        query = urllib.parse.urlencode({"site": site, "sort": "effective_share", "limit": 500,
                                        "fields": self.FIELDS})
        super().__init__(f"/api/v1/ultraservers?{query}", f"site {site}")
        self.site = site

    def body(self) -> Iterator[Any]:
        table = Rows(id="ultraservers")
        table.add_columns("UltraServer", "eff. share", "lost", "by", "bad", "chips", "state")
        yield table

    def show(self, document: Document) -> None:
        rows = document["ultraservers"]
        self.query_one("#title", Static).update(Text(
            f"Site {self.site}: {document['total']:,} UltraServers, the {len(rows):,} lowest effective share first "
            "(Enter opens one)"))
        fill(self.query_one("#ultraservers", DataTable), (
            (f"us:{r['id']}", (r["id"], percent(r.get("effective_share")), flops(r.get("lost_flops")),
                               first_cause(r.get("lost_by_cause")), r.get("unhealthy_total", 0),
                               f"{r.get('chips_reporting', 0)}/{r.get('chips_present', 0)}",
                               state_word(r.get("state"), lost=r.get("lost_flops"), effective=r.get("effective_flops"),
                                          unhealthy=r.get("unhealthy_total", 0))))
            for r in rows))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the UltraServer."""
        self.top.open_key(str(event.row_key.value))


class UltraServerScreen(DrillScreen):
    """One UltraServer: its figures, its nodes, and every unhealthy entity in it."""

    def __init__(self, ultraserver: str) -> None:
        super().__init__(f"/api/v1/ultraservers/{urllib.parse.quote(ultraserver, safe='')}", ultraserver)
        self.ultraserver = ultraserver

    def body(self) -> Iterator[Any]:
        yield Static("Unhealthy here (Enter: its detail)", classes="label")
        unhealthy = Rows(id="unhealthy")
        unhealthy.add_columns("entity", "id", "state", "reasons", "since tick")
        yield unhealthy
        yield Static("Nodes (Enter: its chips, NeuronLinks and EFA ports)", classes="label")
        nodes = Rows(id="nodes")
        nodes.add_columns("node", "state", "job", "bad c/l/p", "in/out C", "power W", "hostname")
        yield nodes

    def show(self, document: Document) -> None:
        us = document["ultraserver"]
        namer = Namer.of(document)
        self.crumb = namer.prefix
        title = Text()
        word = state_word(us.get("state"), lost=us.get("lost_flops"), effective=us.get("effective_flops"))
        title.append(f"UltraServer {namer.prefix}", "bold")
        title.append(f"{' (' + us['name'] + ')' if us.get('name') else ''}: ")
        title.append(word, "bold red" if word != "healthy" else "green")
        title.append(f"; cooling {us['state']}{' ' + _reasons(us) if us.get('reasons') else ''}\n")
        title.append(f"effective {flops(us.get('effective_flops'))} of {flops(us.get('peak_flops'))} peak "
                     f"({percent(us.get('effective_share'))}); lost {flops(us.get('lost_flops'))}: "
                     f"{cause_text(us.get('lost_by_cause'))}; chips reporting "
                     f"{us.get('chips_reporting')}/{us.get('chips_present')}")
        self.query_one("#title", Static).update(title)
        bad = [(kind, e) for key, kind in KINDS.items() for e in document[key] if e.get("state") != "healthy"]
        bad.sort(key=lambda pair: pair[1].get("onset_tick") or 0)
        fill(self.query_one("#unhealthy", DataTable), (
            (f"{kind}:{(ident := namer.of_entity(kind, e))}",
             (_KIND_LABELS.get(kind, kind), within(ident, namer.prefix), _state(e), _reasons(e), e.get("onset_tick")))
            for kind, e in bad))
        per_node: dict[int | None, list[int]] = {}
        for key, index in (("chips", 0), ("links", 1), ("ports", 2)):
            for e in document[key]:
                if e.get("state") != "healthy":
                    per_node.setdefault(index_of({"id": e.get("node")}), [0, 0, 0])[index] += 1
        fill(self.query_one("#nodes", DataTable), (
            (f"node:{(ident := namer.of_entity('node', n))}",
             (within(ident, namer.prefix),
              _state(n, state_word(n.get("state"), unhealthy=sum(per_node.get(index_of(n), [0, 0, 0])))),
              n.get("job") or "-", "/".join(map(str, per_node.get(index_of(n), [0, 0, 0]))),
              f"{_number(n.get('inlet_c'), '.0f')}/{_number(n.get('outlet_c'), '.0f')}",
              _number(n.get("power_w"), ".0f"), n.get("hostname") or "-"))
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

    DEFAULT_CSS = """
    NodeScreen #kinds, NodeScreen #kinds ContentSwitcher, NodeScreen #kinds TabPane { height: 1fr; }
    """

    def __init__(self, ultraserver: str, node: str) -> None:
        super().__init__(f"/api/v1/ultraservers/{urllib.parse.quote(ultraserver, safe='')}",
                         node.rsplit("/", 1)[-1])
        self.ultraserver, self.node = ultraserver, node

    def body(self) -> Iterator[Any]:
        with TabbedContent(id="kinds"):
            with TabPane("Chips", id="tab-chips"):
                chips = Rows(id="chips")
                chips.add_columns("chip", "state", "reasons", "FP8", "util", "clock", "temp C")
                yield chips
            with TabPane("NeuronLinks", id="tab-links"):
                links = Rows(id="links")
                links.add_columns("link", "state", "reasons", "GB/s", "lanes", "lat. us", "to", "CRC")
                yield links
            with TabPane("EFA ports", id="tab-ports"):
                ports = Rows(id="ports")
                ports.add_columns("port", "state", "reasons", "retransmits", "lat. us", "chip")
                yield ports

    def show(self, document: Document) -> None:
        namer = Namer.of(document)
        node = next((n for n in document["nodes"] if namer.of_entity("node", n) == self.node
                     or str(n.get("id")) == self.node), None)
        if node is None:
            self.query_one("#title", Static).update(Text(f"node {self.node} is not in {self.ultraserver}", "red"))
            return
        here = namer.of_entity("node", node)
        self.crumb = within(here, namer.prefix)
        mine = {key: _worst_first([e for e in document[key] if index_of({"id": e.get("node")}) == index_of(node)])
                for key in ("chips", "links", "ports")}
        counts = {key: sum(e.get("state") != "healthy" for e in rows) for key, rows in mine.items()}
        title = Text()
        title.append(f"Node {here}", "bold")
        word = state_word(node.get("state"), unhealthy=sum(counts.values()))
        title.append(f" ({node.get('hostname') or 'no hostname'}): ")
        title.append(word, "bold red" if word != "healthy" else "green")
        title.append(f"; job {node.get('job') or '-'}\nunhealthy: {counts['chips']} chips, {counts['links']} "
                     f"NeuronLinks, {counts['ports']} EFA ports; air {_number(node.get('inlet_c'))}/"
                     f"{_number(node.get('outlet_c'))} C, fan {_number(node.get('fan_rpm'), '.0f')} rpm")
        self.query_one("#title", Static).update(title)
        fill(self.query_one("#chips", DataTable), (
            (f"chip:{(ident := namer.of_entity('chip', c))}",
             (within(ident, here), _state(c), _reasons(c), flops(c.get("effective_flops")), percent(c.get("util")),
              _number(c.get("clock_ratio"), ".2f"), _number(c.get("temp_c"))))
            for c in mine["chips"]))
        fill(self.query_one("#links", DataTable), (
            (f"neuronlink:{(ident := namer.of_entity('neuronlink', e))}",
             (within(ident, here), _state(e), _reasons(e),
              _number(None if e.get("bw_bytes_s") is None else e["bw_bytes_s"] / 1e9, ".1f"),
              _number(e.get("lanes_up"), ".0f"), _number(e.get("latency_us"), ".2f"),
              _near(namer.chip(e.get("chip_b")), here, namer.prefix), _number(e.get("crc_errors_total"), ".0f")))
            for e in mine["links"]))
        fill(self.query_one("#ports", DataTable), (
            (f"efa:{(ident := namer.of_entity('efa', p))}",
             (within(ident, here), _state(p), _reasons(p), _number(p.get("retrans_pkts_total"), ".0f"),
              _number(p.get("latency_us"), ".1f"), within(namer.chip(p.get("chip")), here)))
            for p in mine["ports"]))
        # Open on the tab of the first unhealthy kind, once.
        if self.loads == 0:
            first = next((key for key in ("links", "ports", "chips") if counts[key]), "chips")
            self.query_one("#kinds", TabbedContent).active = f"tab-{first}"
            self.query_one(f"#{first}", DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Open the entity."""
        kind, _, ident = str(event.row_key.value).partition(":")
        self.app.push_screen(EntityScreen(self.ultraserver, kind, ident))


class EntityScreen(DrillScreen):
    """One chip, NeuronLink, EFA port or node: its figures against nominal and peers, what it costs each job,
    its node's advisory and the runbook section for its state (``entity.card``)."""

    def __init__(self, ultraserver: str, kind: str, ident: str) -> None:
        super().__init__(f"/api/v1/ultraservers/{urllib.parse.quote(ultraserver, safe='')}", ident.rsplit("/n", 1)[-1]
                         if "/" in ident else f"{kind} {ident}")
        self.ultraserver, self.kind, self.ident = ultraserver, kind, ident
        self.jobs: list[Document] = []
        self.actions: Document | None = None
        self.actions_error: str | None = None

    def body(self) -> Iterator[Any]:
        with VerticalScroll(id="scroll"):
            yield Static(id="card")

    def entity(self, document: Document) -> Document | None:
        """This screen's entity in an UltraServer document."""
        return entity_in(document, self.kind, self.ident)

    async def shown(self, document: Document) -> None:
        """Fetch what the entity costs its node's job and the node's advisory, then draw."""
        entity = self.entity(document)
        if entity is not None:
            job = node_job(document, self.kind, entity)
            node = node_key(document, self.kind, entity)
            targets = ([f"/api/v1/jobs/{urllib.parse.quote(job, safe='')}"] if job else []) + (
                [f"/api/v1/actions?{urllib.parse.urlencode({'node': node})}"] if node else [])
            answers = await asyncio.gather(*(self.top.source.get(t) for t in targets), return_exceptions=True)
            self.jobs = [a for t, a in zip(targets, answers, strict=True)
                         if t.startswith("/api/v1/jobs/") and not isinstance(a, BaseException)]
            for target, answer in zip(targets, answers, strict=True):
                if not target.startswith("/api/v1/actions"):
                    continue
                if isinstance(answer, (SourceError, BadAnswerError)):
                    self.actions, self.actions_error = None, str(answer)
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    self.actions, self.actions_error = answer, None
            if not node:
                self.actions, self.actions_error = None, "its node is not in the document"
        self.show(document)

    def show(self, document: Document) -> None:
        entity = self.entity(document)
        if entity is None:
            self.query_one("#title", Static).update(Text(f"{self.kind} {self.ident} is not in {self.ultraserver}",
                                                         "red"))
            return
        namer = Namer.of(document)
        self.crumb = within(namer.of_entity(self.kind, entity), namer.prefix)
        title = self.query_one("#title", Static)
        title.display = False
        fleet = self.top.view.fleet or {}
        self.query_one("#card", Static).update(card(
            self.kind, entity, document, jobs=self.jobs, fleet_culprits=fleet.get("culprits") or (),
            events=self.top.view.events,
            actions=self.actions, actions_error=self.actions_error))

    def text(self) -> str:
        """The card as plain text (tests read it)."""
        return str(self.query_one("#card", Static).content)


class JobScreen(DrillScreen):
    """One job: what it delivers and loses, the entities costing it most, the UltraServers it holds."""

    def __init__(self, job: str) -> None:
        super().__init__(f"/api/v1/jobs/{urllib.parse.quote(job, safe='')}", f"job {job}")
        self.job = job

    def body(self) -> Iterator[Any]:
        yield Static("Culprits, costliest first (Enter: the entity)", classes="label")
        culprits = Rows(id="culprits")
        culprits.add_columns("entity", "id", "costs the job", "UltraServer")
        yield culprits
        yield Static("Its UltraServers (Enter: open)", classes="label")
        held = Rows(id="held")
        held.add_columns("UltraServer", "site", "eff. share", "lost", "by", "bad")
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
             (_KIND_LABELS.get(str(c["entity"]), c["entity"]), c["id"], flops(c.get("flops")),
              c.get("ultraserver") or "-"))
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
            self.app.push_screen(NodeScreen(ultraserver, ident if "n" in ident else f"n{ident}"))
        elif kind in LISTS:
            self.app.push_screen(EntityScreen(ultraserver, kind, ident))
        else:
            self.top.open_key(f"us:{ultraserver}")
