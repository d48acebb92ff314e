"""Specification of ``rainierd top`` on screen (rainierd/top/), driven by Textual's own pilot against a real
in-process read API over HTTP (the demo monitor of tests/read_api_fixture.py: NeuronLink 224 of u1 degraded,
a job on each UltraServer): what the fleet screen shows, the keyboard's way down to the faulty link from the
heat map, a job, a site; and the banner when the monitor is behind, stalls, goes away, or wants TLS and a
password.  The same against a live ``rainierd run`` and in a real terminal: tests/integration/test_top_e2e.py."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from rainierd.monitor.snapshot import MonitorSnapshot, MonitorStatus
from rainierd.mqtt.connection import Connection
from rainierd.top.app import FleetScreen, TopApp
from rainierd.top.heatmap import HeatMap
from rainierd.top.keys import HELP, HelpScreen
from rainierd.top.model import COLOURS
from rainierd.top.screens import EntityScreen, JobScreen, NodeScreen, SiteScreen, UltraServerScreen
from tests.certs import Pki, make_pki
from tests.read_api_fixture import Monitored, monitored
from tests.top_driver import rows, settle, text_of, top_app
from tests.unit.api.test_read_api import Served, serve
from tests.unit.http.test_webconfig import HASH

GREEN = COLOURS[-1]


def CONNECTED(monitor: Monitored) -> MonitorSnapshot:  # noqa: N802 - reads as the snapshot it returns
    """The fixture's snapshot with its broker session up (the fixture's own has never connected)."""
    return dataclasses.replace(monitor.snap, status=MonitorStatus(connection=Connection(connected=True)))
SIZE = (160, 48)
# The fixture's faulty UltraServer and link as the read API names them (docs/ids.md).
US_ID, LINK_ID = "s0/u1", "s0/u1/n4/chip0/link2"
LINK_IN_US = "n4/chip0/link2"  # FAULTY_LINK (224: node 4's link 32, chip 0's ring link) within its UltraServer


@pytest.fixture(scope="module")
def monitor() -> Monitored:
    """The demo monitor with NeuronLink 224 of u1 degraded, built once for the module."""
    return monitored()


@pytest.fixture
async def plain(monitor: Monitored) -> AsyncIterator[Served]:
    async for served in serve(monitor.api(CONNECTED(monitor))):
        yield served


def link_is(app: TopApp, link: str) -> Callable[[], bool]:
    """Whether the banner says ``link`` (live, behind, stalled, unreachable)."""
    return lambda: app.health.link == link


def follow(served: Served, *, interval_s: float = 0.1, **kw: object) -> TopApp:
    return top_app(f"http://127.0.0.1:{served.port}", interval_s=interval_s, **kw)


async def fleet_shown(pilot: object, app: TopApp) -> None:
    await settle(pilot, lambda: isinstance(app.screen, FleetScreen) and app.view.generation == 45  # type: ignore[arg-type]
                 and bool(rows(app, "#worst")), "the fleet screen drawn from generation 45")


class TestFleetScreen:
    async def test_shows_the_faulty_ultraserver_the_job_it_hurts_and_the_event(self, plain: Served) -> None:
        """Header, heat map, worst UltraServers, jobs and the event feed all point at u1 and link 224."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            assert app.health.link == "live"
            header = text_of(app, "#header")
            assert "lost 6.5 PF/s: NeuronLink 6.5 PF/s" in header
            assert "128/128 reporting" in header
            assert "NeuronLink degraded 1" in header
            heat = app.screen.query_one(HeatMap)
            assert [c["id"] for c in heat.layout_.cells] == ["s0/u0", US_ID]
            colours = heat.cells_by_colour()
            assert colours[GREEN] == ["s0/u0"]
            assert US_ID not in colours.get(GREEN, [])
            assert rows(app, "#worst")[0][0] == US_ID
            assert [r[0] for r in rows(app, "#jobs")] == ["lab/pretrain", "lab/finetune"]
            log = app.screen.query_one("#events")
            assert any(f"neuronlink {LINK_ID}  healthy -> degraded" in line.text
                       for line in log.lines)  # type: ignore[attr-defined]

    async def test_c_colours_by_effective_share_against_a_healthy_one(self, plain: Served) -> None:
        """By FP8 kept u0 is green (it loses nothing); by effective share it is green too (it is the healthy
        reference), and u1, at 83 % of u0's share, is not; the legend says which figure."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            assert text_of(app, "#legend").startswith("FP8 kept")
            await pilot.press("c")
            heat = app.screen.query_one(HeatMap)
            assert heat.mode == "peak"
            assert text_of(app, "#legend").startswith(("effective share vs a healthy one", "share vs healthy"))
            assert heat.cells_by_colour()[GREEN] == ["s0/u0"]
            await pilot.press("c")
            assert heat.mode == "kept"

    async def test_event_feed_appends_each_event_once_and_remembers_only_the_window(self, plain: Served) -> None:
        """The API's window of newest events slides: each event joins the feed once, oldest first, and what is
        remembered is that window only (a feed followed for days keeps a bounded set)."""
        app = follow(plain, interval_s=3600.0)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            screen = app.screen
            assert isinstance(screen, FleetScreen)

            def event(tick: int) -> dict[str, object]:
                return {"tick": tick, "t_s": float(tick), "entity": "efa", "id": tick, "before": "healthy",
                        "after": "degraded", "reasons": ["latency"], "jobs": [], "ultraserver": "u0"}

            log = screen.query_one("#events")
            before = len(log.lines)  # type: ignore[attr-defined]
            for generation, window in ((100, [event(2), event(1)]), (101, [event(3), event(2)])):
                view = dataclasses.replace(app.view, fleet={**app.view.fleet, "generation": generation},  # type: ignore[dict-item]
                                           events=window)
                screen.follow(view, app.health)
            lines = [line.text for line in log.lines][before:]  # type: ignore[attr-defined]
            assert [line.split()[1] for line in lines] == ["1", "2", "3"]
            assert screen._shown == {(3.0, "efa", 3, "degraded"), (2.0, "efa", 2, "degraded")}

    async def test_advisories_tab_says_why_it_is_empty(self, plain: Served) -> None:
        """A monitor without the advisory endpoint: the tab says what the monitor answered, not nothing."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            await pilot.press("a")
            assert "advisories: 404" in text_of(app, "#actions-note")


