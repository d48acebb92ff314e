"""docs/actions.schema.json describes the document every sink serves (``ActionsView.document()``): real
documents of the policy validate against it, and it refuses what the contract does not allow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import ActionPolicy
from rainierd.core.detect import Reason
from tests.unit.actions.test_policy import HOLD, T0, TOPO, health, link_of, loss_charging, membership, run

SCHEMA = json.loads((Path(__file__).parents[3] / "docs" / "actions.schema.json").read_text())


def busy_document() -> dict[str, Any]:
    """Return a document with every state, a tripped brake, a protected job and a lemon."""
    policy = ActionPolicy(TOPO, ActionConfig(brake_max_nodes=2, brake_max_fraction=0.5, lemon_flags=1,
                                             expired_keep_s=3_600))
    jobs = membership(TOPO, {"lab/pretrain": [0]})
    loss = loss_charging(1, [("neuronlink", link_of(1), 0, 1e15)])
    run(policy, health({"neuronlink": [(link_of(1), "down", int(Reason.DOWN))]}), 2 * HOLD, jobs=jobs, loss=loss)
    policy.update(health(), t_s=T0 + 3 * HOLD)  # n1 expires
    links = [(link_of(n), "down", int(Reason.DOWN)) for n in (20, 40, 60, 100)]
    chips = [(9 * TOPO.chips_per_node + 2, "throttled", int(Reason.THROTTLE_FLAG))]
    run(policy, health({"neuronlink": links, "chip": chips}), 2 * HOLD, start=T0 + 4 * HOLD)
    view = policy.update(health({"neuronlink": [*links, (link_of(120), "down", 64)], "chip": chips}),
                         t_s=T0 + 6 * HOLD + 60)
    return json.loads(json.dumps(view.document()))


class TestSchema:
    """The JSON Schema of /api/v1/actions."""

    def test_schema_is_valid(self) -> None:
        """The schema itself is a valid 2020-12 schema."""
        jsonschema.Draft202012Validator.check_schema(SCHEMA)

    def test_a_real_document_validates(self) -> None:
        """A document with pending, proposed, suppressed and expired advisories, a tripped brake and a lemon
        validates."""
        document = busy_document()
        assert {a["state"] for a in document["actions"]} == {"pending", "proposed", "suppressed", "expired"}
        assert document["brake"]["tripped"]
        assert document["lemons"]
        jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)

    @pytest.mark.parametrize(("path", "value"), [
        (("actions", 0, "action"), "reboot"), (("actions", 0, "state"), "done"), (("brake", "tripped"), "yes"),
        (("actions", 0, "suppressed_by"), "whim"), (("schema_version",), 2),
    ])
    def test_refuses_what_the_contract_does_not_allow(self, path: tuple[str | int, ...], value: object) -> None:
        """An unknown action, state, suppression or version, or a mistyped field, fails validation."""
        document = busy_document()
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
