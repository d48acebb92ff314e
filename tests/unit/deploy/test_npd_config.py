"""Specification of the sample node-problem-detector configuration (deploy/node-problem-detector/): its shape is
NPD's custom plugin monitor format, it passes the checks NPD makes when it loads one, and the command it runs is
a valid ``rainierd node-check`` command line.

NPD publishes no JSON Schema; ``NPD_SCHEMA`` is written from its Go types (pkg/custompluginmonitor/types:
``CustomPluginConfig``, ``pluginGlobalConfig``, ``CustomRule``; pkg/types ``Condition``), field for field with
their JSON names, so a misspelt key (which Go's decoder would silently ignore) fails here."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rainierd.sinks import nodecheck

CONFIG = Path(__file__).parents[3] / "deploy" / "node-problem-detector" / "rainierd-plugin.json"

_DURATION = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"  # Go's time.ParseDuration, as NPD parses timeouts
NPD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["plugin", "source", "conditions", "rules"],
    "properties": {
        "plugin": {"const": "custom"},
        "pluginConfig": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "invoke_interval": {"type": "string", "pattern": _DURATION},
                "timeout": {"type": "string", "pattern": _DURATION},
                "max_output_length": {"type": "integer", "minimum": 1},
                "concurrency": {"type": "integer", "minimum": 1},
                "enable_message_change_based_condition_update": {"type": "boolean"},
                "skip_initial_status": {"type": "boolean"},
            },
        },
        "source": {"type": "string", "minLength": 1},
        "metricsReporting": {"type": "boolean"},
        "conditions": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["type", "reason", "message"],
            "properties": {"type": {"type": "string"}, "reason": {"type": "string"}, "message": {"type": "string"}},
        }},
        "rules": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["type", "reason", "path"],
            "properties": {
                "type": {"enum": ["temporary", "permanent"]},
                "condition": {"type": "string"},
                "reason": {"type": "string"},
                "path": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}},
                "timeout": {"type": "string", "pattern": _DURATION},
                "invoke_interval": {"type": "string", "pattern": _DURATION},
            },
        }},
    },
}


def seconds(duration: str) -> float:
    """Return a Go duration of one unit (what the sample uses) in seconds."""
    match = re.fullmatch(r"([0-9.]+)(ms|s|m|h)", duration)
    assert match is not None, duration
    return float(match.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3_600.0}[match.group(2)]


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return json.loads(CONFIG.read_text())


class TestShape:
    def test_the_file_is_npds_custom_plugin_format(self, config: dict[str, Any]) -> None:
        """The sample validates against NPD's custom plugin monitor format, no unknown key anywhere."""
        jsonschema.validate(config, NPD_SCHEMA)

    def test_the_schema_refuses_a_misspelt_key(self, config: dict[str, Any]) -> None:
        """A key NPD does not read (here ``timout``) fails the check, so the check can fail."""
        broken = json.loads(json.dumps(config))
        broken["rules"][0]["timout"] = broken["rules"][0].pop("timeout")
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, NPD_SCHEMA)


class TestNpdsOwnChecks:
    def test_each_permanent_rule_has_a_default_condition(self, config: dict[str, Any]) -> None:
        """Every permanent rule's condition has its default (healthy) state in conditions, as NPD requires."""
        defaults = {c["type"] for c in config["conditions"]}
        assert {r["condition"] for r in config["rules"] if r["type"] == "permanent"} <= defaults

    def test_rule_timeouts_fit_the_global_timeout_and_the_commands_promise(self, config: dict[str, Any]) -> None:
        """No rule's timeout exceeds the global one (NPD refuses that), and node-check's own bound (1 s) fits
        in the rule's, so NPD hears the command's verdict rather than killing it."""
        global_s = seconds(config["pluginConfig"]["timeout"])
        for rule in config["rules"]:
            assert 1.0 < seconds(rule["timeout"]) <= global_s


class TestTheCommand:
    def test_the_rule_runs_a_valid_node_check(self, config: dict[str, Any]) -> None:
        """The rule runs rainierd with arguments node-check's own parser accepts, with TLS and basic auth from
        files, and no --node (NODE_NAME, set by NPD's DaemonSet, names the node)."""
        (rule,) = config["rules"]
        assert Path(rule["path"]).name == "rainierd"
        command, *args = rule["args"]
        parser = argparse.ArgumentParser()
        nodecheck.add_arguments(parser)
        parsed = parser.parse_args(args)
        assert command == "node-check"
        assert (parsed.node, parsed.url.startswith("https://"), parsed.ca_file is not None,
                parsed.basic_auth_password_file is not None) == (None, True, True, True)
