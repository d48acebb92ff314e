"""Specification of the command line: each role's flags are generated from the
settings model, list exactly the settings that role reads, each with help, and
each reaches its setting (docs/settings.md, generated from the same model, is
tests/unit/docs/test_reference.py's); the utility commands keep working; every
wrong invocation is one line and exit 2."""

from __future__ import annotations

import json
import re
import socket
import tomllib
from pathlib import Path
from typing import Any

import pytest

from rainierd import __version__, _version, cli
from rainierd.cli import command_settings, main
from rainierd.promrules import RULES_DIR
from rainierd.settings import Settings, flag_name

ROOT = Path(__file__).parents[2]

MQTT = ["mqtt_url", "mqtt_username", "mqtt_ca_file", "mqtt_cert_file", "mqtt_key_file", "mqtt_client_id",
        "mqtt_qos", "mqtt_protocol", "mqtt_keepalive_s", "mqtt_reconnect_max_s"]
FLEET = ["topology", "efa_ports_per_node"]
SIMULATOR = ["ticks", "seed", "encoding", "batch_nodes", "scenario", "fault_acceleration", "noise", "time_scale",
             "profile", "sim_jobs", "truth_file"]
MONITOR = ["stale_after_ticks", "max_frame_bytes", "max_clock_skew_s", "reconnect_grace_s", "state_file",
           "max_seq_jump", "max_backlog_bytes", "share_frames_per_tick", "share_bytes_per_tick", "max_share_topics",
           "max_entity_series", "max_jobs", "shard", "feed_lost_share", "feed_hold_s", "counter_rate_margin",
           "telemetry_input",
           "actions_dry_run", "actions_hold_s", "actions_expired_keep_s", "actions_brake_max_nodes",
           "actions_brake_max_fraction", "actions_brake_window_s", "actions_lemon_flags", "actions_lemon_days",
           "actions_restart_s", "actions_horizon_s", "actions_reset_escalate_s", "actions_reset_brake_max_nodes"]
MONITOR += ["webhook_url", "webhook_token_file", "webhook_ca_file", "webhook_queue_size", "webhook_max_attempts",
            "webhook_timeout_s"]
AGGREGATOR = ["tick_s", "batch_nodes", "shard", "max_frame_bytes", "share_frames_per_tick", "share_bytes_per_tick",
              "max_share_topics"]
HTTP = ["metrics_addr", "web_config_file"]
HEALTHCHECK = ["healthcheck_user", "healthcheck_password_file"]  # its --basic-auth-user and --basic-auth-password-file
SERVER = ["http_max_connections", "http_max_handshakes", "http_unauthenticated_idle_s"]
LOG = ["log_format", "log_level"]
BRIDGE = ["bridge_listen", "ecc_counts", "sample_max_lag_s", "web_config_file"]  # its --listen, TLS and auth

# What each command reads, so what its --help lists; written out, so a change is a decision.
ROLE_SETTINGS: dict[str, set[str]] = {
    "run": {*MQTT, *FLEET, "tick_s", *SIMULATOR, *MONITOR, *HTTP, *SERVER, *LOG},
    "simulate": {*MQTT, *FLEET, "tick_s", *SIMULATOR, *HTTP, *SERVER, *LOG},
    "monitor": {*MQTT, *FLEET, "tick_s", *MONITOR, *HTTP, *SERVER, *LOG},
    "aggregate": {*MQTT, *FLEET, *AGGREGATOR, *HTTP, *SERVER, *LOG},
    "bridge": {*MQTT, *FLEET, *BRIDGE, *SERVER, *LOG},
    "jobs": {*MQTT, *FLEET, *LOG},
    "healthcheck": {*HTTP, *HEALTHCHECK},
}
ARGV = {"run": ["run"], "simulate": ["simulate"], "monitor": ["monitor"], "aggregate": ["aggregate"],
        "healthcheck": ["healthcheck"],
        "bridge": ["bridge", "neuron-monitor", "--node", "n0"], "jobs": ["jobs", "slurm"]}

