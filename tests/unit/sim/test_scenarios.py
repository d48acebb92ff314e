"""Specification of a scenario file's strictness: a table, key or value it
does not know stops the start with one line naming the file, the fault (or
job) and what is wrong, and never runs a demo with nothing injected (issue 37
item 6: ``[[faults]]``, a misspelt key and a severity of 7 all ran, exit 0).
The scenarios that load, and what their faults become, are test_faults.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rainierd.cli import main
from rainierd.errors import ConfigError
from rainierd.fleet.topology import build_topology
from rainierd.sim.faults import FaultKind
from rainierd.sim.scenarios import load_scenario
from rainierd.sim.workload import load_jobs

DEMO = build_topology("demo")
FAULT = '[[fault]]\nkind = "{kind}"\ntarget = 5\nat_s = 1\n'


def load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    load_scenario(path, DEMO, tick_s=1.0, rng=np.random.default_rng(0))
    load_jobs(path, DEMO, tick_s=1.0)


def fault(kind: str = "nl_degraded", extra: str = "for_s = 10\n") -> str:
    return FAULT.format(kind=kind) + extra


class TestUnknownNames:
    @pytest.mark.parametrize(("text", "says"), [
        (fault().replace("[[fault]]", "[[faults]]"), "unknown table or key 'faults'"),
        ('name = "tour"\n' + fault(), "unknown table or key 'name'"),
        (fault(extra="for_s = 10\nseverty = 0.5\n"), "fault 1: unknown key 'severty'; a fault takes kind, target"),
        ('[[job]]\nid = "a"\nultraservers = [0]\ncheckpoint_every = 60\n', "job 1: unknown key 'checkpoint_every'"),
        ('fault = 3\n', "fault must be an array of tables"),
    ])
    def test_an_unknown_table_or_key_is_refused(self, tmp_path: Path, text: str, says: str) -> None:
        """A table a scenario has no use for, or a key a fault or job does not take, is named in the error."""
        with pytest.raises(ConfigError, match=says):
            load(tmp_path, text)

    def test_an_unknown_kind_lists_the_kinds(self, tmp_path: Path) -> None:
        """The error names the kind given and every kind there is (not Python's enum message)."""
        with pytest.raises(ConfigError) as info:
            load(tmp_path, fault("nl_degradd"))
        assert str(info.value).endswith("fault 1: unknown kind 'nl_degradd'; the kinds are "
                                        + ", ".join(k.value for k in FaultKind))


class TestValues:
    @pytest.mark.parametrize(("kind", "severity", "says"), [
        ("nl_degraded", "7", "nl_degraded's severity must be from 0.125 to 0.875 (1 to 7 of 8 lanes up), not 7"),
        ("nl_degraded", "0", "not 0"),
        ("efa_degraded", "1", "above 0 and below 1"),
        ("efa_slow", "0.5", "above 1 (a latency multiplier)"),
        ("nl_flapping", "2.5", "a whole number of cycles"),
        ("straggler", "-0.1", "above 0 and below 1"),
        ("cooling_inlet", "0", "above 0 (degrees C"),
        ("nl_down", "0.5", "nl_down takes no severity"),
        ("chip_throttle", '"high"', "severity must be a number, not 'high'"),
    ])
    def test_a_severity_outside_its_kinds_range_is_refused(
        self, tmp_path: Path, kind: str, severity: str, says: str,
    ) -> None:
        """Each kind's severity means something (a share left, a multiplier, a count): outside it, an error that
        says the range."""
        extra = f"severity = {severity}\n" + ("" if kind == "nl_flapping" else "for_s = 10\n")
        with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
            load(tmp_path, fault(kind, extra).replace("target = 5", "target = 1"))

    @pytest.mark.parametrize(("extra", "says"), [
        ("for_s = 0\n", "for_s must be above 0"),
        ("for_s = -5\n", "for_s must be above 0"),
        ('for_s = "10"\n', "for_s must be a number"),
        ("for_s = 10\n", None),
    ])
    def test_times_are_numbers_of_seconds(self, tmp_path: Path, extra: str, says: str | None) -> None:
        """for_s is a positive number of seconds (the last case loads)."""
        if says is None:
            load(tmp_path, fault(extra=extra))
            return
        with pytest.raises(ConfigError, match=says):
            load(tmp_path, fault(extra=extra))

    @pytest.mark.parametrize(("text", "says"), [
        (fault().replace("at_s = 1", "at_s = -1"), "at_s must be 0 or more"),
        (fault().replace("target = 5", 'target = "5"'), "target must be a whole number"),
        (fault().replace("target = 5", "target = true"), "target must be a whole number"),
        (fault("nl_flapping", "severity = 4\nfor_s = 30\n"), "nl_flapping takes no for_s"),
    ])
    def test_other_values_are_checked(self, tmp_path: Path, text: str, says: str) -> None:
        """A start before the simulation, an id that is not a number, a length for a flapping link's schedule."""
        with pytest.raises(ConfigError, match=says):
            load(tmp_path, text)


class TestTheCommandLine:
    @pytest.mark.parametrize("text", [
        fault().replace("[[fault]]", "[[faults]]"), fault(extra="for_s = 10\nseverty = 1\n"),
        fault(extra="for_s = 10\nseverity = 7\n"), fault("meteor"),
    ])
    def test_simulate_exits_2_with_one_line(
        self, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """`rainierd simulate --scenario` with each of issue 37's scenarios: one line naming the file, exit 2."""
        (tmp_path / "s.toml").write_text(text)
        assert main(["simulate", "--scenario", str(tmp_path / "s.toml"), "--mqtt-url", "mqtt://127.0.0.1:1"]) == 2
        out, err = capsys.readouterr()
        assert (out, err.count("\n"), err.startswith(f"rainierd: scenario {tmp_path / 's.toml'}")) == ("", 1, True)
