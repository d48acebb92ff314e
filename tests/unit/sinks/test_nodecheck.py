"""Specification of ``rainierd node-check`` (sinks/nodecheck.py), in process: which advisories are a problem
(exit 1), which are OK (0) and when the monitor cannot say (2), against a real in-process exporter serving a
hand-built ``ActionsView``.  The command itself, its exit codes and its one-second promise are pinned in
tests/integration/test_node_check.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from rainierd.api.actions import ActionsApi
from rainierd.http.client import parse_url
from rainierd.http.server import HttpServer
from rainierd.monitor.snapshot import MonitorSnapshot
from rainierd.sinks.nodecheck import OK, PROBLEM, UNKNOWN, Verdict, check, judge
from tests.actions_views import NAMED_DEMO, advisory, named, snapshot, view
from tests.serving import OK as PROBE_OK
from tests.serving import role_server


def doc(*advisories: object, dry_run: bool = False, age_s: float = 0.0) -> dict[str, object]:
    return view(*advisories, dry_run=dry_run, t_s=time.time() - age_s).document()  # type: ignore[arg-type]


def verdict_of(document: dict[str, object], *, dry_run_counts: bool = False) -> Verdict:
    return judge(document, "trn2-a-0001", now_s=time.time(), max_age_s=300.0, dry_run_counts=dry_run_counts)


class TestJudge:
    @pytest.mark.parametrize("action", ["cordon", "drain", "replace"])
    def test_a_proposed_disruptive_action_is_a_problem(self, action: str) -> None:
        """A proposed cordon, drain or replace is exit 1, its line leading with the action and state."""
        verdict = verdict_of(doc(advisory("trn2-a-0001", action=action)))
        assert verdict == Verdict(PROBLEM, f"{action} proposed: NeuronLink trn2-a-0001/chip3/link1 failed")

    def test_no_advisory_is_ok(self) -> None:
        """No advisory for the node is exit 0, saying so."""
        assert verdict_of(doc()) == Verdict(OK, "no advisory for trn2-a-0001")

    def test_no_advisory_names_the_node_as_the_monitor_resolved_it(self) -> None:
        """With the monitor's name of the node, the line gives its canonical id and hostname (docs/ids.md)."""
        document = doc() | {"node": {"entity": "node", "id": "s0/u0/n1", "index": 1, "hostname": "trn2-a-0001"}}
        assert verdict_of(document) == Verdict(OK, "no advisory for s0/u0/n1 (trn2-a-0001)")

    @pytest.mark.parametrize(("kwargs", "line"), [
        ({"action": "watch"}, "watch proposed: "),
        ({"action": "reset_link"}, "reset_link proposed: "),
        ({"state": "pending"}, "cordon pending: "),
        ({"state": "suppressed", "suppressed_by": "brake"}, "cordon suppressed by brake: "),
        ({"state": "expired"}, "cordon expired: "),
    ])
    def test_what_a_node_automation_must_not_act_on_is_ok_with_a_line(self, kwargs: dict[str, str],
                                                                      line: str) -> None:
        """watch, reset_link, pending, suppressed (the brake must not be routed around) and expired are exit 0,
        the line saying which."""
        verdict = verdict_of(doc(advisory("trn2-a-0001", **kwargs)))  # type: ignore[arg-type]
        assert (verdict.code, verdict.line.startswith(line)) == (OK, True)

    def test_a_dry_run_is_ok_unless_asked(self) -> None:
        """A dry run's proposal is exit 0 (its line says dry run), or 1 with --dry-run-counts."""
        document = doc(advisory("trn2-a-0001"), dry_run=True)
        assert verdict_of(document).code == OK
        assert verdict_of(document).line.startswith("dry run: cordon proposed: ")
        assert verdict_of(document, dry_run_counts=True).code == PROBLEM

    def test_an_old_answer_is_unknown(self) -> None:
        """Advisories older than max_age are exit 2: the monitor stopped analysing."""
        verdict = verdict_of(doc(advisory("trn2-a-0001"), age_s=900.0))
        assert verdict.code == UNKNOWN
        assert "900 s old" in verdict.line

    def test_not_a_document_is_unknown(self) -> None:
        """An answer without an actions list is exit 2."""
        assert verdict_of({"error": "x"}).code == UNKNOWN

    def test_the_line_is_one_line(self) -> None:
        """A reason holding line breaks still makes one line."""
        a = advisory("trn2-a-0001")
        document = doc(a)
        document["actions"][0]["reason"] = "two\nlines\r\nhere"  # type: ignore[index]
        assert verdict_of(document).line == "cordon proposed: two lines here"