# A value off the default for every setting a flag can carry: (command-line text, the setting it makes).
VALUES: dict[str, tuple[str, Any]] = {
    "mqtt_url": ("mqtts://broker.example:8884", "mqtts://broker.example:8884"),
    "mqtt_username": ("rainierd", "rainierd"),
    "mqtt_ca_file": ("ca.pem", Path("ca.pem")),
    "mqtt_cert_file": ("client.pem", Path("client.pem")),
    "mqtt_key_file": ("client.key", Path("client.key")),
    "mqtt_client_id": ("collector-7", "collector-7"),
    "mqtt_qos": ("1", 1),
    "mqtt_protocol": ("3.1.1", "3.1.1"),
    "mqtt_keepalive_s": ("45", 45),
    "mqtt_reconnect_max_s": ("15", 15.0),
    "topology": ("ultraserver", "ultraserver"),
    "efa_ports_per_node": ("8", 8),
    "tick_s": ("0.5", 0.5),
    "ticks": ("12", 12),
    "seed": ("9", 9),
    "encoding": ("json", "json"),
    "batch_nodes": ("0", 0),
    "scenario": ("faults.toml", Path("faults.toml")),
    "fault_acceleration": ("100", 100.0),
    "noise": ("0.5", 0.5),
    "time_scale": ("60", 60.0),
    "profile": ("realistic", "realistic"),
    "sim_jobs": ("mix", "mix"),
    "truth_file": ("truth.jsonl", Path("truth.jsonl")),
    "metrics_addr": ("0.0.0.0:9999", "0.0.0.0:9999"),
    "web_config_file": ("web.yml", Path("web.yml")),
    "http_max_connections": ("100", 100),
    "http_max_handshakes": ("8", 8),
    "http_unauthenticated_idle_s": ("2.5", 2.5),
    "stale_after_ticks": ("5", 5),
    "max_frame_bytes": ("2048", 2048),
    "max_clock_skew_s": ("30", 30.0),
    "reconnect_grace_s": ("3", 3.0),
    "state_file": ("state.bin", Path("state.bin")),
    "max_seq_jump": ("1000", 1000),
    "max_backlog_bytes": ("2097152", 2_097_152),
    "share_frames_per_tick": ("8", 8.0),
    "share_bytes_per_tick": ("65536", 65_536),
    "max_share_topics": ("1000", 1000),
    "max_entity_series": ("50", 50),
    "max_jobs": ("20", 20),
    "shard": ("1/4", "1/4"),
    "feed_lost_share": ("0.8", 0.8),
    "feed_hold_s": ("90", 90.0),
    "counter_rate_margin": ("1.2", 1.2),
    "telemetry_input": ("batches", "batches"),
    "webhook_url": ("https://hooks.example/rainierd", "https://hooks.example/rainierd"),
    "webhook_token_file": ("token", Path("token")),
    "webhook_ca_file": ("hooks-ca.pem", Path("hooks-ca.pem")),
    "webhook_queue_size": ("50", 50),
    "webhook_max_attempts": ("3", 3),
    "webhook_timeout_s": ("2.5", 2.5),
    "actions_dry_run": ("false", False),
    "actions_hold_s": ("60", 60.0),
    "actions_expired_keep_s": ("120", 120.0),
    "actions_brake_max_nodes": ("30", 30),
    "actions_brake_max_fraction": ("0.2", 0.2),
    "actions_brake_window_s": ("600", 600.0),
    "actions_lemon_flags": ("5", 5),
    "actions_lemon_days": ("7", 7.0),
    "actions_restart_s": ("600", 600.0),
    "actions_horizon_s": ("7200", 7200.0),
    "actions_reset_escalate_s": ("900", 900.0),
    "actions_reset_brake_max_nodes": ("5", 5),
    "bridge_listen": ("0.0.0.0:9782", "0.0.0.0:9782"),
    "ecc_counts": ("cumulative", "cumulative"),
    "sample_max_lag_s": ("90", 90.0),
    "healthcheck_user": ("grafana", "grafana"),
    "healthcheck_password_file": ("password", Path("password")),
    "log_format": ("json", "json"),
    "log_level": ("debug", "debug"),
}


