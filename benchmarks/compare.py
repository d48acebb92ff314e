"""``python -m benchmarks compare OLD.json NEW.json``: the ratio table a note needs, from two reports of the
same benchmark (a baseline in benchmarks/results/ and a new run, or a before and an after).

Each benchmark's report has its own shape, but every one is JSON objects and lists around numbers, so both
reports are flattened to dotted names (``results[topology=rainier].per_tick_s.total``):

- an object's keys join with dots;
- a distribution (an object of statistics only, ``median``/``p50`` among them) stands for its median, unless
  ``--all`` asks for every statistic;
- the items of a list of objects are named by their leading scalar fields, as few as tell the items apart
  (at most three: ``rows[kind=nl_down,severity=0.5]``), or else by position; a list of numbers by position;
- a list of lists (a raw series, such as soak's ``rss_series``) is left out.

The figures numeric in both reports are tabled with new/old (``--only PART``: those whose name holds PART);
the names found in one report only, the other values that differ and the series left out are listed after
the table.

Exit codes: 0 compared; 2 a file that cannot be read as a JSON object, two reports of different benchmarks
(their ``benchmark`` fields differ), or no figure in common; one line on stderr says which.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks._table import print_table

__all__ = ["HELP", "Comparison", "ReportError", "add_arguments", "compare", "flatten", "load", "run"]

HELP: Final = "compare two reports of one benchmark: each figure's old, new and new/old"

# An object whose keys are all statistics is a distribution, read at its median.
STATISTICS: Final = frozenset({"min", "max", "mean", "median", "stdev", "p50", "p90", "p95", "p99", "p999"})
MEDIANS: Final = ("median", "p50")
IDENTITY_FIELDS: Final = 3  # at most this many leading fields name a list's items

Leaf = str | int | float | bool | None


class ReportError(Exception):
    """A report that cannot be compared: unreadable, not a JSON object, or another benchmark's than its pair."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Two flattened reports side by side: ``rows`` (name, old, new, new/old or None when old is 0 and new
    is not) for every figure numeric in both, in the old report's order, and what the table leaves out."""

    rows: tuple[tuple[str, float, float, float | None], ...]
    only_old: tuple[str, ...]
    only_new: tuple[str, ...]
    changed: tuple[tuple[str, Leaf, Leaf], ...]  # other values (text, flags, null) that differ
    series: tuple[str, ...]  # lists of lists, left out


def load(path: Path) -> dict[str, Any]:
    """Return the JSON object in ``path``; raise ``ReportError`` if it cannot be read or is not an object."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        message = f"cannot read {path}: {exc.strerror or exc}"
        raise ReportError(message) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        message = f"{path} is not JSON: {exc}"
        raise ReportError(message) from exc
    if not isinstance(document, dict):
        message = f"{path} holds a JSON {type(document).__name__}, not a benchmark's report (an object)"
        raise ReportError(message)
    return document


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _figure_of(value: object) -> float | None:
    """Return ``value`` as a figure, or None if it is not a number (text, a flag, null)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _median(value: Mapping[str, Any]) -> float | None:
    """Return a distribution's median, or None if ``value`` is not a distribution."""
    if not value or not set(value) <= STATISTICS or not all(_number(v) for v in value.values()):
        return None
    return next((float(value[key]) for key in MEDIANS if key in value), None)


def _labels(items: Sequence[Any]) -> tuple[list[str], list[str]]:
    """Name each item of a list: objects whose first field is text by that field and as few of the scalar
    fields after it as tell them apart (``IDENTITY_FIELDS`` in all), anything else by position.  Return the
    names and the fields they use."""
    if items and all(isinstance(item, Mapping) and item for item in items):
        first = next(iter(items[0]))
        if all(isinstance(item.get(first), str) for item in items):
            fields: list[str] = []
            for key in list(items[0])[:IDENTITY_FIELDS]:
                if not all(isinstance(item.get(key), str) or _number(item.get(key)) for item in items):
                    break
                fields.append(key)
                labels = [",".join(f"{field}={item[field]}" for field in fields) for item in items]
                if len(set(labels)) == len(labels):
                    return labels, fields
    return [str(i) for i in range(len(items))], []


