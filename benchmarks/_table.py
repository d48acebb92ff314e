"""How a benchmark prints its report without ``--json``: a Markdown table,
which reads in a terminal and pastes into a document as it is; and
``emit``, the one way a report goes out (``--output`` file, ``--json`` or
the benchmark's own tables).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["emit", "print_table"]


def print_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Print a Markdown table: the header of ``columns``, its rule, then one line of cells a row."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def emit(report: dict[str, Any], tables: Callable[[dict[str, Any]], None], *, output: str | None,
         as_json: bool) -> int:
    """Write ``report`` to ``output`` when given, print it as JSON or through ``tables``; return 0."""
    if output:
        with open(output, "w") as out:
            json.dump(report, out, indent=2)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        tables(report)
    return 0
