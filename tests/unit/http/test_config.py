"""Specification of the HTTP edge's configuration as the settings build it
(``Settings.http_config``): every HTTP setting reaches it, and the bridge
listens where its own setting says."""

from __future__ import annotations

from pathlib import Path

import pytest

from rainierd.errors import ConfigError
from rainierd.http.config import HttpConfig
from rainierd.http.webconfig import WebConfig
from rainierd.settings import load_settings
from tests.unit.http.test_webconfig import HASH


class TestFromSettings:
    def test_every_http_setting_reaches_the_config(self, tmp_path: Path) -> None:
        """The listen address, the web config file's users and the three limits are the config's."""
        web_file = tmp_path / "web.yml"
        web_file.write_text(f"basic_auth_users:\n  prometheus: {HASH}\n")
        settings = load_settings({"metrics_addr": "0.0.0.0:9100", "web_config_file": web_file,
                                  "http_max_connections": 10, "http_max_handshakes": 3,
                                  "http_unauthenticated_idle_s": 2.5})
        assert settings.http_config() == HttpConfig(
            host="0.0.0.0", port=9100, web=WebConfig(tls=None, basic_auth_users=(("prometheus", HASH.encode()),)),
            max_connections=10, max_handshakes=3, unauthenticated_idle_s=2.5)

    def test_the_defaults_are_the_edges(self) -> None:
        """With nothing set: loopback 9780, no web config, and the edge's own default limits."""
        assert load_settings({}).http_config() == HttpConfig(host="127.0.0.1", port=9780)

    def test_another_listen_address(self) -> None:
        """The bridge's listen address replaces metrics_addr; the rest stays the settings'."""
        settings = load_settings({"bridge_listen": "127.0.0.1:9781", "http_max_connections": 9})
        config = settings.http_config(settings.bridge_listen)
        assert (config.host, config.port, config.max_connections) == ("127.0.0.1", 9781, 9)

    def test_an_unusable_web_config_is_a_config_error(self, tmp_path: Path) -> None:
        """A web config file that does not exist is refused when the config is built, naming the file."""
        settings = load_settings({"web_config_file": tmp_path / "nope.yml"})
        with pytest.raises(ConfigError, match=r"nope\.yml"):
            settings.http_config()
