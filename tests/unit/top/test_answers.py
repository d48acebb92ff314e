"""Specification of how ``rainierd top`` reads an answer (rainierd/top/answers.py): the packaged schemas are the
documented ones and ship in the wheel; a real monitor's documents pass unchanged; each kind of malformed value is
refused with where and why in one line; what a newer monitor may add is tolerated; and whatever JSON value stands
anywhere in a document, checking it either returns or raises ``BadAnswerError``, nothing else."""

from __future__ import annotations

import asyncio
import copy
import fnmatch
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rainierd.top.answers import (
    MAX_INTEGER,
    BadAnswerError,
    SchemaError,
    check,
    compile_schema,
    definition_of,
    one_line,
    path_of,
    schema,
)
from rainierd.top.app import TARGETS
from tests.read_api_fixture import monitored
from tests.unit.top.test_hostile import GOOD_ACTIONS

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = ("api.schema.json", "actions.schema.json")
TARGETS_READ = [*TARGETS.values(), "/api/v1/fleet", "/api/v1/ultraservers/u1", "/api/v1/jobs/lab%2Fpretrain",
                "/api/v1/ultraservers?site=s0&sort=effective_share&limit=500&fields=site,state"]


@pytest.fixture(scope="module")
def documents() -> dict[str, Any]:
    """A real monitor's answer at each target top reads (the advisories from tests/unit/top/test_hostile.py)."""
    monitor = monitored()
    api = monitor.api()

    async def ask() -> dict[str, Any]:
        out = {}
        for target in TARGETS_READ:
            if target.startswith("/api/v1/actions"):
                continue
            path, _, query = target.partition("?")
            status, body = await api.answer(path.replace("%2F", "/"), query)
            assert status.startswith("200"), (target, status)
            out[target] = json.loads(body)
        return out

    out = asyncio.run(ask())
    out[TARGETS["actions"]] = copy.deepcopy(GOOD_ACTIONS)
    return out


def refusal(target: str, document: Any) -> str:
    """The reason ``check`` gives for refusing ``document`` at ``target``."""
    with pytest.raises(BadAnswerError) as refused:
        check(target, document)
    assert refused.value.path == path_of(target)
    assert str(refused.value) == f"BAD ANSWER {refused.value.path}: {refused.value.reason}"
    return refused.value.reason


class TestPackagedSchemas:
    @pytest.mark.parametrize("name", SCHEMAS)
    def test_the_packaged_copy_is_the_documented_schema(self, name: str) -> None:
        """rainierd/top/schemas/<name> is byte for byte docs/<name>: the schema the server is tested against."""
        assert (ROOT / "rainierd" / "top" / "schemas" / name).read_bytes() == (ROOT / "docs" / name).read_bytes()

    @pytest.mark.parametrize("name", SCHEMAS)
    def test_the_wheel_carries_it(self, name: str) -> None:
        """pyproject's package data names the packaged copy, so an installed top has its schema."""
        config = tomllib.loads((ROOT / "pyproject.toml").read_text())
        patterns = config["tool"]["setuptools"]["package-data"]["rainierd"]
        assert any(fnmatch.fnmatch(f"top/schemas/{name}", pattern) for pattern in patterns)

    @pytest.mark.parametrize("name", SCHEMAS)
    def test_every_definition_compiles(self, name: str) -> None:
        """Every keyword the schema files use is one the validator reads (it refuses to compile any other)."""
        root = schema(name)
        if "type" in root:  # the actions document is the file's root; the API's are its definitions
            compile_schema(root)
        for definition in root.get("$defs", {}):
            compile_schema(root, definition)

    @pytest.mark.parametrize("node", [
        {"type": "string", "maxLength": 3}, {"oneOf": [{"type": "string"}]}, {"type": "decimal"}, {"minimum": 0},
        {"$ref": "#/$defs/nowhere"}, {"$ref": "#/$defs/a", "type": "object"},
    ])
    def test_a_keyword_it_does_not_read_fails_the_compile(self, node: dict[str, Any]) -> None:
        """A rule the validator would skip is an error at compile time, not a document let through."""
        with pytest.raises(SchemaError):
            compile_schema({"$defs": {"a": node}}, "a")


