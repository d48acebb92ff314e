"""Write the policy's table into the documents that restate it: each cause's runbook "Do" (docs/runbooks.md)
and docs/actions.md's policy table, between markers, from ``rainierd/actions/rules.py``.  Run by
``scripts/policy-docs``; tests/unit/actions/test_rules.py fails when a committed document differs from what
this writes, so the runbook an on-call engineer reads cannot disagree with the advisory that paged them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from rainierd.actions.rules import SECTIONS, policy_table, runbook_do

BEGIN: Final = "<!-- policy: written from rainierd/actions/rules.py by scripts/policy-docs; edit the table there -->"
END: Final = "<!-- /policy -->"


def _block(body: str) -> str:
    return f"{BEGIN}\n{body}\n{END}"


def sections(text: str) -> dict[str, str]:
    """Return each ``## `` section of a Markdown document by its title (the heading line included)."""
    out: dict[str, str] = {}
    parts = text.split("\n## ")
    for part in parts[1:]:
        title = part.split("\n", 1)[0].strip()
        out[title] = "## " + part
    return out


def blocks(section: str) -> list[str]:
    """Return the bodies of the written blocks in ``section``."""
    out = []
    rest = section
    while BEGIN in rest:
        rest = rest.split(BEGIN, 1)[1]
        body, rest = rest.split(END, 1)
        out.append(body.strip("\n"))
    return out


def _replace_block(text: str, start: int, stop: int, body: str) -> str:
    """Return ``text`` with the one block inside ``text[start:stop]`` holding ``body``."""
    inside = text[start:stop]
    head, tail = inside.split(BEGIN, 1)
    tail = tail.split(END, 1)[1]
    return text[:start] + head + _block(body) + tail + text[stop:]


def runbooks(text: str) -> str:
    """Return docs/runbooks.md with each cause section's written block as the rules say."""
    for title in SECTIONS:
        start = text.index(f"\n## {title}\n")
        stop = text.find("\n## ", start + 1)
        text = _replace_block(text, start, len(text) if stop < 0 else stop, runbook_do(title))
    return text


def actions(text: str) -> str:
    """Return docs/actions.md with its policy table as the rules say."""
    return _replace_block(text, 0, len(text), policy_table())


def main(docs: str) -> int:
    """Rewrite both documents under ``docs``; return 0."""
    root = Path(docs)
    for name, write in (("runbooks.md", runbooks), ("actions.md", actions)):
        path = root / name
        path.write_text(write(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs"))
