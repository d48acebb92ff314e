"""The one writer of a family's ``# HELP`` and ``# TYPE`` lines, for every
family rendered straight to exposition text (the UltraServers', the
entities', the jobs', the drill-down's): what prometheus-client writes for
a registry's families, written once for the rest.

Text format 0.0.4: the lines name the samples as written (a counter's
``_total`` included, when the family is written that way), and a help text
escapes its backslashes and line feeds.
"""

from __future__ import annotations


def family_head(name: str, text: str, kind: str = "gauge") -> str:
    """Return the ``# HELP`` and ``# TYPE`` lines of family ``name``, its help ``text``, of type ``kind``."""
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {kind}\n"