class TestAgainstTheMonitor:
    @pytest.fixture
    async def monitor(self) -> AsyncIterator[tuple[HttpServer, list[MonitorSnapshot | None]]]:
        current: list[MonitorSnapshot | None] = [snapshot(view(named(1)))]
        server = role_server(ready=lambda: PROBE_OK)
        server.route("/api/v1/actions", ActionsApi(NAMED_DEMO, lambda: current[0]).serve)
        async with server:
            yield server, current

    async def ask(self, port: int, node: str = "trn2-a-0001") -> Verdict:
        return await check(parse_url(f"http://127.0.0.1:{port}"), node, ssl_context=None, authorization=None,
                           budget_s=5.0)

    async def test_a_proposed_cordon_is_a_problem(self, monitor: tuple[HttpServer, list[object]]) -> None:
        """The monitor's proposed cordon for the node is exit 1."""
        assert (await self.ask(monitor[0].port)).code == PROBLEM

    async def test_another_node_is_ok(self, monitor: tuple[HttpServer, list[object]]) -> None:
        """A node the monitor has no advisory for is exit 0."""
        assert await self.ask(monitor[0].port, "trn2-a-0002") == Verdict(OK, "no advisory for s0/u0/n2 (trn2-a-0002)")

    @pytest.mark.parametrize("node", ["s0/u0/n1", "n1", "trn2-a-0001"])
    async def test_the_node_by_id_hostname_or_index(self, monitor: tuple[HttpServer, list[object]],
                                                    node: str) -> None:
        """The node's id, hostname and n<index> reach the same advisory."""
        assert (await self.ask(monitor[0].port, node)).code == PROBLEM

    @pytest.mark.parametrize("node", ["trn2-b-0001", "n99", "s0/u0/n4"])
    async def test_a_node_the_monitor_does_not_know_is_unknown(self, monitor: tuple[HttpServer, list[object]],
                                                               node: str) -> None:
        """A node the monitor's fleet does not hold (a hostname mismatch) is exit 2 with one line, never OK."""
        verdict = await self.ask(monitor[0].port, node)
        assert verdict == Verdict(UNKNOWN, f"monitor http://127.0.0.1:{monitor[0].port} knows no node {node!r}: "
                                           "give its id (s0/u1/n4), its inventory hostname or n<index>")

    async def test_before_any_analysis_unknown(self, monitor: tuple[HttpServer, list[object]]) -> None:
        """Before the monitor's first analysis (503) the answer is exit 2 with the monitor's reason."""
        monitor[1][0] = None
        verdict = await self.ask(monitor[0].port)
        assert verdict.code == UNKNOWN
        assert verdict.line.endswith("503 no telemetry analysed yet")

    async def test_nothing_listening_unknown(self) -> None:
        """Nothing listening is exit 2: unreachable, connection refused."""
        verdict = await self.ask(1)
        assert verdict == Verdict(UNKNOWN, "monitor http://127.0.0.1:1 unreachable: connection refused")


class TestCommandLine:
    def test_the_cli_runs_it(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``rainierd node-check`` through the command line's parser prints one line and returns its exit code."""
        from rainierd.cli import main  # noqa: PLC0415 - the full command line, only here

        assert main(["node-check", "--node", "n1", "--url", "http://127.0.0.1:1"]) == UNKNOWN
        assert capsys.readouterr().out == "monitor http://127.0.0.1:1 unreachable: connection refused\n"

    def test_a_usage_error_is_unknown(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without --url the plugin exits 2 (unknown), as the protocol reads any code but 0 and 1."""
        from rainierd.sinks.nodecheck import main  # noqa: PLC0415

        assert main(["--node", "n1"]) == UNKNOWN
        assert "--url" in capsys.readouterr().err
