"""How a benchmark prints its report without ``--json``: a Markdown table,
which reads in a terminal and pastes into a document as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["print_table"]


def print_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Print a Markdown table: the header of ``columns``, its rule, then one line of cells a row."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