class TestRealDocuments:
    @pytest.mark.parametrize("target", TARGETS_READ)
    def test_pass_unchanged(self, documents: dict[str, Any], target: str) -> None:
        """A real monitor's answer is returned as it came."""
        assert check(target, documents[target]) == documents[target]

    @pytest.mark.parametrize(("target", "definition"), [
        (TARGETS["heat"], "ultraservers"), ("/api/v1/fleet", "fleet"), ("/api/v1/sites", "sites"),
        ("/api/v1/jobs?sort=lost&limit=100", "jobs"), ("/api/v1/jobs/lab/pre/train", "job"),
        ("/api/v1/jobs/lab%2Fpretrain", "job"), ("/api/v1/ultraservers/u7", "ultraserver"),
        ("/api/v1/events?limit=100", "events"), ("/api/v1/actions?limit=100", None),
    ])
    def test_each_path_has_its_definition(self, target: str, definition: str | None) -> None:
        """Each path top reads is held against its own definition (the actions document is its file's root)."""
        assert definition_of(target.partition("?")[0])[1] == definition

    def test_a_path_top_does_not_read_has_none(self) -> None:
        with pytest.raises(KeyError):
            definition_of("/api/v1/racks")


FLEET = "/api/v1/fleet"


def changed(documents: dict[str, Any], target: str, change: Callable[[Any], None]) -> Any:
    document = copy.deepcopy(documents[target])
    change(document)
    return document


FLEET_CHANGES: list[tuple[Callable[[Any], Any], str]] = [
    (lambda d: d.update(generation="45"), "generation: a string where an integer belongs"),
    (lambda d: d.update(generation=True), "generation: a boolean where an integer belongs"),
    (lambda d: d.update(generation=45.5), "generation: 45.5 where an integer belongs"),
    (lambda d: d.update(generation=2.0**60), "generation: 1.15292e+18 where an integer belongs"),
    (lambda d: d.update(generation=MAX_INTEGER + 1), "generation: an integer beyond +-9.01e+15"),
    (lambda d: d.update(generation=-1), "generation: -1 out of range"),
    (lambda d: d.update(lost_flops=float("inf")), "lost_flops: inf where a finite number belongs"),
    (lambda d: d.update(lost_flops=10**400), "lost_flops: an integer beyond +-1.8e+308"),
    (lambda d: d.update(goodput_ratio=1.5), "goodput_ratio: 1.5 out of range"),
    (lambda d: d["culprits"][0].update(flops=0.0), "culprits[0].flops: 0 out of range"),
    (lambda d: d.pop("tick"), "tick missing"),
    (lambda d: [d.pop("tick"), d.pop("monitor")], "tick missing (and 1 more)"),
    (lambda d: d["chips"].update(total=None), "chips.total: null where an integer belongs"),
    (lambda d: d.update(culprits=[{}] * 21), "culprits: 21 items where 0 to 20 belong"),
    (lambda d: d["culprits"][0].update(ultraserver="u1\n"), "culprits[0].ultraserver: a string with a control"),
    (lambda d: d["culprits"][0].update(ultraserver="U1"), "culprits[0].ultraserver: 'U1' is not of the form"),
    (lambda d: d["culprits"][0].update(job="j" * 1025), "culprits[0].job: a string of 1,025 characters"),
    (lambda d: d["culprits"][0].update(job="\x9b31m"), "culprits[0].job: a string with a control character"),
    (lambda d: d["unhealthy"]["chip"].update(failed=[]), "unhealthy.chip.failed: a list where an integer"),
]


