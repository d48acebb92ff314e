"""``rainierd top`` against a broken or hostile monitor (issue 35): a real HTTP server this test starts answers
each request top makes, first with a real monitor's documents (tests/read_api_fixture.py), then, for one
endpoint, with a malformed answer.  Whatever comes, top says so in one banner line (``BAD ANSWER <path>: <why>``,
or ``UNREACHABLE`` when nothing answers within its timeout), keeps the last good figures, never ends with a
traceback, and is live again once the monitor answers well.  Also what the schema allows but once ended top
(a row listed twice, a job named like Rich markup) and what it must tolerate (a newer monitor's fields).

On the code before issue 35, 40 of these 42 cases failed (18 with a traceback, the rest with no word on the
banner); the two that passed are guards: a monitor that never answers anything was already UNREACHABLE, and
the escaping property holds of Rich itself."""

from __future__ import annotations

import argparse
import asyncio
import copy
import gzip
import json
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text
from textual.pilot import Pilot

from harness.timing import within
from rainierd.http.client import remote
from rainierd.top.app import TARGETS, TopApp
from rainierd.top.screens import Banner, JobScreen, UltraServerScreen
from rainierd.top.source import HttpSource
from rainierd.top.tables import literal
from tests.read_api_fixture import monitored
from tests.top_driver import rows, text_of
from tests.unit.top.test_app import CONNECTED

FLEET: Final = "/api/v1/fleet"
HEAT, SITES, WORST, JOBS, EVENTS, ACTIONS = (TARGETS[name] for name in
                                             ("heat", "sites", "worst", "jobs", "events", "actions"))
US: Final = "/api/v1/ultraservers/u1"
JOB: Final = "/api/v1/jobs/lab/pretrain"
SIZE: Final = (160, 48)
HANG: Final = object()  # an answer that never comes
NAN, INF = float("nan"), float("inf")

# The advisories of a monitor whose policy runs (the read-API fixture has none): valid against
# docs/actions.schema.json (the ``answers`` fixture checks).
GOOD_ACTIONS: Final = {
    "schema_version": 1, "t_s": 1.8e9, "dry_run": True, "total": 1,
    "actions": [{"node": "s0/u1/n4", "hostname": None, "index": 4, "site": "s0", "ultraserver": "s0/u1",
                 "action": "watch", "state": "pending", "reason": "watch: s0/u1/n4/chip2/link0 degraded",
                 "protects_flops": 7e15,
                 "causes": [{"entity": "neuronlink", "id": "s0/u1/n4/chip2/link0", "index": 224, "state": "degraded",
                             "reasons": ["lanes"], "since_s": 1.8e9}],
                 "protects": [{"job": "lab/pretrain", "flops": 7e15}], "since_s": 1.8e9, "proposed_s": None,
                 "expired_s": None, "suppressed_by": None, "lemon": False}],
    "brake": {"max_nodes": 50, "max_fraction": 0.02, "window_s": 3600.0, "under_action": 0, "tripped": False,
              "scope": None, "since_s": None},
    "lemons": [],
}


def response(body: bytes, *, status: str = "200 OK", headers: str = "") -> bytes:
    """An HTTP/1.1 response of ``body`` as a monitor would send it (``headers``: more header lines)."""
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}"
            f"Connection: close\r\n\r\n").encode() + body


class Monitor:
    """A hand-made monitor on a real socket: ``answers`` maps each request target (as top sends it, query and
    all) to a JSON value, raw response bytes, or ``HANG`` (the connection is accepted and never answered)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.port = 0
        self._closing = asyncio.Event()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            target = urllib.parse.unquote(head.split(b" ", 2)[1].decode("ascii"))  # a job id's / is %2F
            answer = self.answers.get(target, response(b'{"error":"no such endpoint"}', status="404 Not Found"))
            if answer is HANG:
                await self._closing.wait()
                return
            writer.write(answer if isinstance(answer, bytes) else response(json.dumps(answer).encode()))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # top gave up on it (its timeout)
        finally:
            writer.close()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[Monitor]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._closing.set()  # the hung connections end, so nothing is left to cancel
            server.close()
            await server.wait_closed()


@pytest.fixture(scope="module")
def answers() -> dict[str, Any]:
    """The real monitor's document at every target top reads, the advisories beside them."""
    monitor = monitored()
    api = monitor.api(CONNECTED(monitor))

    async def ask() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for target in (FLEET, HEAT, SITES, WORST, JOBS, EVENTS, US, JOB):
            path, _, query = target.partition("?")
            status, body = await api.answer(path, query)
            assert status.startswith("200"), (target, status)
            out[target] = json.loads(body)
        return out

    out = asyncio.run(ask())
    schema = json.loads((Path(__file__).resolve().parents[3] / "docs" / "actions.schema.json").read_text())
    jsonschema.validate(GOOD_ACTIONS, schema, cls=jsonschema.Draft202012Validator)
    out[ACTIONS] = copy.deepcopy(GOOD_ACTIONS)
    assert out[EVENTS]["events"]
    assert out[JOB]["culprits"]
    return out


