"""What every read-API endpoint shares: strict query parsing (each parameter
known and at most once), paging bounds, JSON bodies with NaN as ``null``,
and the one-line JSON errors.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import numpy as np

from rainierd._types import F64, I64
from rainierd.errors import RainierdError

DEFAULT_LIMIT: Final = 500
MAX_LIMIT: Final = 10_000
_MAX_OFFSET: Final = 1_000_000_000
_CHUNK: Final = 100  # rows a JSON encoder call at most (~35 KB, well under 1 ms)

Answer: TypeAlias = tuple[str, bytes]  # (HTTP status line, body)


class ApiError(RainierdError):
    """A request the API refuses: its HTTP status line and a one-line reason."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def answer(self) -> Answer:
        """Return (status line, JSON error body)."""
        return self.status, body({"error": self.message})


def bad(message: str) -> ApiError:
    """Return a 400 with ``message``."""
    return ApiError("400 Bad Request", message)


def params(query: str, allowed: Mapping[str, str]) -> dict[str, str]:
    """Return the query's parameters, each of ``allowed`` (name -> what it wants, for the error) at most once;
    raise a 400 ApiError for anything else."""
    want = ", ".join(f"{name}=" for name in allowed) or "no parameters"
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query),
                                       max_num_fields=max(len(allowed), 1))
    except ValueError:
        raise bad(f"want {want}, each at most once") from None
    names = [name for name, _ in pairs]
    if unknown := sorted(set(names) - set(allowed)):
        raise bad(f"unknown parameter {unknown[0][:40]!r}: want {want}")
    if len(set(names)) != len(names):
        raise bad("each parameter at most once")
    return dict(pairs)


def whole(text: str | None, name: str, *, default: int, maximum: int) -> int:
    """Return parameter ``name``'s whole number 0 .. ``maximum`` (``default`` when absent), or raise a 400."""
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or int(text) > maximum:
        raise bad(f"{name}= wants a whole number 0 .. {maximum}")
    return int(text)


@dataclass(frozen=True, slots=True)
class Page:
    """Where a paged answer starts and how many rows it holds at most, and which way it is sorted."""

    sort: str
    descending: bool
    offset: int
    limit: int


def page(given: Mapping[str, str], sorts: Mapping[str, bool], *, default_sort: str, max_limit: int = MAX_LIMIT,
         default_limit: int = DEFAULT_LIMIT) -> Page:
    """Return the paging of ``given`` (sort=, order=, offset=, limit=); ``sorts`` maps each sort key to whether
    it runs descending (worst first) unless order= says otherwise."""
    sort = given.get("sort", default_sort)
    if sort not in sorts:
        raise bad(f"sort= wants one of {', '.join(sorts)}")
    order = given.get("order")
    if order not in (None, "asc", "desc"):
        raise bad("order= wants asc or desc")
    descending = sorts[sort] if order is None else order == "desc"
    return Page(sort, descending, whole(given.get("offset"), "offset", default=0, maximum=_MAX_OFFSET),
                whole(given.get("limit"), "limit", default=min(default_limit, max_limit), maximum=max_limit))


def order(ids: I64, key: F64, *, descending: bool) -> I64:
    """Return ``ids`` sorted by ``key`` (ties by id; an unknown key, NaN, last either way)."""
    signed = -key if descending else key.copy()
    signed[np.isnan(signed)] = np.inf
    return ids[np.lexsort((ids, signed))]


def number(value: float) -> float | None:
    """Return ``value`` as JSON has it (NaN and infinities: null)."""
    return value if np.isfinite(value) else None


def floats(values: F64) -> list[float | None]:
    """Return ``values`` as a list with NaN (unknown) as None."""
    out: list[float | None] = values.tolist()
    if not np.isfinite(values).all():
        out = [v if v == v and abs(v) != float("inf") else None for v in values.tolist()]  # noqa: PLR0124 NaN test
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def body(document: Mapping[str, Any]) -> bytes:
    """Return ``document`` as a compact JSON body (NaN already replaced: ``allow_nan`` off guards it).

    A long list at the top level (the rows of a page) is encoded ``_CHUNK`` rows at a time: the C encoder
    holds the GIL for a whole call, so one call over 10,000 rows (3.4 MB, ~60 ms at rainier) would stall
    the event loop even from a worker thread; between chunks the loop gets its turn.
    """
    parts = []
    for key, value in document.items():
        if isinstance(value, list) and len(value) > _CHUNK:
            rows = ",".join(_dumps(value[i:i + _CHUNK])[1:-1] for i in range(0, len(value), _CHUNK))
            parts.append(f"{_dumps(key)}:[{rows}]")
        else:
            parts.append(f"{_dumps(key)}:{_dumps(value)}")
    return ("{" + ",".join(parts) + "}\n").encode()


def columns(rows: int, named: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Return ``rows`` dicts from equal-length columns."""
    keys = list(named)
    return [dict(zip(keys, values, strict=True)) for values in zip(*named.values(), strict=True)] if rows else []
