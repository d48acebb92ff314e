"""Specification of settings and the command line's handling of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rainierd.cli import main
from rainierd.errors import ConfigError
from rainierd.settings import Settings, load_settings


class TestPrecedence:
    def test_defaults(self) -> None:
        """With nothing set: demo topology, 1 s ticks, metrics on loopback, no MQTT URL."""
        s = load_settings({})
        assert (s.topology, s.tick_s, s.metrics_addr, s.mqtt_url) == ("demo", 1.0, "127.0.0.1:9780", None)

    def test_flag_beats_env_beats_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A flag overrides RAINIERD_*, which overrides the TOML file, which overrides the default."""
        config = tmp_path / "rainierd.toml"
        config.write_text('tick_s = 2.0\nseed = 7\ntopology = "ultraserver"\n')
        monkeypatch.setenv("RAINIERD_SEED", "8")
        monkeypatch.setenv("RAINIERD_TICK_S", "3.0")
        s = load_settings({"tick_s": 4.0}, config)
        assert (s.tick_s, s.seed, s.topology) == (4.0, 8, "ultraserver")

    def test_the_file_may_be_named_by_the_environment(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a file given, the one RAINIERD_CONFIG names is read; a file given wins over it."""
        named, given = tmp_path / "named.toml", tmp_path / "given.toml"
        named.write_text("seed = 7\n")
        given.write_text("seed = 9\n")
        monkeypatch.setenv("RAINIERD_CONFIG", str(named))
        assert (load_settings({}).seed, load_settings({}, given).seed) == (7, 9)

    def test_password_is_never_shown(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The MQTT password does not appear in the settings' repr."""
        monkeypatch.setenv("RAINIERD_MQTT_PASSWORD", "hunter2")
        s = load_settings({})
        assert "hunter2" not in repr(s)
        assert s.mqtt_password is not None
        assert s.mqtt_password.get_secret_value() == "hunter2"


class TestInvalid:
    @pytest.mark.parametrize(
        ("flags", "named"),
        [
            ({"tick_s": 0}, "tick_s (--tick / RAINIERD_TICK_S)"),
            ({"topology": "mars"}, "topology"),
            ({"topology": "sites=0,ultraservers=4"}, "topology"),
            ({"topology": "sites=9999,ultraservers=999999"}, "topology"),
            ({"batch_nodes": 5_000}, "batch_nodes"),
            ({"max_backlog_bytes": 10}, "max_backlog_bytes"),
            ({"mqtt_url": "http://broker:1883"}, "mqtt_url"),
            ({"mqtt_url": "mqtt://broker:99999"}, "mqtt_url"),
            ({"mqtt_url": "mqtt://user:pw@broker:1883"}, "mqtt_url"),
            ({"metrics_addr": "localhost"}, "metrics_addr"),
            ({"log_format": "xml"}, "log_format"),
            ({"profile": "lifelike"}, "profile"),
        ],
    )
    def test_bad_value_names_the_setting(self, flags: dict[str, object], named: str) -> None:
        """A bad value raises ConfigError whose message names the setting."""
        with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
            load_settings(flags)

    def test_unknown_key_in_file(self, tmp_path: Path) -> None:
        """An unknown key in the config file is an error naming the file and the nearest setting, not ignored."""
        config = tmp_path / "c.toml"
        config.write_text("tick_seconds = 1\n")
        with pytest.raises(ConfigError) as info:
            load_settings({}, config)
        assert str(info.value) == f"config file {config}: 'tick_seconds' is not a setting (did you mean tick_s?)"

    @pytest.mark.parametrize("text", ["TICK_S = 2\n", "[monitor]\ntick_s = 2\n"])
    def test_a_key_is_a_settings_exact_name(self, tmp_path: Path, text: str) -> None:
        """A key is a setting's name as written, at the top level: another case or a table is no setting."""
        config = tmp_path / "c.toml"
        config.write_text(text)
        with pytest.raises(ConfigError, match="is not a setting"):
            load_settings({}, config)

    def test_unreadable_file(self, tmp_path: Path) -> None:
        """A missing, malformed or non-UTF-8 config file, or a directory, is a ConfigError naming it."""
        with pytest.raises(ConfigError, match=r"missing\.toml: No such file"):
            load_settings({}, tmp_path / "missing.toml")
        with pytest.raises(ConfigError, match=f"{tmp_path}: Is a directory"):
            load_settings({}, tmp_path)
        bad = tmp_path / "bad.toml"
        bad.write_text("tick_s = = 1")
        with pytest.raises(ConfigError, match=r"bad\.toml"):
            load_settings({}, bad)
        bad.write_bytes(b"tick_s = '\xff'\n")
        with pytest.raises(ConfigError, match=r"bad\.toml"):
            load_settings({}, bad)


class TestCommandLine:
    def test_bad_setting_exits_2_with_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd run --tick -1` exits 2 and prints one line naming the setting."""
        assert main(["run", "--tick", "-1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert "tick_s (--tick / RAINIERD_TICK_S)" in err[0]

    def test_bad_env_exits_2(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad RAINIERD_* variable exits 2 too."""
        monkeypatch.setenv("RAINIERD_TOPOLOGY", "nope")
        assert main(["monitor"]) == 2
        assert "RAINIERD_TOPOLOGY" in capsys.readouterr().err

    def test_unknown_key_in_the_file_exits_2_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A config file with a key that is no setting stops any role with exit 2 and one line naming both."""
        config = tmp_path / "c.toml"
        config.write_text("seed = 1\nwebhook_uri = 'http://x'\n")
        assert main(["--config", str(config), "monitor"]) == 2
        assert capsys.readouterr().err == (f"rainierd: config file {config}: 'webhook_uri' is not a setting "
                                           "(did you mean webhook_url?)\n")

    def test_unknown_flag_exits_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown flag is a usage error, exit 2."""
        with pytest.raises(SystemExit) as info:
            main(["run", "--frobnicate"])
        assert info.value.code == 2
        assert "frobnicate" in capsys.readouterr().err


class TestClientIds:
    def test_a_given_client_id_is_kept_alone_and_split_when_one_process_has_two_clients(self) -> None:
        """--mqtt-client-id X: a monitor connects as X; in run, simulator and monitor as X-sim and X-monitor."""
        settings = load_settings({"mqtt_client_id": "X"})
        assert settings.mqtt_config(client_id="rainierd-monitor-1").client_id == "X"
        ids = {settings.mqtt_config(client_id="unused", suffix=role).client_id for role in ("sim", "monitor")}
        assert ids == {"X-sim", "X-monitor"}
        assert load_settings({}).mqtt_config(client_id="rainierd-sim-1", suffix="sim").client_id == "rainierd-sim-1"


class TestMqttConfig:
    def test_the_reconnect_cap_reaches_every_client(self) -> None:
        """mqtt_reconnect_max_s (2 s unless set) is the longest wait between reconnect rounds
        (tests/integration/test_failover.py holds a client to it against a refusing broker)."""
        assert Settings().mqtt_config(client_id="x").backoff_cap_s == 2.0
        assert Settings(mqtt_reconnect_max_s=30).mqtt_config(client_id="x").backoff_cap_s == 30.0