class TestDrillDown:
    async def test_heat_map_to_the_faulty_link(self, plain: Served) -> None:
        """Right to u1 on the heat map, Enter: the UltraServer lists link 224 (``n4/chip0/link2``) as its one
        unhealthy entity; Enter on it: the link's figures against nominal, its cost to the job, the runbook; back,
        to node n4: its NeuronLinks tab leads with the link."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            await pilot.press("right")
            assert text_of(app, "#cell").startswith(f"{US_ID} (site s0)")
            await pilot.press("enter")
            await settle(pilot, lambda: isinstance(app.screen, UltraServerScreen) and app.screen.loads > 0,
                         "the UltraServer screen")
            assert rows(app, "#unhealthy") == [["NeuronLink", LINK_IN_US, "degraded", "lanes,bandwidth", "35"]]
            await pilot.press("enter")
            await settle(pilot, lambda: isinstance(app.screen, EntityScreen) and app.screen.loads > 0,
                         "the link's screen")
            shown = app.screen.text()  # type: ignore[attr-defined]
            assert f"NeuronLink {LINK_ID}  DEGRADED (lanes, bandwidth) since tick 35" in shown
            assert "lanes up    4 / 8" in shown
            assert "costs lab/pretrain" in shown
            assert "runbook docs/runbooks.md#neuronlink-degraded" in shown
            assert text_of(app, "#crumbs") == f"fleet > {US_ID} > {LINK_IN_US}"
            await pilot.press("escape")
            assert isinstance(app.screen, UltraServerScreen)
            await pilot.press("tab")  # to the nodes table
            nodes = [r[0] for r in rows(app, "#nodes")]
            for _ in range(nodes.index("n4")):
                await pilot.press("down")
            await pilot.press("enter")
            await settle(pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen.loads > 0,
                         "node n4's screen")
            assert app.screen.query_one("#kinds").active == "tab-links"  # type: ignore[attr-defined]
            first = rows(app, "#links")[0]
            assert (first[0], first[1]) == ("chip0/link2", "degraded")
            assert "unhealthy: 0 chips, 1 NeuronLinks, 0 EFA ports" in text_of(app, "#title")
            await pilot.press("escape", "escape")
            assert isinstance(app.screen, FleetScreen)

    async def test_job_to_its_culprit(self, plain: Served) -> None:
        """j, Enter on the costliest job: its culprit is link 224; Enter: the link."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            await pilot.press("j", "enter")
            await settle(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.loads > 0, "the job")
            assert "Job lab/pretrain" in text_of(app, "#title")
            assert rows(app, "#culprits")[0][:2] == ["NeuronLink", LINK_ID]
            assert [r[0] for r in rows(app, "#held")] == [US_ID]
            await pilot.press("enter")
            await settle(pilot, lambda: isinstance(app.screen, EntityScreen) and app.screen.loads > 0, "the link")
            assert f"NeuronLink {LINK_ID}" in app.screen.text()  # type: ignore[attr-defined]

    async def test_site_lowest_share_first(self, plain: Served) -> None:
        """s, Enter on the site: its UltraServers, the faulty one first; Enter opens it."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            await pilot.press("s", "enter")
            await settle(pilot, lambda: isinstance(app.screen, SiteScreen) and app.screen.loads > 0, "the site")
            assert [r[0] for r in rows(app, "#ultraservers")] == [US_ID, "s0/u0"]
            await pilot.press("enter")
            await settle(pilot, lambda: isinstance(app.screen, UltraServerScreen), "u1")
            assert app.screen.ultraserver == US_ID  # type: ignore[attr-defined]


class TestBanner:
    async def test_stalled_when_no_new_analysis(self, plain: Served) -> None:
        """The fixture's monitor never analyses again: after stalled_after_s the banner says so."""
        app = follow(plain, stalled_after_s=0.5)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, link_is(app, "stalled"), "STALLED")
            assert "STALLED: no new analysis" in str(app.screen.query_one("#banner").content)  # type: ignore[attr-defined]

    async def test_behind_when_the_newest_sample_is_old(self, monitor: Monitored) -> None:
        old = dataclasses.replace(CONNECTED(monitor), lag_s=42.0)
        async for served in serve(monitor.api(old)):
            app = follow(served)
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot, link_is(app, "behind"), "BEHIND")
                assert "newest sample 42 s old" in app.health.text

    async def test_behind_when_its_broker_session_is_down(self, monitor: Monitored) -> None:
        async for served in serve(monitor.api()):
            app = follow(served)
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot, link_is(app, "behind"), "BEHIND")
                assert "its broker session is down" in app.health.text

    async def test_unreachable_keeps_the_last_figures(self, monitor: Monitored) -> None:
        """The monitor goes away: the banner says unreachable, the heat map keeps what it showed."""
        gen = serve(monitor.api(CONNECTED(monitor)))
        served = await anext(gen)
        app = follow(served)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            await gen.aclose()  # the server stops
            # A request in flight as the server stops is reset; the next ones are refused.
            await settle(pilot, lambda: "connection refused" in app.health.text, "UNREACHABLE: connection refused")
            assert app.health.link == "unreachable"
            assert "showing what it said" in app.health.text
            assert len(app.screen.query_one(HeatMap).layout_.cells) == 2


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


