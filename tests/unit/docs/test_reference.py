"""The reference documents stay what they describe: docs/settings.md is what
the settings model generates (``python -m rainierd.settings_doc``), and
docs/index.md lists every document in docs/ (issue 37 item 7)."""

from __future__ import annotations

import re
from pathlib import Path

from rainierd.settings import Settings, flag_name
from rainierd.settings_doc import markdown

ROOT = Path(__file__).parents[3]
DOCS = ROOT / "docs"


class TestSettingsReference:
    def test_docs_settings_is_what_the_model_generates(self) -> None:
        """Change a setting (its default, description, flag or readers) and this fails until docs/settings.md is
        regenerated: python -m rainierd.settings_doc > docs/settings.md."""
        assert (DOCS / "settings.md").read_text() == markdown()

    def test_every_setting_has_a_row_with_its_flag_and_variable(self) -> None:
        """One row a setting, naming its flag (none for the secret) and its RAINIERD_* variable."""
        rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", markdown(), re.MULTILINE)}
        assert set(rows) == set(Settings.model_fields)
        for name, row in rows.items():
            assert f"`RAINIERD_{name.upper()}`" in row
            assert (f"`{flag_name(name)}`" in row) != (name == "mqtt_password"), row


class TestDocsIndex:
    def test_every_document_is_listed(self) -> None:
        """docs/index.md links each document in docs/ (and README.md), and every link it has resolves."""
        index = (DOCS / "index.md").read_text()
        links = set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", index))
        assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= links
        assert "../README.md" in links
        assert [link for link in links if not (DOCS / link).exists()] == []
