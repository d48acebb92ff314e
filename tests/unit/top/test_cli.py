"""Specification of ``rainierd top``'s and ``rainierd run --top``'s command lines (rainierd/top/launch.py):
what they refuse, in one line with exit code 2, before any terminal is taken over."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rainierd.cli import main
from rainierd.top.launch import NO_TEXTUAL


@pytest.mark.parametrize(("argv", "says"), [
    (["--url", "ftp://monitor"], "--url: 'ftp://monitor' must start http:// or https://"),
    (["--url", "https://sre:secret@monitor:9780"], "--url: a URL must not hold credentials"),
    (["--url", "https://monitor:9780", "--basic-auth-user", "sre"], "--basic-auth-user wants"),
    (["--url", "https://monitor:9780", "--interval", "0"], "--interval must be > 0"),
    (["--url", "https://monitor:9780", "--ca-file", "/nonexistent/ca.crt"], "--ca-file:"),
])
def test_refused_in_one_line(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "secret" not in err
    assert len(err.strip().splitlines()) == 1


def test_without_textual_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for name in [m for m in sys.modules if m == "textual" or m.startswith(("textual.", "rainierd.top."))]:
        if name != "rainierd.top.launch":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "textual", None)  # import textual raises ImportError
    assert main(["top", "--url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.strip() == NO_TEXTUAL


def test_run_top_refuses_a_monitor_behind_a_web_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With TLS or basic auth on the monitor, ``run --top`` cannot follow it without credentials: it says how
    to run the two apart instead of showing a screen that can only say unreachable."""
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users: {}\n")
    assert main(["run", "--top", "--web-config-file", str(web)]) == 2
    assert "rainierd top --url https://" in capsys.readouterr().err