class TestSecurity:
    async def test_tls_and_basic_auth_like_every_client(self, monitor: Monitored, pki: Pki, tmp_path: Path) -> None:
        """Over TLS with the CA and the password file it is live; a wrong password is named, not shown."""
        web_file = pki.directory / "web-top.yml"
        web_file.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                            f"basic_auth_users:\n  prometheus: {HASH}\n")
        good, bad = tmp_path / "good", tmp_path / "bad"
        good.write_text("correct horse\n")
        bad.write_text("wrong\n")
        async for served in serve(monitor.api(CONNECTED(monitor)), web_file):
            url = f"https://localhost:{served.port}"
            app = top_app(url, ca_file=pki.ca_cert, user="prometheus", password_file=good, interval_s=0.1)
            async with app.run_test(size=SIZE) as pilot:
                await fleet_shown(pilot, app)
            app = top_app(url, ca_file=pki.ca_cert, user="prometheus", password_file=bad, interval_s=0.1)
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot, link_is(app, "unreachable"), "refused")
                assert "refused the credentials (401)" in app.health.text
                assert "wrong" not in app.health.text
            app = top_app(url, user="prometheus", password_file=good, interval_s=0.1)  # no CA: not trusted
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot, link_is(app, "unreachable"), "TLS refused")
                assert "TLS failed" in app.health.text


class _Unreachable:
    """A monitor that never answers."""

    async def get(self, target: str) -> dict[str, object]:
        from rainierd.top.source import SourceError  # noqa: PLC0415

        raise SourceError(f"{target}: unreachable")


async def test_a_poll_that_ends_after_the_screens_are_gone_draws_nothing() -> None:
    """A poll waiting on the monitor when the application shuts down finds no screen on the stack: it keeps
    its figures and draws nothing, instead of raising ScreenStackError in its worker (seen once in the unit
    tier on 2026-12-06, in a test that quit while a poll was out)."""
    app = TopApp(_Unreachable())
    assert app.screen_stack == []
    await app.poll()
    assert app.polls == 1
    assert "UNREACHABLE" in str(app.health.link).upper()


class TestKeys:
    async def test_help_filter_and_sort(self, plain: Served) -> None:
        """``?`` shows every key and Escape closes it; on the jobs tab ``/`` keeps the rows holding what is typed
        (Escape clears it), and ``>`` ``>`` ``I`` sort by the goodput column, lowest last."""
        app = follow(plain)
        async with app.run_test(size=SIZE) as pilot:
            await fleet_shown(pilot, app)
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            assert isinstance(app.screen, FleetScreen)
            await pilot.press("j", "slash", *"fine")
            await pilot.pause()
            assert [r[0] for r in rows(app, "#jobs")] == ["lab/finetune"]
            await pilot.press("escape")
            await pilot.pause()
            assert [r[0] for r in rows(app, "#jobs")] == ["lab/pretrain", "lab/finetune"]
            await pilot.press("greater_than_sign", "greater_than_sign", "I")
            await pilot.pause()
            goodput = [float(r[1].rstrip("%")) for r in rows(app, "#jobs")]
            assert goodput == sorted(goodput, reverse=True)


def test_the_docs_quote_the_help() -> None:
    """docs/top.md's Keys block is the help screen's text, so the two never disagree."""
    assert f"```\n{HELP}\n```" in (Path(__file__).resolve().parents[3] / "docs" / "top.md").read_text()