def listed_flags(role: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """Return {flag: its help text} of the settings section of ``role``'s --help."""
    with pytest.raises(SystemExit) as info:
        main([*ARGV[role][:-2], "--help"] if role == "bridge" else [*ARGV[role], "--help"])
    assert info.value.code == 0
    section = capsys.readouterr().out.split("\nsettings:\n", 1)[1]
    entries = re.split(r"\n  (?=--)", "\n" + section)[1:]
    return {entry.split()[0]: " ".join(entry.split()[1:]) for entry in entries}


class TestRoleFlags:
    @pytest.mark.parametrize("role", list(ROLE_SETTINGS))
    def test_help_lists_exactly_the_settings_the_role_reads(
        self, role: str, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A role's --help lists one flag per setting it reads, and no other."""
        assert set(listed_flags(role, capsys)) == {flag_name(name) for name in ROLE_SETTINGS[role]}

    @pytest.mark.parametrize("role", list(ROLE_SETTINGS))
    def test_every_flag_has_help_naming_its_environment_variable(
        self, role: str, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Each flag's help is the setting's description followed by its RAINIERD_* name."""
        listed = listed_flags(role, capsys)
        for name in ROLE_SETTINGS[role]:
            description = Settings.model_fields[name].description
            assert description, f"{name} has no description"
            text = listed[flag_name(name)]
            assert f"RAINIERD_{name.upper()}" in text, (name, text)
            assert " ".join(description.split()[:3]) in text, (name, text)

    @pytest.mark.parametrize("role", list(ROLE_SETTINGS))
    def test_every_flag_reaches_its_setting(self, role: str) -> None:
        """Each flag, given a value off the default, sets exactly that setting."""
        defaults = command_settings(ARGV[role])
        for name in ROLE_SETTINGS[role]:
            text, value = VALUES[name]
            settings = command_settings([*ARGV[role], flag_name(name), text])
            assert getattr(settings, name) == value != getattr(defaults, name), name
            changed = {f for f in Settings.model_fields if getattr(settings, f) != getattr(defaults, f)}
            assert changed == {name}

    def test_every_setting_but_the_secret_is_some_roles_flag(self) -> None:
        """Every setting has a flag in some role except the MQTT password, which a command line would show."""
        assert set(Settings.model_fields) - set().union(*ROLE_SETTINGS.values()) == {"mqtt_password"}
        assert set(VALUES) == set().union(*ROLE_SETTINGS.values())

    @pytest.mark.parametrize(("role", "flag"), [
        ("simulate", "--state-file"), ("monitor", "--scenario"), ("bridge", "--tick"), ("healthcheck", "--topology"),
        ("run", "--mqtt-password"),
    ])
    def test_a_flag_the_role_does_not_read_is_a_usage_error(
        self, role: str, flag: str, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A flag for a setting the role ignores (or the password, never a flag) exits 2 naming it."""
        with pytest.raises(SystemExit) as info:
            command_settings([*ARGV[role], flag, "x"])
        assert info.value.code == 2
        assert flag in capsys.readouterr().err

    def test_flags_beat_the_environment_which_beats_the_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A role's settings come from its flags over RAINIERD_* over --config, as the healthcheck's do."""
        config = tmp_path / "rainierd.toml"
        config.write_text('metrics_addr = "127.0.0.1:1"\nlog_level = "warning"\nseed = 4\n')
        monkeypatch.setenv("RAINIERD_LOG_LEVEL", "error")
        monkeypatch.setenv("RAINIERD_SEED", "5")
        s = command_settings(["--config", str(config), "simulate", "--seed", "6"])
        assert (s.metrics_addr, s.log_level, s.seed) == ("127.0.0.1:1", "error", 6)
        monkeypatch.setenv("RAINIERD_CONFIG", str(config))
        assert command_settings(["healthcheck"]).metrics_addr == "127.0.0.1:1"


class TestUtilities:
    @pytest.fixture
    def at_commit(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """git, as asked in a clean checkout at commit 5d089c5a1b2c (a unit test starts no process)."""
        monkeypatch.setattr(_version, "_git", lambda *args: {"rev-parse": "5d089c5a1b2c", "status": ""}[args[0]])

    @pytest.mark.usefixtures("at_commit")
    def test_version_says_the_commit_in_a_checkout(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd version`, `--version` and `-V` print the package's version and the checkout's commit."""
        assert main(["version"]) == 0
        for flag in ("--version", "-V"):
            with pytest.raises(SystemExit) as info:
                main([flag])
            assert info.value.code == 0
        assert capsys.readouterr().out == f"rainierd {__version__} (commit 5d089c5a1b2c)\n" * 3

    def test_version_marks_a_modified_checkout(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Tracked files that differ from the commit add ``+modified``."""
        monkeypatch.setattr(_version, "_git", lambda *args: {"rev-parse": "5d089c5a1b2c", "status": " M x"}[args[0]])
        assert _version.describe() == f"rainierd {__version__} (commit 5d089c5a1b2c+modified)"

    def test_version_outside_a_checkout_is_the_package_version(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    ) -> None:
        """Installed from a wheel (no pyproject.toml and .git beside the package), git is not asked."""
        monkeypatch.setattr(_version, "_CHECKOUT", tmp_path)
        monkeypatch.setattr(_version, "_git", lambda *args: pytest.fail("git asked outside a checkout"))
        assert _version.describe() == f"rainierd {__version__}"

    def test_schema_is_json_schema(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd schema` prints a JSON Schema document."""
        assert main(["schema"]) == 0
        assert json.loads(capsys.readouterr().out)["$schema"].startswith("https://json-schema.org/")

    def test_rules_default_to_the_packaged_ones(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd rules OUT --for 5s` writes a copy of each rule file shipped inside the package."""
        assert main(["rules", str(tmp_path), "--for", "5s"]) == 0
        written = sorted(Path(line).name for line in capsys.readouterr().out.split())
        assert written == sorted(p.name for p in RULES_DIR.glob("*.yml"))
        assert written

    def test_the_benchmarks_are_no_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`bench` is gone from the command line (the benchmarks run as python -m benchmarks) and its --help."""
        with pytest.raises(SystemExit) as info:
            main(["--help"])
        assert (info.value.code, "bench" in capsys.readouterr().out) == (0, False)
        with pytest.raises(SystemExit) as info:
            main(["bench"])
        assert info.value.code == 2

    def test_top_follows_this_machines_monitor_without_url(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """`rainierd top` without --url follows the monitor at the settings' metrics_addr, a wildcard asked on
        loopback: http://127.0.0.1:9780 by default."""
        assert cli._parse(["top"]).url is None
        assert cli._local_monitor(None) == "http://127.0.0.1:9780"
        monkeypatch.setenv("RAINIERD_METRICS_ADDR", "0.0.0.0:9999")
        assert cli._local_monitor(None) == "http://127.0.0.1:9999"
        monkeypatch.setenv("RAINIERD_METRICS_ADDR", "[::]:9781")
        assert cli._local_monitor(None) == "http://[::1]:9781"


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """Return the one line a wrong invocation printed on stderr (nothing on stdout, no traceback)."""
    out, err = capsys.readouterr()
    assert (out, err.count("\n"), err.startswith("rainierd")) == ("", 1, True), err
    return err


class TestWrongInvocations:
    """Every wrong invocation is one line on stderr and exit 2, never a traceback (issue 37 item 6)."""

    def test_a_bare_call_prints_the_usage(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd` alone prints the usage and every command on stderr, exit 2."""
        with pytest.raises(SystemExit) as info:
            main([])
        out, err = capsys.readouterr()
        assert (info.value.code, out, err.startswith("usage: rainierd")) == (2, "", True)
        assert all(command in err for command in ("run", "simulate", "monitor", "top", "completion", "schema"))

    def test_rules_into_a_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd rules FILE`, a path that exists and is no directory: one line naming it, exit 2."""
        (tmp_path / "taken").write_text("")
        assert main(["rules", str(tmp_path / "taken")]) == 2
        assert "taken exists and is not a directory" in one_line(capsys)

    @pytest.mark.parametrize(("kind", "text", "says"), [
        ("slurm", "{}", "not squeue --json output"),
        ("slurm", "not json", "not JSON"),
        ("kubernetes", "[1, 2]", "bad input"),
    ])
    def test_a_schedulers_bad_output(
        self, kind: str, text: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Output that is not the scheduler's: one line, exit 2, before any broker is asked."""
        (tmp_path / "in.json").write_text(text)
        assert main(["jobs", kind, "--input", str(tmp_path / "in.json"), "--mqtt-url", "mqtt://127.0.0.1:1"]) == 2
        line = one_line(capsys)
        assert (f"rainierd: jobs {kind}: bad input" in line, says in line, "nothing published" in line) == (
            True, True, True)

    @pytest.mark.parametrize("argv", [["run"], ["monitor"], ["aggregate"], ["simulate"]])
    def test_an_address_in_use(self, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        """A metrics address another process holds: one line naming it and --metrics-addr, exit 2, before anything
        starts (no embedded broker, no log line)."""
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            address = f"127.0.0.1:{holder.getsockname()[1]}"
            assert main([*argv, "--metrics-addr", address, "--mqtt-url", "mqtt://127.0.0.1:1"]
                        if argv != ["run"] else [*argv, "--metrics-addr", address]) == 2
        assert one_line(capsys) == (f"rainierd: {address} is already in use (another rainierd?): give this one "
                                    "another address with --metrics-addr HOST:PORT (or RAINIERD_METRICS_ADDR)\n")

    def test_a_bridges_listen_address_in_use(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The bridge's own address is --listen, and says so."""
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            address = f"127.0.0.1:{holder.getsockname()[1]}"
            assert main(["bridge", "neuron-monitor", "--node", "n0", "--listen", address]) == 2
        assert "with --listen HOST:PORT" in one_line(capsys)

    def test_a_bad_scenario_fails_before_the_embedded_broker(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """`rainierd run --scenario` with a misspelt table: one line naming the file, exit 2, and no broker was
        started for it (no log line before the error)."""
        (tmp_path / "s.toml").write_text('[[faults]]\nkind = "nl_down"\ntarget = 1\nat_s = 1\nfor_s = 1\n')
        assert main(["run", "--scenario", str(tmp_path / "s.toml"), "--metrics-addr", "127.0.0.1:0",
                     "--log-format", "json"]) == 2
        assert "unknown table or key 'faults'" in one_line(capsys)


    @pytest.mark.parametrize("argv", [["bridge", "neuron-monitor", "--help"], ["rules", "--help"]])
    def test_other_commands_still_parse(self, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        """The bridge and rules commands keep their own options."""
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
        assert "usage: rainierd" in capsys.readouterr().out


NEURON_LS = ROOT / "tests" / "data" / "neuron-ls"


class TestInventoryFromNeuronLs:
    """`rainierd inventory from-neuron-ls` (docs/real-nodes.md)."""

    def test_writes_the_inventory_and_warns_on_stderr(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Listings named HOST@INSTANCE_ID.json and HOST=FILE, with their UltraServer lines: exit 0, the
        inventory on stdout (one UltraServer of 2 nodes, a lone node), each warning one line on stderr."""
        (tmp_path / "ip-172-32-13-57@i-0011223344556677a.json").write_text((NEURON_LS / "trn2-2.25.json").read_text())
        argv = ["inventory", "from-neuron-ls", "--ultraservers", str(NEURON_LS / "ultraservers-4.txt"),
                "--site", "apse4-dc1", str(tmp_path / "ip-172-32-13-57@i-0011223344556677a.json"),
                f"ip-172-32-11-17={NEURON_LS / 'trn2-2.22.json'}", f"ip-10-0-0-1={NEURON_LS / 'trn2-2.22.json'}"]
        assert main(argv) == 0
        out, err = capsys.readouterr()
        ultraservers = tomllib.loads(out)["site"][0]["ultraserver"]
        assert [(u["name"], [(n["index"], n["hostname"], n.get("instance_id")) for n in u["node"]])
                for u in ultraservers] == [
            ("bog79p1y8tetj5uu", [(0, "ip-172-32-11-17", None), (1, "ip-172-32-13-57", "i-0011223344556677a")]),
            ("ip-10-0-0-1", [(0, "ip-10-0-0-1", None)])]
        assert [line.split(":")[0:2] for line in err.splitlines()] == [["rainierd", " warning"]] * 3

    def test_writes_to_output_when_asked(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--output FILE holds what stdout would, and stdout stays empty."""
        assert main(["inventory", "from-neuron-ls", "--output", str(tmp_path / "fleet.toml"),
                     f"ip-10-0-0-1={NEURON_LS / 'trn2-2.25.json'}"]) == 0
        assert capsys.readouterr().out == ""
        assert tomllib.loads((tmp_path / "fleet.toml").read_text())["site"][0]["ultraserver"][0]["name"] == (
            "ip-10-0-0-1")

    @pytest.mark.parametrize("argv", [
        ["inventory", "from-neuron-ls", f"a={NEURON_LS / 'trn2-2.25.json'}", f"a={NEURON_LS / 'trn2-2.22.json'}"],
        ["inventory", "from-neuron-ls", f"a={NEURON_LS / 'ultraservers-4.txt'}"],
        ["inventory", "from-neuron-ls", "--ultraservers", str(NEURON_LS / "trn2-2.25.json"),
         f"a={NEURON_LS / 'trn2-2.25.json'}"],
        ["inventory", "from-neuron-ls", "--ultraservers", "/nonexistent", f"a={NEURON_LS / 'trn2-2.25.json'}"],
        ["inventory", "from-neuron-ls", str(NEURON_LS / "ultraservers-4.txt")],
    ])
    def test_conflicting_or_bad_input_is_one_line_and_exit_2(
        self, argv: list[str], capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A hostname twice, a file that is no listing, an UltraServer file that is not one or is missing, a
        listing that names no node: nothing on stdout, one line on stderr, exit code 2."""
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert (out, err.count("\n"), err.startswith("rainierd: ")) == ("", 1, True)

    def test_nodes_lists_each_nodes_broker_user_and_names(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`inventory nodes FILE` prints a tab-separated line a present node: n<id> (its broker user), hostname,
        instance id, UltraServer, index; the absent ids are left out."""
        assert main(["inventory", "nodes", str(ROOT / "tests" / "data" / "inventory-two-sites.toml")]) == 0
        lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
        assert [line[0] for line in lines] == ["n0", "n1", "n2", "n3", "n4", "n6", "n8", "n9", "n11"]
        assert lines[5] == ["n6", "ip-10-0-18-10", "i-0a1b2c3d4e5f60722", "u0018", "2"]

    def test_nodes_of_a_bad_inventory_is_one_line_and_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """An inventory that does not load: one line naming it, exit code 2."""
        (tmp_path / "fleet.toml").write_text("[[site]]\n")
        assert main(["inventory", "nodes", str(tmp_path / "fleet.toml")]) == 2
        out, err = capsys.readouterr()
        assert (out, err.count("\n"), str(tmp_path / "fleet.toml") in err) == ("", 1, True)