def flatten(report: Mapping[str, Any], *, every_statistic: bool = False) -> tuple[dict[str, Leaf], list[str]]:
    """Return the report's values by dotted name (distributions at their median unless ``every_statistic``),
    and the names of the lists of lists left out."""
    leaves: dict[str, Leaf] = {}
    series: list[str] = []

    def walk(value: Any, name: str) -> None:
        if isinstance(value, Mapping):
            median = None if every_statistic else _median(value)
            if median is not None:
                leaves[name] = median
                return
            for key, item in value.items():
                walk(item, f"{name}.{key}" if name else str(key))
        elif isinstance(value, list):
            if any(isinstance(item, list) for item in value):
                series.append(name)
                return
            labels, fields = _labels(value)
            for label, item in zip(labels, value, strict=True):
                # The fields in an item's name are not figures of it.
                walk({k: v for k, v in item.items() if k not in fields} if fields else item, f"{name}[{label}]")
        else:
            leaves[name] = value

    walk(report, "")
    return leaves, series


def _ratio(old: float, new: float) -> float | None:
    if old == new:
        return 1.0
    return None if old == 0 else new / old


def compare(old: Mapping[str, Any], new: Mapping[str, Any], *, every_statistic: bool = False,
            only: Sequence[str] = ()) -> Comparison:
    """Return the comparison of two reports (with ``only``, of the names holding one of its parts); raise
    ``ReportError`` if they name different benchmarks or have no figure in common."""
    old_name, new_name = old.get("benchmark"), new.get("benchmark")
    if isinstance(old_name, str) and isinstance(new_name, str) and old_name != new_name:
        message = f"OLD is a report of {old_name!r} and NEW of {new_name!r}"
        raise ReportError(message)
    before, old_series = flatten(old, every_statistic=every_statistic)
    after, new_series = flatten(new, every_statistic=every_statistic)
    if only:
        before, after = ({n: v for n, v in leaves.items() if any(part in n for part in only)}
                         for leaves in (before, after))
    pairs = [(name, _figure_of(value), _figure_of(after.get(name))) for name, value in before.items()]
    rows = tuple((name, a, b, _ratio(a, b)) for name, a, b in pairs if a is not None and b is not None)
    if not rows:
        message = ("the two reports have no figure in common: not the same benchmark?" if not only
                   else f"the two reports have no figure named with {' or '.join(map(repr, only))} in common")
        raise ReportError(message)
    changed = tuple((name, value, after[name]) for name, value in before.items()
                    if name in after and not (_number(value) and _number(after[name])) and value != after[name])
    return Comparison(rows=rows, only_old=tuple(n for n in before if n not in after),
                      only_new=tuple(n for n in after if n not in before), changed=changed,
                      series=tuple(dict.fromkeys([*old_series, *new_series])))


def _figure(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _ratio_cell(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.3f}" if math.isfinite(ratio) else str(ratio)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options."""
    parser.add_argument("old", type=Path, metavar="OLD.json",
                        help="the earlier report (e.g. benchmarks/results/KIND.json)")
    parser.add_argument("new", type=Path, metavar="NEW.json", help="the later report, of the same benchmark")
    parser.add_argument("--all", action="store_true", dest="every_statistic",
                        help="table every statistic of a distribution (p99, max, ...), not only its median")
    parser.add_argument("--only", action="append", default=[], metavar="PART",
                        help="only the figures whose name holds PART (repeatable: any of them)")


def run(args: argparse.Namespace) -> int:
    """Print the table of ``args.old`` against ``args.new`` and what it leaves out; return the exit code."""
    try:
        comparison = compare(load(args.old), load(args.new), every_statistic=args.every_statistic, only=args.only)
    except ReportError as exc:
        print(f"benchmarks compare: {exc}", file=sys.stderr)
        return 2
    print_table(["figure", "old", "new", "new/old"],
                [[name, _figure(old), _figure(new), _ratio_cell(ratio)] for name, old, new, ratio in comparison.rows])
    notes = [(f"only in {args.old}", ", ".join(comparison.only_old)),
             (f"only in {args.new}", ", ".join(comparison.only_new)),
             ("other values that differ", "; ".join(f"{n}: {o!r} -> {v!r}" for n, o, v in comparison.changed)),
             ("series left out", ", ".join(comparison.series))]
    for label, text in notes:
        if text:
            print(f"\n{label}: {text}")
    return 0