def at(answers: dict[str, Any], generation: int) -> dict[str, Any]:
    """``answers`` (copied) with the fleet at ``generation``: top fetches the rest again when it moves."""
    out = copy.deepcopy(answers)
    out[FLEET]["generation"] = generation
    return out


def follow(monitor: Monitor, *, timeout_s: float | None = None, interval_s: float = 0.05) -> TopApp:
    args = argparse.Namespace(url=f"http://127.0.0.1:{monitor.port}", ca_file=None, basic_auth_user=None,
                              basic_auth_password_file=None)
    return TopApp(HttpSource(remote(args), timeout_s=timeout_s or within(5.0)), interval_s=interval_s)


async def until(pilot: Pilot[Any], app: TopApp, condition: Callable[[], bool], what: str) -> None:
    """Let top run until ``condition``; fail at once if top ended (a traceback), or after the harness's bound."""
    deadline = asyncio.get_running_loop().time() + within(10.0)
    while not condition():
        assert app.return_code is None, f"top ended (return code {app.return_code}) waiting for {what}"
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def drawn(cell: str) -> str:
    """What a DataTable draws for a string cell: it reads it as Rich markup."""
    return Text.from_markup(cell).plain


def banner(app: TopApp) -> str:
    """The banner of the screen on top, as drawn."""
    return str(app.screen.query_one(Banner).content)


async def live_at(pilot: Pilot[Any], app: TopApp, generation: int) -> None:
    await until(pilot, app, lambda: app.health.link == "live" and app.view.generation == generation
                and bool(app.view.heat) and bool(app.view.events), f"LIVE at generation {generation}")


def put(where: str, value: Any) -> Callable[[Any], Any]:
    """The good document with the value at dotted path ``where`` (list indexes as numbers) replaced."""
    def change(document: Any) -> Any:
        *parents, last = [int(p) if p.isdigit() else p for p in where.split(".")]
        holder = document
        for step in parents:
            holder = holder[step]
        holder[last] = value
        return document

    return change


def drop(where: str) -> Callable[[Any], Any]:
    """The good document without the field at dotted path ``where``."""
    def change(document: Any) -> Any:
        *parents, last = [int(p) if p.isdigit() else p for p in where.split(".")]
        holder = document
        for step in parents:
            holder = holder[step]
        del holder[last]
        return document

    return change


def raw(body: bytes, **kw: Any) -> Callable[[Any], bytes]:
    """In place of the document, this response."""
    return lambda _document: response(body, **kw)


def deep_fleet(document: Any) -> bytes:
    """The good fleet with an extra field nested 100,000 lists deep (no JSON encoder writes that)."""
    text = json.dumps(document)
    return response(f'{text[:-1]},"x":{"[" * 100_000}{"]" * 100_000}}}'.encode())


# What each case changes in the view, which must stay as the last good answer left it.
KEPT: Final[dict[str, Callable[[TopApp], Any]]] = {
    FLEET: lambda app: app.view.fleet, HEAT: lambda app: app.view.heat, SITES: lambda app: app.view.sites,
    WORST: lambda app: app.view.worst, JOBS: lambda app: app.view.jobs, EVENTS: lambda app: app.view.events,
    ACTIONS: lambda app: app.view.actions,
}


@dataclass(frozen=True)
class Case:
    """One malformed answer at ``target``: ``bad`` makes it of the good document; the banner names ``path`` and
    says ``says``."""

    name: str
    target: str
    bad: Callable[[Any], Any]
    says: str

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]