class TestRefused:
    @pytest.mark.parametrize(("change", "reason"), FLEET_CHANGES, ids=[reason for _, reason in FLEET_CHANGES])
    def test_fleet(self, documents: dict[str, Any], change: Callable[[Any], None], reason: str) -> None:
        """Each kind of malformed value in /fleet, refused with where it is and what is wrong."""
        assert refusal(FLEET, changed(documents, FLEET, change)).startswith(reason)

    def test_an_actions_document_with_no_cause_or_a_newer_version(self, documents: dict[str, Any]) -> None:
        """minItems and const hold: an advisory without a cause, a schema version top does not know."""
        target = TARGETS["actions"]
        assert refusal(target, changed(documents, target, lambda d: d["actions"][0].update(causes=[]))) == (
            "actions[0].causes: 0 items where 1 to 10,000 belong")
        assert refusal(target, changed(documents, target, lambda d: d.update(schema_version=2))) == (
            "schema_version: 2 where 1 belongs")
        assert refusal(target, changed(documents, target, lambda d: d["brake"].update(scope="rack:1"))).startswith(
            "brake.scope: 'rack:1' is not of the form")

    def test_a_reason_is_one_safe_line(self) -> None:
        """Where a refusal is and what the sender wrote are cut, and no control character reaches the banner."""
        reason = refusal(FLEET, {f"\x1b{'k' * 200}": 1})
        assert reason == "generation missing (and 20 more)"
        assert one_line("a\x1b[2Jb\nc\ud800", 80) == "a?[2Jb?c?"
        assert one_line("x" * 500, 20) == "x" * 17 + "..."


class TestTolerated:
    def test_fields_a_newer_monitor_adds_are_left_out(self, documents: dict[str, Any]) -> None:
        """Unknown fields at every level, whatever they hold, are dropped; the known ones are kept."""
        document = changed(documents, FLEET, lambda d: d.update(carbon={"x": [float("nan"), "\x1b"]}))
        document["monitor"]["gpus"] = "many"
        document["unhealthy"]["chip"]["melted"] = -1
        document["culprits"][0]["rack"] = [[[]]]
        assert check(FLEET, document) == documents[FLEET]

    def test_a_value_outside_an_enum_is_kept_as_spelled(self, documents: dict[str, Any]) -> None:
        """A new state or kind (a newer monitor's) is shown as it is; its type still holds."""
        document = changed(documents, FLEET, lambda d: d["culprits"][0].update(entity="switch"))
        document["loss_model"] = "per_rack"
        assert check(FLEET, document) == document
        assert refusal(FLEET, changed(documents, FLEET, lambda d: d.update(loss_model=3))) == (
            "loss_model: an integer where a string belongs")

    def test_an_integer_spelled_as_a_float_is_an_integer(self, documents: dict[str, Any]) -> None:
        """``45.0`` where an integer belongs is read as ``45`` (JSON Schema's integer), and stays an int."""
        checked = check(FLEET, changed(documents, FLEET, lambda d: d.update(generation=45.0)))
        assert checked["generation"] == 45
        assert type(checked["generation"]) is int


# Any JSON value json.loads can return: non-finite floats, huge integers, lone surrogates and control
# characters among them.
TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=20)
JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def places(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (keys and indexes)."""
    out = [where]
    if isinstance(value, dict):
        for key, item in value.items():
            out += places(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += places(item, (*where, index))
    return out


class TestAnyValueAnywhere:
    @pytest.mark.parametrize("target", ["/api/v1/fleet", "/api/v1/ultraservers/u1", TARGETS["heat"],
                                        TARGETS["events"], TARGETS["actions"]])
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_returns_or_refuses(self, documents: dict[str, Any], target: str, data: st.DataObject) -> None:
        """Any JSON value put anywhere in a real document: ``check`` returns a document or raises
        BadAnswerError, and what it returns passes again unchanged."""
        document = copy.deepcopy(documents[target])
        where = data.draw(st.sampled_from(places(document)))
        value = data.draw(JSON)
        if not where:
            document = value
        else:
            holder = document
            for step in where[:-1]:
                holder = holder[step]
            holder[where[-1]] = value
        try:
            checked = check(target, document)
        except BadAnswerError as refused:
            line = str(refused)
        else:
            assert check(target, checked) == checked
            return
        assert "\n" not in line
