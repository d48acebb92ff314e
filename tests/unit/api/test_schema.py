"""The read API's JSON Schema (docs/api.schema.json) against the documents a real monitor serves
(tests/read_api_fixture.py): each endpoint's answer, errors included, validates against its definition, and
the schema is strict enough to catch a field the code adds without documenting it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.read_api_fixture import Monitored, monitored

SCHEMA = json.loads((Path(__file__).resolve().parents[3] / "docs" / "api.schema.json").read_text())


@pytest.fixture(scope="module")
def monitor() -> Monitored:
    """The demo monitor with NeuronLink 224 of u1 degraded, built once for the module."""
    return monitored()


def validator(definition: str) -> jsonschema.protocols.Validator:
    """Return a validator of one ``$defs`` definition of the schema."""
    return jsonschema.Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{definition}"})


async def served(monitor: Monitored, target: str) -> tuple[str, Any]:
    path, _, query = target.partition("?")
    status, body = await monitor.api().answer(path, query)
    return status, json.loads(body)


class TestSchema:
    def test_is_a_valid_2020_12_schema(self) -> None:
        """The schema itself is valid JSON Schema (draft 2020-12)."""
        jsonschema.Draft202012Validator.check_schema(SCHEMA)

    @pytest.mark.parametrize(("target", "definition"), [
        ("/api/v1/", "index"), ("/api/v1/fleet", "fleet"), ("/api/v1/sites", "sites"),
        ("/api/v1/ultraservers", "ultraservers"), ("/api/v1/ultraservers?sort=lost&limit=1", "ultraservers"),
        ("/api/v1/ultraservers/u1", "ultraserver"), ("/api/v1/ultraservers/u0", "ultraserver"),
        ("/api/v1/jobs", "jobs"), ("/api/v1/jobs/lab/pretrain", "job"), ("/api/v1/jobs/lab/finetune", "job"),
        ("/api/v1/events", "events"),
        ("/api/v1/ultraservers?limit=x", "error"), ("/api/v1/ultraservers/u9", "error"), ("/api/v1/racks", "error"),
    ])
    async def test_real_documents_validate(self, monitor: Monitored, target: str, definition: str) -> None:
        """The document a real monitor serves at ``target`` is valid against its definition."""
        _status, document = await served(monitor, target)
        validator(definition).validate(document)

    async def test_full_rows_carry_every_field(self, monitor: Monitored) -> None:
        """Without fields= every UltraServer row is a whole ``ultraserver_row``; with it, only those fields."""
        _status, document = await served(monitor, "/api/v1/ultraservers")
        for row in document["ultraservers"]:
            validator("ultraserver_row").validate(row)
        _status, document = await served(monitor, "/api/v1/ultraservers?fields=effective_share,site")
        validator("ultraservers").validate(document)
        assert {tuple(row) for row in document["ultraservers"]} == {("id", "index", "site", "effective_share")}

    def test_every_endpoint_of_the_index_has_a_definition(self) -> None:
        """Each endpoint the index names (the actions' excepted: docs/actions.md) has a schema definition."""
        assert {"fleet", "sites", "ultraservers", "ultraserver", "jobs", "job", "events"} <= set(SCHEMA["$defs"])

    async def test_an_undocumented_field_fails(self, monitor: Monitored) -> None:
        """A row with a field the schema does not name is invalid: the schema keeps up with the code."""
        _status, document = await served(monitor, "/api/v1/ultraservers")
        document["ultraservers"][0]["colour"] = "red"
        with pytest.raises(jsonschema.ValidationError):
            validator("ultraservers").validate(document)