CASES: Final = [
    Case("fleet a list", FLEET, lambda d: [d], "a list where an object belongs"),
    Case("fleet count as a string", FLEET, put("chips.reporting", "128"),
         "chips.reporting: a string where an integer belongs"),
    Case("fleet NaN", FLEET, put("lost_flops", NAN), "lost_flops: nan where a finite number belongs"),
    Case("fleet required field missing", FLEET, drop("generation"), "generation missing"),
    Case("fleet ratio out of range", FLEET, put("goodput_ratio", 7.0), "goodput_ratio: 7 out of range"),
    Case("fleet integer past I-JSON", FLEET, put("monitor.backlog_messages", 10**30),
         "monitor.backlog_messages: an integer beyond"),
    Case("fleet terminal escape", FLEET, put("culprits.0.id", "\x1b]0;owned\x07"),
         "culprits[0].id: a string with a control character"),
    Case("fleet nested past the parser", FLEET, deep_fleet, "nested deeper than the parser goes"),
    Case("heat cells an object", HEAT, put("ultraservers", {"u0": {"id": "u0"}}),
         "ultraservers: an object where a list belongs"),
    Case("heat odd cells", HEAT, put("ultraservers", [1, None, "u3"]),
         "ultraservers[0]: an integer where an object belongs"),
    Case("heat cell figure as a string", HEAT, put("ultraservers.1.effective_flops", "9e15"),
         "ultraservers[1].effective_flops: a string where a number or null belongs"),
    Case("heat cell without an id", HEAT, drop("ultraservers.0.id"), "ultraservers[0]: id missing"),
    Case("heat id not of the API's form", HEAT, put("ultraservers.0.id", "../../etc"),
         "ultraservers[0].id: '../../etc' is not of the form"),
    Case("heat more rows than a page", HEAT, lambda d: put("ultraservers", d["ultraservers"] * 5_001)(d),
         "ultraservers: 10,002 items where 0 to 10,000 belong"),
    Case("heat gzip bomb", HEAT, raw(gzip.compress(b" " * (9 << 20), 1), headers="Content-Encoding: gzip\r\n"),
         "inflates past 8,388,608 bytes"),
    Case("heat not JSON", HEAT, raw(b"<html>monitor</html>", headers=""), "not JSON"),
    Case("sites a string", SITES, put("sites", "s0"), "sites: a string where a list belongs"),
    Case("sites count as a string", SITES, put("sites.0.unhealthy.chip", "3"),
         "sites[0].unhealthy.chip: a string where an integer belongs"),
    Case("sites not UTF-8", SITES, raw(b'{"sites": "\xff\xfe"}'), "not JSON"),
    Case("worst causes a list", WORST, put("ultraservers.0.lost_by_cause", [1, 2]),
         "ultraservers[0].lost_by_cause: a list where an object belongs"),
    Case("worst over-long string", WORST, put("ultraservers.0.name", "x" * 100_000),
         "ultraservers[0].name: a string of 100,000 characters"),
    Case("jobs rows lists", JOBS, put("jobs", [["lab/pretrain"]]), "jobs[0]: a list where an object belongs"),
    Case("jobs negative chips", JOBS, put("jobs.0.chips", -5), "jobs[0].chips: -5 out of range"),
    Case("events a string", EVENTS, put("events", "boom"), "events: a string where a list belongs"),
    Case("events jobs a string", EVENTS, put("events.0.jobs", "lab/pretrain"),
         "events[0].jobs: a string where a list belongs"),
    Case("events lone surrogate", EVENTS, put("events.0.reasons", ["\ud800"]),
         "events[0].reasons[0]: a string with a control character or a lone surrogate"),
    Case("actions a list", ACTIONS, lambda d: [d], "a list where an object belongs"),
    Case("actions newer schema version", ACTIONS, put("schema_version", 2), "schema_version: 2 where 1 belongs"),
    Case("actions over-long reason", ACTIONS, put("actions.0.reason", "r" * 5_000),
         "actions[0].reason: a string of 5,000 characters"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_bad_answer_is_one_banner_line_and_the_last_good_figures_stay(answers: dict[str, Any],
                                                                              case: Case) -> None:
    """The malformed answer is named on the banner in one line, what it would have replaced stays as the last
    good answer left it, and top is live again at the next good generation."""
    monitor = Monitor(at(answers, 45))
    async with monitor.serving():
        app = follow(monitor)
        async with app.run_test(size=SIZE) as pilot:
            await live_at(pilot, app, 45)
            kept = KEPT[case.target](app)
            monitor.answers = at(answers, 46)
            monitor.answers[case.target] = case.bad(copy.deepcopy(monitor.answers[case.target]))
            await until(pilot, app, lambda: app.health.link == "bad_answer", "BAD ANSWER")
            line = app.health.text
            assert line.startswith(f"BAD ANSWER {case.path}: ")
            assert case.says in line
            assert "\n" not in line
            assert len(line) <= 250
            assert "\x1b" not in line
            assert line in banner(app)
            assert KEPT[case.target](app) == kept
            monitor.answers = at(answers, 47)
            await live_at(pilot, app, 47)


DRILL_CASES: Final = [
    Case("ultraserver nodes a string", US, put("nodes", "n4"), "nodes: a string where a list belongs"),
    Case("ultraserver link without an id", US, drop("links.0.id"), "links[0]: id missing"),
    Case("job a list", JOB, put("job", []), "job: a list where an object belongs"),
    Case("job culprit cost NaN", JOB, put("culprits.0.flops", NAN), "culprits[0].flops: nan where a finite"),
]


@pytest.mark.parametrize("case", DRILL_CASES, ids=[c.name for c in DRILL_CASES])
async def test_a_drill_down_keeps_its_document_and_names_the_bad_answer(answers: dict[str, Any], case: Case) -> None:
    """An UltraServer's or a job's screen whose next answer is malformed keeps the document it shows and says
    why on its banner."""
    monitor = Monitor(at(answers, 45))
    async with monitor.serving():
        app = follow(monitor)
        async with app.run_test(size=SIZE) as pilot:
            await live_at(pilot, app, 45)
            screen = UltraServerScreen("u1") if case.target == US else JobScreen("lab/pretrain")
            await app.push_screen(screen)
            await until(pilot, app, lambda: screen.loads == 1, "the drill-down shown")
            shown = screen.document
            monitor.answers = at(answers, 46)
            monitor.answers[case.target] = case.bad(copy.deepcopy(monitor.answers[case.target]))
            await until(pilot, app, lambda: "BAD ANSWER" in banner(app), "BAD ANSWER on the drill-down's banner")
            assert f"BAD ANSWER {case.path}: " in banner(app)
            assert case.says in banner(app)
            assert screen.document == shown
            monitor.answers = at(answers, 47)
            await until(pilot, app, lambda: screen.loads == 2 and "LIVE" in banner(app), "the drill-down live again")


class TestWhatTheSchemaAllows:
    async def test_a_row_listed_twice_is_shown_once(self, answers: dict[str, Any]) -> None:
        """The worst list naming u1 twice (schema-valid; a table's keys are unique) shows it once."""
        good = at(answers, 45)
        good[WORST]["ultraservers"] = [good[WORST]["ultraservers"][0]] * 2
        monitor = Monitor(good)
        async with monitor.serving():
            app = follow(monitor)
            async with app.run_test(size=SIZE) as pilot:
                await live_at(pilot, app, 45)
                await until(pilot, app, lambda: bool(rows(app, "#worst")), "the worst list drawn")
                assert [r[0] for r in rows(app, "#worst")] == ["s0/u1"]

    async def test_a_name_like_markup_is_drawn_as_it_is_spelled(self, answers: dict[str, Any]) -> None:
        """A job named ``lab/[/x]`` or ``[link=…]`` is text in the jobs table, not Rich markup (``[/x]`` closing
        nothing ended top; a link would be drawn)."""
        good = at(answers, 45)
        jobs = good[JOBS]["jobs"]
        jobs[0]["id"], jobs[1]["id"] = "lab/[/x]", "[link=https://example.invalid]click[/link]"
        monitor = Monitor(good)
        async with monitor.serving():
            app = follow(monitor)
            async with app.run_test(size=SIZE) as pilot:
                await live_at(pilot, app, 45)
                await until(pilot, app, lambda: bool(rows(app, "#jobs")), "the jobs table drawn")
                assert [drawn(r[0]) for r in rows(app, "#jobs")] == ["lab/[/x]",
                                                                     "[link=https://example.invalid]click[/link]"]

    @given(st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs")), max_size=40))
    def test_any_name_a_table_is_given_is_drawn_as_spelled(self, name: str) -> None:
        """What ``fill`` hands a table for a string the checks admit (no control character, no lone surrogate),
        made literal, is drawn as that string and never raises (``\\[`` too, which ``rich.markup.escape``
        drew as ``[``)."""
        assert drawn(literal(name)) == name

    async def test_a_newer_monitors_fields_and_kinds_are_tolerated(self, answers: dict[str, Any]) -> None:
        """Fields the schema does not know (at any depth, of any shape) are left out and a culprit of a kind it
        does not list is shown as spelled: top stays live and draws the figures it knows."""
        good = at(answers, 45)
        good[FLEET]["carbon"] = {"kg_per_s": [1, {"deep": [[["x"]]]}], "unit": None}
        good[FLEET]["monitor"]["gpu_count"] = "many"
        good[FLEET]["culprits"][0]["entity"] = "switch"
        for row in good[HEAT]["ultraservers"]:
            row["rack"] = {"row": 3, "slot": "b"}
        good[EVENTS]["events"][0]["severity"] = ["high"]
        monitor = Monitor(good)
        async with monitor.serving():
            app = follow(monitor)
            async with app.run_test(size=SIZE) as pilot:
                await live_at(pilot, app, 45)
                assert "carbon" not in app.view.fleet  # type: ignore[operator]
                assert [c["id"] for c in app.view.heat] == ["s0/u0", "s0/u1"]
                assert f"costing most switch {good[FLEET]['culprits'][0]['id']}" in text_of(app, "#header")
                assert "BAD ANSWER" not in banner(app)


class TestUnreachable:
    async def test_a_monitor_that_accepts_and_never_answers_is_unreachable_at_the_first_timeout(self) -> None:
        """Every request accepted and never answered: the first poll ends at top's timeout with UNREACHABLE."""
        monitor = Monitor({})
        monitor.answers = dict.fromkeys((FLEET, *TARGETS.values()), HANG)
        async with monitor.serving():
            app = follow(monitor, timeout_s=0.5, interval_s=3600.0)
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, app, lambda: app.polls >= 1, "the first poll")
                assert app.health.text == "UNREACHABLE: no answer within 0.5 s; nothing shown yet"
                assert app.health.text in banner(app)

    async def test_the_fleet_answering_alone_is_not_live(self, answers: dict[str, Any]) -> None:
        """The fleet answers, nothing else does: the banner says which path never answered, not LIVE, and the
        fleet's own figures are shown."""
        monitor = Monitor({FLEET: at(answers, 45)[FLEET]} | dict.fromkeys(TARGETS.values(), HANG))
        async with monitor.serving():
            app = follow(monitor, timeout_s=0.5)
            async with app.run_test(size=SIZE) as pilot:
                # Waited for by its text: on a loaded machine the fleet's own answer may miss 0.5 s once.
                line = "UNREACHABLE: /api/v1/ultraservers: no answer within 0.5 s (and 5 more)"
                await until(pilot, app, lambda: app.health.text == line, "UNREACHABLE naming the heat map's path")
                assert app.health.link == "unreachable"
                assert "lost 6.5 PF/s" in text_of(app, "#header")

    async def test_a_drill_down_that_never_answers_says_so_on_its_banner(self, answers: dict[str, Any]) -> None:
        """An UltraServer's screen whose document stops answering: its banner says UNREACHABLE and names it,
        and what it showed stays."""
        monitor = Monitor(at(answers, 45))
        async with monitor.serving():
            app = follow(monitor, timeout_s=0.5)
            async with app.run_test(size=SIZE) as pilot:
                await live_at(pilot, app, 45)
                screen = UltraServerScreen("u1")
                await app.push_screen(screen)
                await until(pilot, app, lambda: screen.loads == 1, "the UltraServer shown")
                monitor.answers = at(answers, 46) | {US: HANG}
                line = f"UNREACHABLE: {US}: no answer within 0.5 s"
                await until(pilot, app, lambda: line in banner(app), "UNREACHABLE naming it on its banner")
                assert screen.document == answers[US]

    async def test_an_http_error_with_a_hostile_body_is_one_safe_line(self, answers: dict[str, Any]) -> None:
        """A 500 whose error text is 10,000 terminal escapes: one line, cut short, with no escape left in it."""
        body = json.dumps({"error": "\x1b[2J" * 10_000}).encode()
        monitor = Monitor({FLEET: response(body, status="500 Internal Server Error")})
        async with monitor.serving():
            app = follow(monitor)
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, app, lambda: app.polls >= 1, "the first poll")
                assert app.health.text.startswith("UNREACHABLE: 500 ?[2J?[2J")
                assert "\x1b" not in app.health.text
                assert len(app.health.text) <= 250

    async def test_an_answer_over_the_size_bound_is_refused_unread(self, answers: dict[str, Any]) -> None:
        """An events answer announcing 9 MiB: refused before it is read, named on the banner."""
        monitor = Monitor(at(answers, 45))
        async with monitor.serving():
            app = follow(monitor)
            async with app.run_test(size=SIZE) as pilot:
                await live_at(pilot, app, 45)
                monitor.answers = at(answers, 46)
                monitor.answers[EVENTS] = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                           b"Content-Length: 9437184\r\n\r\n")
                await until(pilot, app, lambda: app.health.link == "unreachable", "UNREACHABLE")
                assert app.health.text == (f"UNREACHABLE: {EVENTS.partition('?')[0]}: response body of 9437184 "
                                           "bytes (at most 8388608)")
                assert app.view.events == answers[EVENTS]["events"]
